"""MPDATA on every rank of COMM_WORLD against a serial run on rank 0: the owned results, gathered by global
id, must be bitwise equal. Prints "MPDATA-RANKS OK <ranks>" on rank 0; exits non-zero on any mismatch.

Usage: mpiexec -n N python tests/mpi_programs/mpdata_ranks.py [GRID] [STEPS] [LEVELS]
"""

from __future__ import annotations

import math

import numpy as np
from harness import run_program

import gridcomm
from gridcomm.apps.mpdata import run_mpdata


def main(argv: list[str]) -> int:
    grid = argv[1] if len(argv) > 1 else "O16"
    steps = int(argv[2]) if len(argv) > 2 else 12
    levels = int(argv[3]) if len(argv) > 3 else 2
    comm = gridcomm.Communicator()
    failures = 0
    for alpha, fct in ((math.pi / 4, True), (math.pi / 2, False)):
        options = {"levels": levels, "alpha": alpha, "fct": fct, "steps": steps, "return_fields": True}
        distributed = run_mpdata(comm, grid, **options)
        if comm.rank == 0:
            serial = run_mpdata(None, grid, **options)
            a, b = distributed["final"], serial["final"]
            if a.shape != b.shape or not np.array_equal(a, b):
                diff = np.abs(a - b) if a.shape == b.shape else None
                where = [] if diff is None else np.argwhere(diff > 0)[:5].tolist()
                print(
                    f"MPDATA-RANKS MISMATCH ranks={comm.size} alpha={alpha:.4f} fct={fct}: shapes {a.shape} "
                    f"{b.shape}, max |diff| {None if diff is None else diff.max():.3e} at (node, level) {where}",
                    flush=True,
                )
                failures += 1
            if distributed["mass_rel_change"] != serial["mass_rel_change"] or abs(serial["mass_rel_change"]) > 1e-12:
                print(f"MPDATA-RANKS MASS {distributed['mass_rel_change']} vs {serial['mass_rel_change']}", flush=True)
                failures += 1
    failures = comm.mpi.bcast(failures, root=0)
    if comm.rank == 0 and not failures:
        print(f"MPDATA-RANKS OK {comm.size}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    run_program(main)
