"""What the examples share: their command line, the choice of GPU, timing, and the final verdict on rank 0.

Not an example itself: each example imports it (the examples' folder is on the path of a script run from it).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import gridcomm
from gridcomm.device import cupy_or_none, gpu_count


def need(module: str) -> types.ModuleType:
    """``module`` imported, for an example that drives it (torch, JAX). Where it is missing, rank 0 says once what
    to install (instead of one ModuleNotFoundError per rank) and every rank exits with status 1."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 0:
            print(
                f"{sys.argv[0]} needs {module}, which is not installed ({error}); install it with: pip install "
                f"{module}, or pip install 'gridcomm[examples]' for every example's needs",
                file=sys.stderr,
                flush=True,
            )
        sys.exit(1)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every example takes: ``--quick`` (the size the tests run) and ``--cpu``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small problem: a few seconds on 4 ranks sharing 2 cores")
    p.add_argument("--cpu", action="store_true", help="stay on the CPU even where a GPU is usable")
    return p


def usable_cupy() -> types.ModuleType | None:
    """CuPy when it is installed and sees a GPU, else None: gridcomm moves GPU arrays through CuPy."""
    return cupy_or_none() if gpu_count() else None


def say(comm: gridcomm.Communicator, *lines: str) -> None:
    """Print on rank 0 only."""
    if comm.rank == 0:
        print(*lines, sep="\n", flush=True)


def time_per_step(
    comm: gridcomm.Communicator, steps: int, step: Callable[[], Any], sync: Callable[[], Any] | None = None
) -> float:
    """Run ``step`` ``steps`` times between barriers; the slowest rank's seconds per step. On the GPU ``sync`` waits
    for the device, so that the clock stops when the work is done, not when it is enqueued."""
    from mpi4py import MPI

    sync = sync or (lambda: None)
    sync()
    comm.mpi.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return comm.mpi.allreduce(time.perf_counter() - start, op=MPI.MAX) / max(steps, 1)


def verdict(comm: gridcomm.Communicator, name: str, ok: bool | None, what: str) -> None:
    """Rank 0 decides (``ok`` from its comparison with the serial run; other ranks pass None): it prints the
    final line, and every rank exits 1 on a mismatch, so that mpiexec reports the failure too."""
    ok = comm.mpi.bcast(ok, root=0)
    say(comm, f"{name}: {what}: {'OK' if ok else 'MISMATCH'}")
    if not ok:
        sys.exit(1)
