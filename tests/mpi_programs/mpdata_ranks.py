"""MPDATA on every rank of COMM_WORLD against a serial run on rank 0: the owned results, gathered by global
id, must be bitwise equal. Prints "MPDATA-RANKS OK <ranks>" on rank 0; exits non-zero on any mismatch.

Usage: mpiexec -n N python tests/mpi_programs/mpdata_ranks.py [GRID] [STEPS] [LEVELS] [--gpu]

With --gpu the distributed runs keep their fields on the GPUs (CuPy, one GPU per rank, shared where there are
fewer) over every GPU transport that fits (nccl only with a GPU per rank), the seed's host round trip, and CUDA
graphs where the transport allows; the serial reference is still the NumPy run on the CPU. The CUDA kernels
are compiled without fused multiply-adds and do NumPy's operations in NumPy's order, so the results are equal
(np.array_equal: equal values; a zero's sign may differ).
"""

from __future__ import annotations

import math

import numpy as np
from harness import run_program

import gridcomm
import gridcomm.mpilib
from gridcomm.lab.apps.mpdata import run_mpdata


def gpu_cases(comm: gridcomm.Communicator) -> list[dict[str, object]]:
    """(transport, graphs) pairs for --gpu: every GPU transport usable here, graphs where they capture."""
    import cupy

    from gridcomm.gpu import gpus_in_use, use_local_gpu

    use_local_gpu(comm)
    names = ["staged", "ipc", "host", "auto"]
    if gpus_in_use(comm) == comm.size:
        names.append("nccl")  # NCCL refuses two ranks on one GPU
    if gridcomm.mpilib.mpi_cuda_aware():
        names.append("mpi")
    if comm.size == 1:
        names.append("none")
    cases = [{"xp": cupy, "transport": t, "graphs": False} for t in names]
    cases += [{"xp": cupy, "transport": t, "graphs": True} for t in ("ipc", "nccl", "none") if t in names]
    return cases


def compare(comm: gridcomm.Communicator, serial: dict, distributed: dict, alpha: float, fct: bool, case: dict) -> int:
    """Rank 0: 0 when the distributed run's fields and mass equal the serial run's, else 1 (printed)."""
    what = f"ranks={comm.size} alpha={alpha:.4f} fct={fct} " + " ".join(
        f"{k}={getattr(v, '__name__', v)}" for k, v in case.items()
    )
    failures = 0
    a, b = distributed["final"], serial["final"]
    if a.shape != b.shape or not np.array_equal(a, b):
        diff = np.abs(a - b) if a.shape == b.shape else None
        where = [] if diff is None else np.argwhere(diff > 0)[:5].tolist()
        print(
            f"MPDATA-RANKS MISMATCH {what}: shapes {a.shape} {b.shape}, max |diff| "
            f"{None if diff is None else diff.max():.3e} at (node, level) {where}",
            flush=True,
        )
        failures = 1
    if distributed["mass_rel_change"] != serial["mass_rel_change"] or abs(serial["mass_rel_change"]) > 1e-12:
        print(f"MPDATA-RANKS MASS {what}: {distributed['mass_rel_change']} vs {serial['mass_rel_change']}", flush=True)
        failures = 1
    return failures


def main(argv: list[str]) -> int:
    gpu = "--gpu" in argv
    argv = [a for a in argv if a != "--gpu"]
    grid = argv[1] if len(argv) > 1 else "O16"
    steps = int(argv[2]) if len(argv) > 2 else 12
    levels = int(argv[3]) if len(argv) > 3 else 2
    comm = gridcomm.Communicator()
    failures = 0
    cases = gpu_cases(comm) if gpu else [{}]
    for alpha, fct in ((math.pi / 4, True), (math.pi / 2, False)):
        options = {"levels": levels, "alpha": alpha, "fct": fct, "steps": steps, "return_fields": True}
        serial = run_mpdata(None, grid, **options) if comm.rank == 0 else None
        for case in cases:
            distributed = run_mpdata(comm, grid, **options, **case)
            if comm.rank == 0:
                failures += compare(comm, serial, distributed, alpha, fct, case)
    failures = comm.mpi.bcast(failures, root=0)
    if comm.rank == 0 and not failures:
        print(f"MPDATA-RANKS OK {comm.size}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    run_program(main)
