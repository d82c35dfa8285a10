"""Transport ``ipc``: within a node, one kernel per exchange writes every halo straight into the peers' fields.

Each rank's fields and a small flag array are mapped once into its peers with CUDA IPC. Per exchange, one
launch of ``gridcomm_ipc_exchange`` (kernels/ipc.cu) on the exchange's stream: tell the sources that this
rank's halos may be written, wait until the destinations say the same, copy every selection of every field
from this rank's interior into the destinations' halos over NVLink (and the periodic wrap into its own),
then flag the destinations and wait for the sources' flags. No buffers, no pack or unpack, one copy per
byte, and no host involvement: the exchange can be captured in a CUDA graph.

A wait that outlasts the timeout records the silent peer in host-mapped memory and gives up instead of
hanging the GPU; ``wait()`` reports it as a GridcommTimeout.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comm import Communicator
from ..errors import GridcommTimeout, TransportError
from ..gpu import all_peers_reachable
from ..packing.cuda import THREADS, Descriptors, SegmentTable, device_allocation, kernel
from ..packing.geometry import paired_grids
from .base import Channel, PackerKind, Transport, wait_on_stream

WAIT_CLEAR, WAIT_DATA, PEER_GAVE_UP = 1, 2, 3  # as in kernels/ipc.cu
_STEP_NAMES = {
    WAIT_CLEAR: "the GPU waited for the peer to clear its halos for writing",
    WAIT_DATA: "the GPU waited for the peer's halos",
    PEER_GAVE_UP: "the peer gave up (its own wait timed out), so its halos never came",
}


@dataclass(frozen=True)
class IpcTransport(Transport):
    """CUDA IPC between the GPUs of one node: one kernel writes the halos into the peers' fields."""

    name = "ipc"
    graph_capturable = True

    def unusable_reason(self, comm: Communicator, on_device: bool) -> str | None:
        if not on_device:
            return "ipc moves GPU arrays only"
        if "ipc" not in comm.facts:  # collective the first time
            comm.facts["ipc"] = all_peers_reachable(comm)
        return comm.facts["ipc"]

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "direct"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _IpcChannel(comm, packer)


@functools.cache
def _libcuda() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemGetAddressRange_v2.argtypes = [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_uint64,
    ]
    return lib


