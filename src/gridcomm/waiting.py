"""Waiting for other ranks without hanging: every wait polls, and gives up after a timeout."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# Waits shorter than this spin (yielding the core); longer ones sleep between tests. MPI moves large
# messages in chunks, each needing a test on both sides, so sleeping early would stall every chunk.
_SPIN_S = 1.0
_SLEEP_S = 100e-6
# Tests between two looks at the clock (and yields): each MPI test drives MPI's progress, and a loop that spends
# more on the clock and the yield than on tests moves small messages slower (16 ranks, Open MPI 4.1: a single
# non-blocking collective 53.7 µs polled with a yield per test, 41.0 in a bare loop of tests, 40.7 in MPI's own
# wait; benchmarks/probe_mpi_waits.py, probe-mpi-waits-cpu-16r-20261127T024440Z).
_TESTS_PER_TURN = 8


def poll_until(done: Callable[[], bool], timeout: float, on_timeout: Callable[[float], Exception]) -> None:
    """Call ``done()`` until it returns True; after ``timeout`` seconds raise ``on_timeout(elapsed)``.

    Spins, yielding the core after every few tests so that ranks oversubscribed on few cores do not starve the
    peer they wait for; after a second it sleeps 100 µs between turns.
    """
    if done():
        return
    start = time.perf_counter()
    while True:
        for _ in range(_TESTS_PER_TURN):
            if done():
                return
        elapsed = time.perf_counter() - start
        if elapsed > timeout:
            raise on_timeout(elapsed)
        if elapsed < _SPIN_S:
            os.sched_yield()
        else:
            time.sleep(_SLEEP_S)
