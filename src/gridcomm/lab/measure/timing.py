"""Collective timing: every rank runs the same work; a sample counts the slowest rank."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
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
    return time_interleaved(mpi_comm, {"": run}, samples=samples, min_sample_s=min_sample_s, warmup=warmup,
                            finish=finish)[""]  # fmt: skip


def time_interleaved(
    mpi_comm: Any,
    runs: Mapping[str, Callable[[], Any]],
    *,
    samples: int = 7,
    min_sample_s: float = 0.02,
    warmup: int = 3,
    finish: Callable[[], Any] | None = None,
) -> dict[str, Timing]:
    """Time each of ``runs`` (by name) as ``time_collective`` does, their samples taken in turn (a, b, c, a, b,
    c, ...): on a machine shared with other work each sees the same share of it, so that their ratios hold even
    where their absolute times drift from one second to the next. Before the samples, every run goes through one
    untimed batch of a sample's length, in turn: the first sizes of a GPU bench had run at twice their later
    time for some of the peers (threads and lazy set-up of the libraries still under way)."""
    from mpi4py import MPI

    def batch(run: Callable[[], Any], calls: int) -> float:
        mpi_comm.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        if finish is not None:
            finish()
        return mpi_comm.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX)

    calls = {}
    for name, run in runs.items():
        batch(run, warmup)
        once = batch(run, 1)
        calls[name] = max(1, min(10_000, int(min_sample_s / max(once, 1e-7))))
    for name, run in runs.items():  # one sample's worth each, untimed: what starts slowly has started
        batch(run, calls[name])
    per_call: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(samples):
        for name, run in runs.items():
            per_call[name].append(batch(run, calls[name]))
    return {name: Timing(statistics.median(t), min(t), samples, calls[name]) for name, t in per_call.items()}
