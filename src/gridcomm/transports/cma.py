"""Transport ``cma``: on one node, each rank copies its halos straight out of its peers' fields.

Linux's cross-memory attach (``process_vm_readv``) lets a process read another's memory in one kernel copy,
given its pid and addresses. Each rank learns once, when the exchange is bound, where its peers' send
selections lie; per exchange a sender says "ready" (a zero-byte message), the receiver copies every run of
the message from the sender's fields into its own halo, then says "done" so that the sender may change its
fields again. One copy per byte, no buffers, no packing: what MPI does for one contiguous buffer, done for
strided halos of many fields.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comm import Communicator
from ..errors import GridcommError, GridcommTimeout
from .base import Channel, PackerKind, Transport, other_nodes, poll_until

_IOV_MAX = 1024


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


@dataclass(frozen=True)
class CmaTransport(Transport):
    """One-copy exchange of host memory between ranks of one node (Linux cross-memory attach)."""

    name = "cma"
    memories = frozenset({"host"})
    reach = "node"

    def ranks_reason(self, comm: Communicator) -> str | None:
        if "cma" not in comm.reasons:  # collective the first time, remembered afterwards
            comm.reasons["cma"] = other_nodes(comm) or _read_reason(comm)
        return comm.reasons["cma"]

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "direct"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _CmaChannel(comm, packer, tag)


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


class _CmaChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any, tag: int) -> None:
        mpi = comm.mpi
        layout = packer.layout
        self._comm = comm
        self._libc = _libc()
        # Tell each receiver where this rank's send runs lie; learn the same from each sender.
        sends = [mpi.isend((os.getpid(), packer.send_runs(i)), m.peer, tag) for i, m in enumerate(layout.sends)]
        self._sources = [m.peer for m in layout.recvs]
        self._reads = []
        for i, m in enumerate(layout.recvs):
            pid, remote = mpi.recv(source=m.peer, tag=tag)
            local, far = _pieces(packer.recv_runs(i), remote)
            self._reads.append((pid, _iovecs(local), _iovecs(far), int(local[:, 1].sum())))
        for request in sends:
            request.wait()
        # Zero-byte signals: "ready" from sender to receiver, "done" back, on the exchanger's next tags.
        ready, done = tag + 1, tag + 2
        empty = np.zeros(0, np.uint8)
        self._destinations = [m.peer for m in layout.sends]
        self._ready_out = [mpi.Send_init(empty, p, ready) for p in self._destinations]
        self._done_in = [mpi.Recv_init(empty, p, done) for p in self._destinations]
        self._ready_in = [mpi.Recv_init(empty, p, ready) for p in self._sources]
        self._done_out = [mpi.Send_init(empty, p, done) for p in self._sources]
        self._pending: list[int] = []
        # Made once: an exchange is then a few calls into MPI with no lookups or list building (an 8-byte
        # exchange is a few microseconds).
        from mpi4py import MPI

        self._startall, self._testall = MPI.Prequest.Startall, MPI.Request.Testall
        self._posted_first = self._ready_in + self._done_in
        self._completing = self._done_in + self._ready_out + self._done_out

    def start(self, stream: Any = None) -> None:
        self._startall(self._posted_first)
        self._startall(self._ready_out)
        self._pending = list(range(len(self._sources)))

    def _read(self, index: int) -> None:
        pid, locals_, remotes, total = self._reads[index]
        copied = 0
        for local, remote in zip(locals_, remotes, strict=True):
            n = self._libc.process_vm_readv(pid, local, len(local), remote, len(remote), 0)
            if n < 0:
                code = ctypes.get_errno()
                raise GridcommError(
                    f"rank {self._comm.rank}: reading the halo from rank {self._sources[index]} failed: "
                    f"{errno.errorcode.get(code, code)} ({os.strerror(code)})"
                )
            copied += n
        if copied != total:
            raise GridcommError(f"rank {self._comm.rank}: read {copied} of {total} B from rank {self._sources[index]}")

    def _progress(self) -> bool:
        for index in list(self._pending):
            if self._ready_in[index].Test():
                self._read(index)
                self._done_out[index].Start()
                self._pending.remove(index)
        return not self._pending and self._testall(self._completing)

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        def silent(elapsed: float) -> GridcommTimeout:
            peers = {self._sources[i] for i in self._pending}
            peers |= {p for r, p in zip(self._done_in, self._destinations, strict=True) if not r.Test()}
            return GridcommTimeout(operation, self._comm.rank, sorted(peers), elapsed)

        poll_until(self._progress, timeout, silent)

    def close(self) -> None:
        for request in self._ready_out + self._done_in + self._ready_in + self._done_out:
            request.Free()
        self._ready_out = self._done_in = self._ready_in = self._done_out = []
        self._posted_first = self._completing = []