def _allocation_base(address: int) -> int:
    """Start of the cudaMalloc allocation that holds ``address`` (an IPC handle names a whole allocation)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    status = _libcuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), address)
    if status != 0:
        raise TransportError(f"cuMemGetAddressRange failed for a field at {address:#x} (CUresult {status})")
    return base.value


class _Mappings:
    """Peer allocations opened in this process, counted: CUDA lets a process open a handle only once."""

    def __init__(self) -> None:
        self._open: dict[bytes, list[int]] = {}  # handle -> [address, users]

    def open(self, handle: bytes) -> int:
        import cupy

        entry = self._open.get(handle)
        if entry is None:
            entry = self._open[handle] = [cupy.cuda.runtime.ipcOpenMemHandle(handle), 0]
        entry[1] += 1
        return entry[0]

    def close(self, handle: bytes) -> None:
        import cupy

        entry = self._open[handle]
        entry[1] -= 1
        if entry[1] == 0:
            cupy.cuda.runtime.ipcCloseMemHandle(entry[0])
            del self._open[handle]


_MAPPINGS = _Mappings()


def _export(address: int) -> tuple[bytes, int]:
    """(IPC handle of the allocation holding ``address``, offset of ``address`` in it)."""
    import cupy

    base = _allocation_base(address)
    try:
        return cupy.cuda.runtime.ipcGetMemHandle(base), address - base
    except cupy.cuda.runtime.CUDARuntimeError as error:
        raise TransportError(
            f"a field's memory cannot be shared by CUDA IPC ({error}); allocate fields with cudaMalloc (CuPy's "
            "default allocator, or torch without expandable segments) or use transport='nccl'"
        ) from None


class _IpcChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any) -> None:
        import cupy

        layout, fields, local = packer.layout, packer.fields, packer.local
        self._comm = comm
        self._flags = device_allocation(16 * comm.size)  # int64 CLEAR[size] then DATA[size]
        self._flags.fill(0)
        self._epoch = cupy.zeros(1, dtype=np.int64)
        self._finished = cupy.zeros(2, dtype=np.uint32)  # [blocks done, a block gave up]
        self._arrived = cupy.cuda.Event(block=False, disable_timing=True)
        self._error_memory = cupy.cuda.alloc_pinned_memory(32)  # host-mapped: the GPU reports failed waits here
        self._error = np.frombuffer(self._error_memory, dtype=np.int64, count=4)
        self._error[:] = 0
        cupy.cuda.Device().synchronize()
        # Everyone publishes its flags and fields and, per source, where that source's halos go in them.
        problem, exported = None, None
        try:
            exported = (_export(self._flags.data.ptr), [_export(f.data.ptr) for f in fields])
        except TransportError as error:
            problem = str(error)
        problems = [p for p in comm.mpi.allgather(problem) if p]
        if problems:
            raise TransportError(problems[0])
        everyone = comm.mpi.allgather(exported)
        wanted = {m.peer: [(s.field, s.selection) for s in m.segments] for m in layout.recvs}
        shapes = [tuple(f.shape) for f in fields]
        their = comm.mpi.alltoall([(shapes, wanted.get(r)) for r in range(comm.size)])
        self._destinations = [m.peer for m in layout.sends]
        self._sources = [m.peer for m in layout.recvs]
        peers = sorted(set(self._destinations) | set(self._sources))
        self._handles: list[bytes] = []

        def mapped(exported_pair: tuple[bytes, int]) -> int:
            handle, offset = exported_pair
            self._handles.append(handle)
            return _MAPPINGS.open(handle) + offset

        flag_addresses = np.zeros(comm.size, dtype=np.uint64)
        for r in peers:
            flag_addresses[r] = mapped(everyone[r][0])
        rows = Descriptors(cupy)
        for message in layout.sends:
            shapes_there, selections_there = their[message.peer]
            field_addresses = [mapped(pair) for pair in everyone[message.peer][1]]
            for seg, (f, dst_sel) in zip(message.segments, selections_there, strict=True):
                spec = layout.fields[seg.field]
                src, dst = paired_grids(fields[seg.field].shape, seg.selection, shapes_there[f], dst_sel, spec)
                rows.add(fields[seg.field].data.ptr, src, field_addresses[f], dst)
        rows.local(local, fields)
        self._table = SegmentTable(rows)
        self._peer_flags = cupy.asarray(flag_addresses)
        self._destination_ranks = cupy.asarray(np.array(self._destinations or [0], dtype=np.int32))
        self._source_ranks = cupy.asarray(np.array(self._sources or [0], dtype=np.int32))
        self._limit_ns = np.uint64(0)
        comm.mpi.Barrier()  # every mapping is in place before anyone's first exchange

    def start(self, stream: Any = None) -> None:
        # Every exchange has a block (grid >= 1), even one with nothing to copy: the last block signals.
        kernel("ipc.cu", "gridcomm_ipc_exchange")(
            (self._table.grid,),
            (THREADS,),
            (
                *self._table.args,
                self._epoch,
                self._finished,
                self._flags,
                self._peer_flags,
                self._destination_ranks,
                np.int32(len(self._destinations)),
                self._source_ranks,
                np.int32(len(self._sources)),
                np.int32(self._comm.rank),
                np.int32(self._comm.size),
                self._limit_ns,
                np.uint64(self._error.ctypes.data),
            ),
            stream=stream,
        )

    def set_timeout(self, timeout: float) -> None:
        self._limit_ns = np.uint64(int(timeout * 1e9))

    def before_pack(self, stream: Any, timeout: float) -> None:
        self.set_timeout(timeout)

    def check(self, operation: str) -> None:
        """Raise GridcommTimeout if a GPU-side wait gave up (read from host-mapped memory; no sync)."""
        if self._error[0]:
            _, peer, exchange, step = (int(x) for x in self._error)
            self._error[:] = 0
            raise GridcommTimeout(
                f"{operation}: {_STEP_NAMES.get(step, 'a GPU-side wait failed')} in exchange {exchange}",
                self._comm.rank,
                [peer],
                float(self._limit_ns) / 1e9,
            )

    def wait(self, timeout: float, operation: str, stream: Any = None) -> None:
        def gpu_stuck(elapsed: float) -> GridcommTimeout:
            # The GPU-side waits give up after `timeout` each; a GPU still busy long after is stuck elsewhere.
            return GridcommTimeout(f"{operation} (ipc: the GPU never finished)", self._comm.rank, [], elapsed)

        wait_on_stream(stream, self._arrived, 2 * timeout + 5.0, gpu_stuck)
        self.check(operation)

    def close(self) -> None:
        import cupy

        cupy.cuda.Device().synchronize()
        self._comm.mpi.Barrier()  # no peer writes into our memory any more
        for handle in self._handles:
            _MAPPINGS.close(handle)
        self._handles = []
