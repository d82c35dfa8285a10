"""Transport ``cma``: on one node, each rank copies its halos straight out of its peers' fields.

Linux's cross-memory attach (``process_vm_readv``) lets a process read another's memory in one kernel copy,
given its pid and addresses. Each rank learns once, when the exchange is bound, where its peers' send
selections lie; per exchange a sender says "ready", the receiver copies every run of the message from the
sender's fields into its own halo, then says "done" so that the sender may change its fields again. One copy per
byte, no buffers, no packing: what MPI does for one contiguous buffer, done for strided halos of many fields.

The signals are, on x86-64, the exchange's number written into the peer's counters in memory the node's ranks
share (``counters``, as ``shm`` signals: no MPI call per exchange), else zero-byte MPI messages (on 16 ranks of a
64-core Xeon host those took most of a small exchange: 209 µs for a transposition of 32³ float64, 2026-11-27).

A rank may read from several peers at once on threads of its own (``CmaTransport(threads=None)``: the cores it
shares with the node's ranks), each large read cut into parts, one per thread at most: where the ranks alone leave
the host's memory idle, large messages then move faster (8 ranks of a 64-core Xeon host, a transposition of 256³
float64: 2.7 ms on 8 threads each against 4.3 on one; 4 ranks, its reads cut in parts: 4.8-5.3 ms against 8.2-8.6),
elsewhere not (16 ranks: 3.1-3.3 ms on 4 threads each against 2.9; 128³: 1.0-2.0 ms against 0.4-0.5, handing
small reads to threads costing more than the copies), so one thread is the default and ``auto`` measures both.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import errno
import functools
import itertools
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import sharing
from ..agreement import raise_if_any
from ..arguments import whole_number
from ..comm import Communicator
from ..errors import ArgumentError, GridcommError, GridcommTimeout, TransportError
from . import counters, node_memory
from .base import Channel, PackerKind, Transport, other_nodes, poll_until
from .node_memory import NodeMemory

_IOV_MAX = 1024
_NOTICE_S = 50e-6  # while reads run on threads and peers are still to say "ready": how often to look [s]
_BLOCK_S = 0.01  # while reads run on threads and no peer is to say "ready": the longest wait between polls [s]


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


@functools.cache  # find_library runs ldconfig: once per process, not per exchanger
def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    libc.process_vm_readv.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_Iovec),
        ctypes.c_ulong,
        ctypes.POINTER(_Iovec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    return libc


def _read_reason(comm: Communicator) -> str | None:
    """Collective: None if every rank shares a node with every other and may read their memory."""
    from mpi4py import MPI

    if not sys.platform.startswith("linux"):
        reason = "needs Linux (process_vm_readv)"
    else:
        node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        same_node = node.Get_size() == comm.size
        node.Free()
        reason = None if same_node else "some ranks are on other nodes"
    probe = np.full(8, comm.rank, dtype=np.int64)
    peers = comm.mpi.allgather((os.getpid(), probe.ctypes.data))
    if reason is None:
        libc, seen = _libc(), np.empty(8, dtype=np.int64)
        for rank, (pid, address) in enumerate(peers):
            local, remote = _Iovec(seen.ctypes.data, seen.nbytes), _Iovec(address, seen.nbytes)
            if libc.process_vm_readv(pid, local, 1, remote, 1, 0) != seen.nbytes or not (seen == rank).all():
                reason = f"this system forbids reading another process's memory ({os.strerror(ctypes.get_errno())})"
                break
    reasons = comm.mpi.allgather(reason)
    comm.mpi.Barrier()  # every probe read is over before the probes are freed
    return next((r for r in reasons if r), None)


@functools.cache  # one pool per process and size, shared by every channel
def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """A pool of ``threads`` threads, every one started now (a pool starts its threads as reads first overlap, so
    its thread count would otherwise grow for a while)."""
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="gridcomm-cma")
    started = threading.Barrier(threads)
    concurrent.futures.wait([pool.submit(started.wait) for _ in range(threads)])
    return pool


def cpus_each(cpus: int, ranks: int) -> int:
    """``cpus`` shared evenly among ``ranks`` ranks: 1 where there are fewer than one each."""
    return max(1, cpus // max(ranks, 1))


@dataclass(frozen=True)
class CmaTransport(Transport):
    """One-copy exchange of host memory between ranks of one node (Linux cross-memory attach).

    Args:
        threads: threads reading from several peers at once: 1 (the default) reads on the calling thread alone;
            None, the CPUs the node's ranks may run on shared among them (``cpus_each`` of
            ``Communicator.local_cpus`` and ``local_size``: 4 for 16 unbound ranks on 64 cores, 1 for ranks bound to
            a core each), at most 8.
            The signals stay on the calling thread.
        thread_bytes: the least one read (what one peer sends) moves [bytes] to go to the threads, and the least
            each of its parts moves (a read is cut into at most ``threads`` parts); smaller ones are
            read on the calling thread, where handing a read to a thread costs more than it saves (default 512
            KiB: on 16 and 8 ranks of a 64-core host, reads of 64 and 256 KiB on threads made a transposition of
            128³ float64 2-4x slower, reads of 512 KiB and 2 MiB at 256³ up to 1.6x faster).
        signals: how "ready" and "done" go: ``"memory"``, counters in shared memory (x86-64 only); ``"mpi"``,
            zero-byte MPI messages; ``"auto"`` (the default), memory where the processor and ``/dev/shm`` allow,
            on every rank, else MPI.
    """

    name = "cma"
    memories = frozenset({"host"})
    reach = "node"
    threads: int | None = 1
    thread_bytes: int = 512 * 1024
    signals: str = "auto"

    def __post_init__(self) -> None:
        if self.signals not in ("auto", "memory", "mpi"):
            raise ArgumentError(f"CmaTransport(signals={self.signals!r}): use 'auto', 'memory' or 'mpi'")
        if self.threads is not None:
            whole_number(self.threads, "CmaTransport(threads)", least=1, meaning="threads reading from the peers")
        whole_number(self.thread_bytes, "CmaTransport(thread_bytes)", least=0, meaning="bytes one read moves")

    def ranks_reason(self, comm: Communicator) -> str | None:
        if "cma" not in comm.reasons:  # collective the first time, remembered afterwards
            comm.reasons["cma"] = other_nodes(comm) or _read_reason(comm)
        return comm.reasons["cma"]

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "direct"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        threads = self.threads if self.threads is not None else min(8, cpus_each(comm.local_cpus, comm.local_size))
        return _CmaChannel(comm, packer, tag, threads, self.thread_bytes, self.signals)


def _pieces(local: np.ndarray, remote: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split two (address, bytes) run lists of one byte stream at each other's boundaries, so that piece i
    is contiguous on both sides. Returns (local addresses, remote addresses), lengths implied by [1]."""
    ends_l, ends_r = np.cumsum(local[:, 1]), np.cumsum(remote[:, 1])
    if ends_l[-1] != ends_r[-1]:
        raise GridcommError(f"cma: message sizes differ ({ends_l[-1]} B here, {ends_r[-1]} B at the peer)")
    cuts = np.union1d(ends_l, ends_r)
    starts = np.concatenate([[0], cuts[:-1]])
    lengths = cuts - starts

    def addresses(runs: np.ndarray, ends: np.ndarray) -> np.ndarray:
        which = np.searchsorted(ends, starts, side="right")
        return runs[which, 0] + (starts - (ends[which] - runs[which, 1]))

    return np.stack([addresses(local, ends_l), lengths], 1), np.stack([addresses(remote, ends_r), lengths], 1)


