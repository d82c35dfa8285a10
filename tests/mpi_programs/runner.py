"""Run the ``check_*`` functions of one module collectively, on every rank, and report per check.

Usage: mpiexec -n N python runner.py MODULE [CHECK ...]
(SIGUSR1 makes a rank print every thread's Python stack to stderr.)

Each check is called as ``check(comm)`` on every rank, with ``comm`` a fresh duplicate of COMM_WORLD (so a
check that fails half-way cannot confuse the runner's own collectives). Exceptions are caught per rank and
printed at once to stderr (so a hang that follows still shows the cause); the tracebacks are gathered to
rank 0, which writes a JSON summary to $GRIDCOMM_CHECK_REPORT (a file) or, without it, prints it on one
line after the marker ``GRIDCOMM_CHECK_RESULTS``. Checks run in the order they are defined; a check
decorated with harness.ranks(...) is skipped on other world sizes.
"""

from __future__ import annotations

import faulthandler
import importlib
import inspect
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mpi4py import MPI

MARKER = "GRIDCOMM_CHECK_RESULTS "


def collect(module, selected: list[str]) -> list[tuple[str, object]]:
    checks = [
        (name, fn)
        for name, fn in vars(module).items()
        if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__
    ]
    checks.sort(key=lambda item: item[1].__code__.co_firstlineno)
    if selected:
        known = dict(checks)
        unknown = [name for name in selected if name not in known]
        if unknown:
            raise SystemExit(f"runner: no check(s) {unknown} in {module.__name__}")
        checks = [(name, known[name]) for name in selected]
    return checks


def main() -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test launcher dumps stacks on a hang
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    module = importlib.import_module(sys.argv[1])
    checks = collect(module, sys.argv[2:])
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if os.environ.get("GRIDCOMM_CHECK_DEVICE", "") == "gpu":
        import gridcomm

        gridcomm.use_local_gpu(world)  # one GPU per rank, before any allocation
    summary = {"module": sys.argv[1], "size": size, "checks": []}
    for name, fn in checks:
        accepts = getattr(fn, "accepts_size", None)
        if accepts is not None and not accepts(size):
            summary["checks"].append({"name": name, "status": "skipped", "seconds": 0.0, "failures": []})
            continue
        if rank == 0:
            print(f"# {name} on {size} rank(s)", flush=True)
        comm = world.Dup()
        start = time.perf_counter()
        failure = None
        try:
            fn(comm)
        except Exception:
            failure = traceback.format_exc()
            print(f"[rank {rank}] {name} FAILED:\n{failure}", file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
        comm.Free()
        failures = world.gather(failure, root=0)
        if rank == 0:
            bad = [{"rank": r, "traceback": tb} for r, tb in enumerate(failures) if tb is not None]
            summary["checks"].append(
                {"name": name, "status": "failed" if bad else "passed", "seconds": round(seconds, 3), "failures": bad}
            )
    if rank == 0:
        text = json.dumps(summary)
        report = os.environ.get("GRIDCOMM_CHECK_REPORT")
        if report:
            Path(report).write_text(text)
        else:
            print(MARKER + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
