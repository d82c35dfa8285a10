"""``gridcomm bench transpose``: the slab redistribution between the passes of a distributed 3-D FFT.

A global array of N x N x N elements, split along axis 0 over the ranks (slabs, as ``gridcomm.slab`` cuts them),
becomes the same array split along axis 1. It is timed, on the same data in the same run, for:

- gridcomm: ``Transposer.slabs`` over each host transport (``mpi``: one packed message per peer; ``cma``: the
  receiver reads the sender's blocks straight out of its array, on one thread or on several), and each ``cma``
  once more with the slabs in memory the node's ranks share (``gridcomm.shared_zeros``: plain copies out of a
  mapping, no system call);
- ``pack+Alltoallv``: what one writes by hand: each peer's block copied into a send buffer with NumPy, one
  ``MPI_Alltoallv``, each received block copied into place;
- mpi4py-fft's ``Pencil.transfer`` (one ``MPI_Alltoallw`` of subarray datatypes), where it is installed.

Every result is checked equal, bit for bit, to gridcomm's before anything is timed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...comm import Communicator
from ...errors import GridcommError
from ...sharing import shared_zeros
from ...slabs import slab
from ...transports import CmaTransport, MpiTransport, ShmTransport, Transport
from ...transpose import Transposer
from ..measure.timing import time_interleaved
from .halo import host_variants
from .peers import same_bits

#: gridcomm's ways of moving the blocks: packed copies per peer, MPI's datatypes per peer or in one neighbourhood
#: call (as mpi4py-fft's Alltoallw of subarray types), cma's single copy (on the calling thread, or cut over the
#: rank's share of the node's cores), and shm's copies through shared memory.
VARIANTS: dict[str, Transport] = {
    "mpi": MpiTransport(),
    "mpi p2p/datatype": MpiTransport("p2p", "datatype"),
    "mpi neighbor/datatype": MpiTransport("neighbor", "datatype"),
    "cma": CmaTransport(),
    "cma/threads": CmaTransport(threads=None),
    "shm": ShmTransport(),
}
#: What a cma variant's label gets where it reads slabs that lie in gridcomm.shared_zeros arrays.
SHARED = ", shared slabs"
#: The hand-written peer's label.
HAND = "pack+Alltoallv"
#: The ceiling's label: every rank copies its slab once, all at the same time.
ONE_COPY = "one copy"


class OneCopy:
    """The ceiling of a transposition on one node: each rank copies its whole slab once, contiguous to contiguous
    (``np.copyto``), all ranks at the same time. No redistribution moves its bytes with fewer copies; where the
    memory's rate is what the ranks share, none is faster than this by much."""

    def __init__(self, source: np.ndarray) -> None:
        self._source, self._copy = source, np.empty_like(source)

    def run(self) -> None:
        np.copyto(self._copy, self._source)

    def close(self) -> None:
        self._copy = np.empty(0)


class PackAlltoallv:
    """The hand-written redistribution from slabs along axis 0 to slabs along axis 1 of a global array of ``shape``:
    NumPy copies of each peer's block into one send buffer, ``MPI_Alltoallv``, copies out of the receive buffer."""

    def __init__(self, comm: Communicator, shape: tuple[int, ...], source: np.ndarray, destination: np.ndarray) -> None:
        self._mpi = comm.mpi
        rows = [slab(shape, 0, q, comm.size) for q in range(comm.size)]  # what each rank holds before
        columns = [slab(shape, 1, q, comm.size) for q in range(comm.size)]  # and after
        sent = [source[:, c.start[1] : c.stop[1]] for c in columns]
        received = [destination[r.start[0] : r.stop[0]] for r in rows]
        self._send = np.empty(max(sum(b.size for b in sent), 1), dtype=source.dtype)
        self._recv = np.empty(max(sum(b.size for b in received), 1), dtype=source.dtype)
        send_counts = [b.size for b in sent]
        recv_counts = [b.size for b in received]
        send_displs = np.cumsum([0, *send_counts[:-1]]).tolist()
        recv_displs = np.cumsum([0, *recv_counts[:-1]]).tolist()
        self._packs = [(self._send[d : d + b.size].reshape(b.shape), b) for b, d in zip(sent, send_displs, strict=True)]
        self._unpacks = [
            (b, self._recv[d : d + b.size].reshape(b.shape)) for b, d in zip(received, recv_displs, strict=True)
        ]
        self._messages = ([self._send, (send_counts, send_displs)], [self._recv, (recv_counts, recv_displs)])

    def run(self) -> None:
        """One redistribution: pack, MPI_Alltoallv, unpack."""
        for dst, src in self._packs:
            np.copyto(dst, src)
        self._mpi.Alltoallv(*self._messages)
        for dst, src in self._unpacks:
            np.copyto(dst, src)

    def close(self) -> None:
        self._packs = self._unpacks = []


