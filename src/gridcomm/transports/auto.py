"""``transport="auto"`` by measurement: each candidate transport runs the plan's own exchange, the fastest wins.

Which transport moves a plan fastest depends on the machine (NVLink or PCIe, how many GPUs, the MPI library),
on the sizes the plan sends and on how many peers it has: on 4 x H200 the ipc all-to-all beat NCCL by 1.2-1.3x
from 2 MiB per peer up, while on 2 cores of a CPU-only machine ``cma`` lost to ``mpi`` for every halo size
measured. A fixed order of preference is wrong somewhere, so an exchanger or transposer built with ``"auto"``
where more than one candidate can move its fields binds each candidate in turn, times a few exchanges of its
own (every rank, the slowest rank counting) and keeps the fastest. Choices are remembered per communicator and
per plan shape (peer count, each peer's bytes rounded up to a power of 2), so that plans of the same shape do
not measure again.

The measured exchanges move the plan's data: halos (or a transposition's destination boxes) are written at
construction, as by ``exchange()``.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..comm import Communicator
from ..errors import ArgumentError
from .base import Transport
from .cma import CmaTransport
from .ipc import IpcTransport
from .mpi import MpiTransport

#: Transports measured against each other, by label, in order of preference where two are within TIE of each
#: other: on the GPU the ones that need no host during an exchange (staged and CUDA-aware mpi are never faster
#: on one node and are taken only when none of these can be); on the host cma (reading on one thread, and on the
#: rank's share of the cores), shm and two of mpi's configurations.
GPU_CANDIDATES: dict[str, str | Transport] = {
    "ipc": "ipc",
    "ipc/copy-engine": IpcTransport(method="copy-engine"),
    "nccl": "nccl",
}
HOST_CANDIDATES: dict[str, str | Transport] = {
    "cma": "cma",
    # Reads on the rank's share of the cores: 1.6x faster than one thread for 256³ float64 on 8 ranks of a 64-core
    # host, slower on 16 (docs/transports.md).
    "cma/threads": CmaTransport(threads=None),
    "shm": "shm",
    "mpi": "mpi",
    # MPI's derived datatypes (no copies of gridcomm's), a send and a receive per peer: the fastest of gridcomm's
    # host variants on 16 ranks of a 64-core Xeon with Open MPI 4.1.4 in 12 of 15 halo cases (104 against 116 µs
    # for packed copies at n = 8, 1 field; 3.0 against 4.4 ms for cma at n = 64, 16 fields) and within 7 % of the
    # neighbourhood collective of the same datatypes where that one was (docs/design.md); on 2 cores with MPICH
    # 1.1-1.9x cma's time.
    "mpi/packing=datatype": MpiTransport(packing="datatype"),
}
TIE = 0.03  # a candidate within 3 % of the fastest that comes earlier in preference wins: no flapping on noise
WARMUP = 2  # exchanges run before timing (connections, first touch, NCCL's first launch)
MIN_TIMED_S = 2e-3  # time at least this long ...
MAX_EXCHANGES = 50  # ... in at most this many exchanges (at least 3)

_CHOICES: weakref.WeakKeyDictionary[Communicator, dict[tuple, str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Measured:
    """What ``"auto"`` measured for one plan: seconds per exchange by candidate label (the slowest rank), the
    label kept, and why, in words."""

    seconds: Mapping[str, float]
    chosen: str
    reason: str


def auto_measurement() -> bool:
    """Whether ``"auto"`` measures (``GRIDCOMM_AUTO`` unset or ``measure``) or takes the first usable transport in
    the fixed order of preference (``GRIDCOMM_AUTO=order``: no exchange at construction)."""
    value = os.environ.get("GRIDCOMM_AUTO") or "measure"
    if value not in ("measure", "order"):
        raise ArgumentError(f"GRIDCOMM_AUTO={value!r}: use 'measure' (the default) or 'order'")
    return value == "measure"


def candidates(on_device: bool) -> dict[str, str | Transport]:
    """The transports ``"auto"`` measures against each other for fields on the GPU or on the host."""
    return dict(GPU_CANDIDATES if on_device else HOST_CANDIDATES)


def usable_candidates(reasons: Mapping[str, str | None], on_device: bool) -> dict[str, str | Transport]:
    """The candidates that can move fields of that memory here, given ``transports.available``'s ``reasons``."""
    from . import _name

    return {label: t for label, t in candidates(on_device).items() if reasons.get(_name(t)) is None}


def plan_shape(comm: Communicator, layout: Any) -> tuple:
    """Collective: a plan's shape for the cache, the same on every rank: per rank, its peer count and each peer's
    bytes sent and received, rounded up to a power of 2, sorted."""

    def rounded(n: int) -> int:
        return 1 << max(0, n - 1).bit_length()

    sends = tuple(sorted(rounded(m.nbytes) for m in layout.sends))
    recvs = tuple(sorted(rounded(m.nbytes) for m in layout.recvs))
    return tuple(comm.mpi.allgather((len(layout.sends), sends, recvs)))


def remembered(comm: Communicator, key: tuple) -> str | None:
    """The label chosen before for a plan of this shape on ``comm``, or None."""
    return _CHOICES.get(comm, {}).get(key)


def remember(comm: Communicator, key: tuple, label: str) -> None:
    _CHOICES.setdefault(comm, {})[key] = label


def time_exchanges(comm: Communicator, exchange: Callable[[], None], synchronize: Callable[[], None]) -> float:
    """Collective: seconds per ``exchange()`` on the slowest rank, after WARMUP of them; the batch is sized on
    rank 0's first timed exchange so that every rank runs the same number."""
    from mpi4py import MPI

    for _ in range(WARMUP):
        exchange()
    synchronize()
    start = time.perf_counter()
    exchange()
    synchronize()
    once = comm.mpi.bcast(time.perf_counter() - start, root=0)
    count = max(3, min(MAX_EXCHANGES, int(MIN_TIMED_S / max(once, 1e-7))))
    comm.mpi.Barrier()
    start = time.perf_counter()
    for _ in range(count):
        exchange()
    synchronize()
    return comm.mpi.allreduce((time.perf_counter() - start) / count, op=MPI.MAX)


def pick(seconds: Mapping[str, float], order: list[str]) -> Measured:
    """The label to keep: the fastest, or an earlier one in ``order`` within TIE of it."""
    fastest = min(seconds.values())
    chosen = next(label for label in order if label in seconds and seconds[label] <= fastest * (1 + TIE))
    timings = ", ".join(f"{label} {t * 1e6:.1f} µs" for label, t in sorted(seconds.items(), key=lambda x: x[1]))
    return Measured(dict(seconds), chosen, f"{chosen}: fastest measured for this plan ({timings} per exchange)")
