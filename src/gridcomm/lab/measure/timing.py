"""Collective timing: every rank runs the same work; a sample counts the slowest rank."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and minimum over samples, each the slowest rank's mean over a batch."""

    median: float
    minimum: float
    samples: int
    calls_per_sample: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "median_s": self.median,
            "min_s": self.minimum,
            "samples": self.samples,
            "calls_per_sample": self.calls_per_sample,
        }


def time_collective(
    mpi_comm: Any,
    run: Callable[[], Any],
    *,
    samples: int = 7,
    min_sample_s: float = 0.02,
    warmup: int = 3,
    finish: Callable[[], Any] | None = None,
) -> Timing:
    """Time ``run()`` on every rank of ``mpi_comm``.

    Batches are sized (the same on every rank) so that one batch lasts at least ``min_sample_s``; each
    sample starts after a barrier and is the slowest rank's time per call. ``finish()`` ends each batch
    before the clock is read (for GPU work: synchronise the device).
    """
    from mpi4py import MPI

    def batch(calls: int) -> float:
        mpi_comm.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        if finish is not None:
            finish()
        return mpi_comm.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX)

    batch(warmup)
    once = batch(1)
    calls = max(1, min(10_000, int(min_sample_s / max(once, 1e-7))))
    per_call = [batch(calls) for _ in range(samples)]
    return Timing(statistics.median(per_call), min(per_call), samples, calls)
