"""A few MPDATA steps on one GPU for a profiler: ``ncu --kernel-name regex:gridcomm_mpdata ... python
benchmarks/profile_mpdata.py [GRID] [LEVELS]`` (gpu_session.sh's profile-mpdata stage). Eager launches (no graph),
one rank, no exchange: the first step compiles the kernels, the later ones are what a profiler should read."""

from __future__ import annotations

import math
import sys

import cupy

from gridcomm.lab.apps.mpdata import setup_mpdata


def main() -> None:
    grid = sys.argv[1] if len(sys.argv) > 1 else "O320"
    levels = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    setup = setup_mpdata(None, grid, levels=levels, alpha=math.pi / 4, xp=cupy)
    setup.solver.run(3)
    print(f"{grid}, {levels} levels: 3 steps done", flush=True)


if __name__ == "__main__":
    main()