def _iovecs(pieces: np.ndarray) -> list[Any]:
    """ctypes iovec arrays of at most IOV_MAX entries each."""
    arrays = []
    for first in range(0, len(pieces), _IOV_MAX):
        chunk = pieces[first : first + _IOV_MAX]
        array = (_Iovec * len(chunk))()
        for i, (address, length) in enumerate(chunk):
            array[i].iov_base, array[i].iov_len = int(address), int(length)
        arrays.append(array)
    return arrays


def _cut(local: np.ndarray, remote: np.ndarray, parts: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pieces (address, bytes) here and there, pairwise of one length (``_pieces``), cut into ``parts`` runs of
    consecutive pieces of about equal bytes (at most one per byte), a piece that straddles a cut split in two."""
    total = int(local[:, 1].sum())
    count = max(1, min(parts, total))
    edges = total * np.arange(count + 1) // count
    spans = np.stack([edges[:-1], np.diff(edges)], 1)  # the parts as runs of the byte stream, at their offsets
    here, offsets = _pieces(local, spans)
    there, _ = _pieces(remote, spans)
    bounds = np.searchsorted(offsets[:, 0], edges)  # the first piece of each part
    return [(here[a:b], there[a:b]) for a, b in itertools.pairwise(bounds.tolist()) if b > a]


class _SystemRead:
    """A sender's runs copied by ``process_vm_readv`` (in arrays of at most IOV_MAX pieces)."""

    def __init__(self, libc: Any, pid: int, local: np.ndarray, remote: np.ndarray) -> None:
        self._libc, self._pid, self._local, self._remote = libc, pid, local, remote
        self._pairs = list(zip(_iovecs(local), _iovecs(remote), strict=True))
        self.total = int(local[:, 1].sum())

    def split(self, parts: int) -> list[_SystemRead]:
        """The same bytes as ``parts`` reads of about equal size (fewer where the message is smaller)."""
        if parts <= 1:
            return [self]
        return [
            _SystemRead(self._libc, self._pid, here, there) for here, there in _cut(self._local, self._remote, parts)
        ]

    def run(self) -> int:
        """Bytes copied (OSError where the kernel refuses)."""
        copied = 0
        for local, remote in self._pairs:
            n = self._libc.process_vm_readv(self._pid, local, len(local), remote, len(remote), 0)
            if n < 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
            copied += n
        return copied


def _grid(local: np.ndarray, remote: np.ndarray, lengths: np.ndarray) -> tuple[tuple[int, int], ...] | None:
    """Where ``count`` pieces of one length lie, at addresses ``local`` here and ``remote`` there, as a grid of up to
    two levels on both sides (pieces j of rows i at first + i step_outer + j step_inner, forwards): ((rows, pieces
    per row), local steps, remote steps); None where they do not (NumPy then cannot copy them in one call)."""
    count = len(lengths)
    if count == 0 or not (lengths == lengths[0]).all():
        return None
    if count == 1:
        return (1, 1), (0, 0), (0, 0)
    steps_local, steps_remote = np.diff(local), np.diff(remote)
    change = np.flatnonzero((steps_local != steps_local[0]) | (steps_remote != steps_remote[0]))
    inner = int(change[0]) + 1 if change.size else count  # pieces per row: the first step kept on both sides
    if count % inner:
        return None
    outer = count // inner
    steps = (int(local[inner] - local[0]) if outer > 1 else 0, int(steps_local[0]))
    far = (int(remote[inner] - remote[0]) if outer > 1 else 0, int(steps_remote[0]))
    row, piece = np.divmod(np.arange(count), inner)
    laid_out = np.array_equal(local, local[0] + row * steps[0] + piece * steps[1]) and np.array_equal(
        remote, remote[0] + row * far[0] + piece * far[1]
    )
    forwards = min(steps[1], far[1]) > 0 and (outer == 1 or min(steps[0], far[0]) > 0)
    return ((outer, inner), steps, far) if laid_out and forwards else None


class _MappedRead:
    """A sender's runs copied out of its array of ``sharing.shared_zeros``, mapped here (``mapping``), in one NumPy
    copy of a grid of pieces (``_grid``: every block of a slab transposition, the faces of most halos), from the
    view ``source`` of the mapping into the view ``destination`` of this rank's memory, both (rows, pieces per
    row, bytes per piece). Other layouts are read with ``process_vm_readv``, whose one call per message costs less
    than a Python copy per piece (a 3-D halo on 2 ranks: 1.4-1.5x slower piece by piece, 2026-11-27)."""

    def __init__(self, mapping: Any, destination: np.ndarray, source: np.ndarray) -> None:
        self._mapping, self._destination, self._source = mapping, destination, source
        self.total = destination.size

    @classmethod
    def of(cls, mapping: Any, local: np.ndarray, offsets: np.ndarray, grid: tuple[tuple[int, int], ...]) -> _MappedRead:
        """The read of the pieces at ``local`` (address, bytes) here from ``offsets`` in the mapping, laid out as
        ``grid`` says."""
        (outer, inner), steps, far = grid
        width = int(local[0, 1])
        span = steps[0] * (outer - 1) + steps[1] * (inner - 1) + width
        here = (ctypes.c_uint8 * span).from_address(int(local[0, 0]))
        destination = np.ndarray((outer, inner, width), np.uint8, here, 0, (*steps, 1))
        source = np.ndarray(
            (outer, inner, width), np.uint8, np.frombuffer(mapping, np.uint8), int(offsets[0]), (*far, 1)
        )
        return cls(mapping, destination, source)

    def split(self, parts: int) -> list[_MappedRead]:
        """The same bytes as about ``parts`` copies of equal size, cut along the first axis at least that long
        (else the longest)."""
        shape = self._destination.shape
        axis = next((a for a, size in enumerate(shape) if size >= parts), int(np.argmax(shape)))
        edges = np.unique(shape[axis] * np.arange(parts + 1) // parts)
        cut = [(slice(None),) * axis + (slice(a, b),) for a, b in itertools.pairwise(edges.tolist())]
        return [_MappedRead(self._mapping, self._destination[c], self._source[c]) for c in cut]

    def run(self) -> int:
        """Bytes copied."""
        np.copyto(self._destination, self._source)
        return self.total


class _MpiSignals:
    """ "ready" and "done" as zero-byte MPI messages on the exchanger's next two tags (persistent requests)."""

    def __init__(self, comm: Communicator, tag: int, sources: list[int], destinations: list[int]) -> None:
        from mpi4py import MPI

        mpi, empty = comm.mpi, np.zeros(0, np.uint8)
        ready, done = tag + 1, tag + 2
        self._destinations = destinations
        self._ready_out = [mpi.Send_init(empty, p, ready) for p in destinations]
        self._done_in = [mpi.Recv_init(empty, p, done) for p in destinations]
        self._ready_in = [mpi.Recv_init(empty, p, ready) for p in sources]
        self._done_out = [mpi.Send_init(empty, p, done) for p in sources]
        # Made once: an exchange is then a few calls into MPI with no lookups or list building.
        self._startall, self._testall = MPI.Prequest.Startall, MPI.Request.Testall
        self._posted_first = self._ready_in + self._done_in
        self._completing = self._done_in + self._ready_out + self._done_out

    def start(self) -> None:
        self._startall(self._posted_first)
        self._startall(self._ready_out)

    def ready(self, index: int) -> bool:
        return self._ready_in[index].Test()

    def done(self, index: int) -> None:
        self._done_out[index].Start()

    def finished(self) -> bool:
        return self._testall(self._completing)

    def late_receivers(self) -> list[int]:
        return [p for r, p in zip(self._done_in, self._destinations, strict=True) if not r.Test()]

    def close(self) -> None:
        for request in self._ready_out + self._done_in + self._ready_in + self._done_out:
            request.Free()
        self._ready_out = self._done_in = self._ready_in = self._done_out = []
        self._posted_first = self._completing = []


class _MemorySignals:
    """ "ready" and "done" as the exchange's number written into the peers' counters (``counters``, x86-64): row 0
    of a rank's counters holds its sources' "ready", row 1 its destinations' "done". Collective over ``comm``:
    ``memory`` is this rank's counters, which its peers map."""

    def __init__(self, comm: Communicator, sources: list[int], destinations: list[int], memory: NodeMemory) -> None:
        me, size = comm.rank, comm.size
        self._memory = memory
        self._mapped, problem = node_memory.map_peers(comm.mpi, memory, {*sources, *destinations}, "cma", "counters")
        raise_if_any(comm.mpi, problem, GridcommError, before=self.close)
        memory.forget_name()  # every peer has mapped it: the memory goes with the last process that maps it
        (self._ready, first_source), (self._done, self._first_destination) = (
            counters.watched(counters.row(memory, row, size), peers) for row, peers in ((0, sources), (1, destinations))
        )
        self._ready_at = [p - first_source for p in sources]
        self._ready_out = [counters.row(self._mapped[p], 0, size)[me : me + 1] for p in destinations]
        self._done_out = [counters.row(self._mapped[p], 1, size)[me : me + 1] for p in sources]
        self._destinations = destinations
        self._epoch = 0  # exchanges started

    def start(self) -> None:
        self._epoch += 1
        epoch = self._epoch
        for flag in self._ready_out:  # after the fields were written: x86-64 keeps the stores in this order
            flag[0] = epoch

    def ready(self, index: int) -> bool:
        return self._ready[self._ready_at[index]] >= self._epoch

    def done(self, index: int) -> None:
        self._done_out[index][0] = self._epoch

    def finished(self) -> bool:
        return min(self._done) >= self._epoch

    def late_receivers(self) -> list[int]:
        return [p for p in self._destinations if self._done[p - self._first_destination] < self._epoch]

    def close(self) -> None:
        node_memory.release(self._memory, self._mapped)
        self._memory, self._mapped = None, {}


def _signals(comm: Communicator, tag: int, asked: str, sources: list[int], destinations: list[int]) -> Any:
    """The channel's signals (collective): counters in shared memory where ``asked`` allows and every rank could
    make its own, else MPI messages; TransportError on every rank where memory was asked and cannot be had."""
    memory, reason = None, None
    if asked != "mpi":
        reason = counters.store_order_reason("cma with signals='memory'", "signals='mpi'")
        if reason is None:
            memory = NodeMemory.create(counters.rows_bytes(comm.size), pinned=False)
            if memory is None:
                reason = f"rank {comm.rank} found no room for its counters in /dev/shm"
    reasons = comm.mpi.allgather(reason)
    if not any(reasons) and asked != "mpi":
        return _MemorySignals(comm, sources, destinations, memory)
    node_memory.release(memory, {})
    if asked == "memory":
        raise TransportError(next(r for r in reasons if r))
    return _MpiSignals(comm, tag, sources, destinations)


class _CmaChannel(Channel):
    def __init__(
        self, comm: Communicator, packer: Any, tag: int, threads: int, thread_bytes: int, signals: str
    ) -> None:
        mpi = comm.mpi
        layout = packer.layout
        self._comm = comm
        self._libc = _libc()
        # Tell each receiver where this rank's send runs lie, and the array of sharing.shared_zeros that holds them
        # (if one does); learn the same from each sender.
        sends = []
        for i, m in enumerate(layout.sends):
            runs = packer.send_runs(i)
            sends.append(mpi.isend((os.getpid(), runs, sharing.segment_of(runs)), m.peer, tag))
        self._sources = [m.peer for m in layout.recvs]
        self._reads: list[_SystemRead | _MappedRead] = []
        for i, m in enumerate(layout.recvs):
            pid, remote, segment = mpi.recv(source=m.peer, tag=tag)
            local, far = _pieces(packer.recv_runs(i), remote)
            offsets = None if segment is None else far[:, 0] - segment[1]  # where the runs lie in its array
            grid = None if segment is None else _grid(local[:, 0], offsets, local[:, 1])
            mapping = None if grid is None else sharing.map_segment(pid, segment[0], segment[2])
            if mapping is None:
                self._reads.append(_SystemRead(self._libc, pid, local, far))
            else:
                self._reads.append(_MappedRead.of(mapping, local, offsets, grid))
        for request in sends:
            request.wait()
        # Reads from several peers at once, on threads (ctypes lets go of the GIL in process_vm_readv, NumPy in
        # its copies): those of at least thread_bytes, each cut into parts of at least thread_bytes, as many as
        # there are threads, so that a few large messages (a transposition on 4 ranks) keep every thread busy.
        parts = [min(threads, read.total // max(thread_bytes, 1)) for read in self._reads]
        self._pool = _pool(threads) if threads > 1 and sum(parts) > 1 else None
        self._parts = [
            read.split(k) if self._pool is not None and k else None for read, k in zip(self._reads, parts, strict=True)
        ]
        self._copying: dict[int, list[concurrent.futures.Future]] = {}  # source index -> its parts on threads
        # "ready" from sender to receiver, "done" back.
        self._signals = _signals(comm, tag, signals, self._sources, [m.peer for m in layout.sends])
        self.signalling = "memory" if isinstance(self._signals, _MemorySignals) else "mpi"
        self._pending: list[int] = []

    def start(self, stream: Any = None) -> None:
        self._signals.start()
        self._pending = list(range(len(self._sources)))
        if self._pool is not None:  # the reads of peers already ready start on threads while the caller goes on
            self._dispatch()

    def _read(self, index: int, read: _SystemRead | _MappedRead | None = None) -> None:
        read = self._reads[index] if read is None else read
        try:
            copied = read.run()
        except OSError as error:
            raise GridcommError(
                f"rank {self._comm.rank}: reading the halo from rank {self._sources[index]} failed: "
                f"{errno.errorcode.get(error.errno or 0, error.errno)} ({error.strerror})"
            ) from None
        if copied != read.total:
            raise GridcommError(
                f"rank {self._comm.rank}: read {copied} of {read.total} B from rank {self._sources[index]}"
            )

    def _dispatch(self) -> None:
        """Read from every peer that is ready: on the calling thread, or its parts handed to the threads."""
        signals = self._signals
        for index in list(self._pending):
            if signals.ready(index):
                self._pending.remove(index)
                parts = self._parts[index]
                if parts is None:
                    self._read(index)
                    signals.done(index)
                else:
                    self._copying[index] = [self._pool.submit(self._read, index, part) for part in parts]

    def _progress(self) -> bool:
        signals = self._signals
        self._dispatch()
        if self._copying:
            # Let go of the GIL while the threads copy (a poll that spins would keep it from them: every read of
            # 128³ float64 on 16 ranks then took a second, 2026-11-27): until a read is done, or for a moment where
            # signals are still awaited.
            # Only the parts still running: one already done would end every wait at once, and this thread would
            # then spin, keeping the GIL and the futures' locks from the threads that are still copying.
            concurrent.futures.wait(
                [part for parts in self._copying.values() for part in parts if not part.done()],
                _NOTICE_S if self._pending else _BLOCK_S,
                concurrent.futures.FIRST_COMPLETED,
            )
        for index, parts in list(self._copying.items()):
            if all(part.done() for part in parts):
                del self._copying[index]
                for part in parts:
                    part.result()  # a failed read raises here, on the calling thread
                signals.done(index)
        return not self._pending and not self._copying and signals.finished()

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        def silent(elapsed: float) -> GridcommTimeout:
            peers = {self._sources[i] for i in self._pending} | set(self._signals.late_receivers())
            return GridcommTimeout(operation, self._comm.rank, sorted(peers), elapsed)

        poll_until(self._progress, timeout, silent)

    def close(self) -> None:
        concurrent.futures.wait([part for parts in self._copying.values() for part in parts])  # no thread writing
        self._copying = {}
        self._signals.close()
        self._reads = []  # and the mappings of the senders' arrays with them