def peer_reasons(comm: Communicator) -> dict[str, str | None]:
    """Collective: each library peer of ``bench transpose`` (by label) and why it is skipped here (None: it runs)."""
    from .peers import LABELS, missing

    return {LABELS["mpi4py_fft"]: missing(comm, "mpi4py_fft")}


def run_transpose_case(
    comm: Communicator,
    n: int,
    dtype: str,
    samples: int,
    peers: dict[str, str | None] | None = None,
    extra: Mapping[str, Transport] | None = None,
) -> dict[str, Any]:
    """Time the redistribution of an ``n``³ array of ``dtype`` by every gridcomm variant (VARIANTS and ``extra``, by
    label), the hand-written pack + Alltoallv and every library peer that runs here (``peers``: from
    ``peer_reasons``), each checked equal to gridcomm's first, beside the one-copy ceiling (OneCopy); collective.
    One result row: times in seconds, ratios peer / best gridcomm variant and best / ceiling."""
    shape = (n, n, n)
    before, after = slab(shape, 0, comm.rank, comm.size), slab(shape, 1, comm.rank, comm.size)
    source = np.random.RandomState(comm.rank).random_sample(before.shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        source.imag = np.random.RandomState(comm.size + comm.rank).random_sample(before.shape)
    variants = host_variants(comm, {**VARIANTS, **(extra or {})})  # on several nodes: mpi and cma+mpi
    makers: dict[str, Callable[[np.ndarray], Any]] = {
        name: lambda d, t=transport, s=source: _Moved(Transposer.slabs(comm, shape, 0, 1, s, d, t))
        for name, transport in variants.items()
    }
    cma = [name for name, t in variants.items() if isinstance(t, CmaTransport)]
    if cma and sys.platform.startswith("linux"):  # the same slabs in memory the node shares, for each cma
        shared = shared_zeros(source.shape, source.dtype)
        shared[...] = source
        for name in cma:
            makers[name + SHARED] = lambda d, t=variants[name]: _Moved(
                Transposer.slabs(comm, shape, 0, 1, shared, d, t)
            )
    ours = list(makers)
    makers[HAND] = lambda d: PackAlltoallv(comm, shape, source, d)
    if (peers or {}).get("mpi4py-fft", "not asked for") is None:
        from .peers import Mpi4pyFftSlabs

        makers["mpi4py-fft"] = lambda d: Mpi4pyFftSlabs(comm, shape, 0, 1, source, d)
    movers, reference = {}, None
    try:
        for name, make in makers.items():
            destination = np.full(after.shape, np.nan, dtype=dtype)
            movers[name] = make(destination)
            movers[name].run()
            if reference is None:
                reference = destination
            elif not same_bits(comm, [destination], [reference]):
                raise GridcommError(
                    f"{name}'s redistribution of the {n}³ {dtype} array differs from gridcomm's; a figure is only "
                    "shown for the same result"
                )
        ceiling = OneCopy(source)
        runs = {name: m.run for name, m in movers.items()} | {ONE_COPY: ceiling.run}
        timings = time_interleaved(comm.mpi, runs, samples=samples)
        ceiling.close()
    finally:
        for mover in movers.values():
            mover.close()
    one_copy = timings.pop(ONE_COPY)
    times = {name: timings[name] for name in ours}
    best = min(times, key=lambda k: times[k].median)
    peer_times = {name: t for name, t in timings.items() if name not in ours}
    from mpi4py import MPI

    return {
        "n": n,
        "dtype": dtype,
        "ranks": comm.size,
        "bytes_per_rank_max": comm.mpi.allreduce(source.nbytes, op=MPI.MAX),
        "bytes_total": n**3 * source.itemsize,
        "variants": {k: t.as_dict() for k, t in times.items()},
        "best": best,
        "peers": {k: t.as_dict() for k, t in peer_times.items()},
        "peers_over_best": {k: t.median / times[best].median for k, t in peer_times.items()},
        "one_copy": one_copy.as_dict(),
        "best_over_one_copy": times[best].median / one_copy.median,
    }


class _Moved:
    """A Transposer as the benchmark drives it: ``run()`` and ``close()``."""

    def __init__(self, transposer: Transposer) -> None:
        self.transposer = transposer
        self.run = transposer.exchange

    def close(self) -> None:
        self.transposer.close()
