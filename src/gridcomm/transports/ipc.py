"""Transport ``ipc``: within a node, one kernel packs every field straight into the peers' receive buffers.

Each rank's receive buffer and flag array (kernels/signal.cu) are mapped once into every peer with CUDA IPC.
Per exchange, on the exchange's stream and with no host involvement:

1. wait until every destination has unpacked this rank's previous message (flags written by them);
2. the pack launch writes every segment for every peer into that peer's receive buffer over NVLink;
3. set "ready" in each destination's flags; 4. wait for "ready" from every source;
5. unpack (the exchanger's launch); 6. set "consumed" in each source's flags.

A wait that outlasts the timeout records the silent peer in host-mapped memory and gives up instead of
hanging the GPU; the exchanger reports it as a GridcommTimeout.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comm import Communicator
from ..errors import GridcommTimeout
from ..gpu import all_peers_reachable
from ..packing.cuda import device_allocation, kernel_source
from .base import Channel, PackerKind, Transport

BEGIN, SIGNAL_READY, WAIT_READY, SIGNAL_CONSUMED = range(4)
_STEP_NAMES = {BEGIN: "the peer to unpack the previous exchange", WAIT_READY: "the peer's data"}


@functools.cache
def _signal_kernel() -> Any:
    import cupy

    return cupy.RawModule(code=kernel_source("signal.cu"), options=("-std=c++17",)).get_function("gridcomm_ipc_signal")


@dataclass(frozen=True)
class IpcTransport(Transport):
    """CUDA IPC between the GPUs of one node: fused pack-and-send kernel, GPU-side completion flags."""

    name = "ipc"
    graph_capturable = True

    def unusable_reason(self, comm: Communicator, on_device: bool) -> str | None:
        if not on_device:
            return "ipc moves GPU arrays only"
        if "ipc" not in comm.facts:  # collective the first time
            comm.facts["ipc"] = all_peers_reachable(comm)
        return comm.facts["ipc"]

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _IpcChannel(comm, packer, tag)


class _IpcChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any, tag: int) -> None:
        import cupy

        runtime = cupy.cuda.runtime
        layout = packer.layout
        self._comm, self._packer = comm, packer
        self._flags = device_allocation(16 * comm.size)  # int64 READY[size] then CONSUMED[size]
        self._flags.fill(0)
        self._epoch = cupy.zeros(1, dtype=np.int64)
        self._error_memory = cupy.cuda.alloc_pinned_memory(32)
        self._error = np.frombuffer(self._error_memory, dtype=np.int64, count=4)
        self._error[:] = 0
        cupy.cuda.Device().synchronize()
        # Everyone publishes its receive buffer and flags; each rank maps those of its peers.
        mine = (runtime.ipcGetMemHandle(packer.recv_buffer.data.ptr), runtime.ipcGetMemHandle(self._flags.data.ptr))
        handles = comm.mpi.allgather(mine)
        peers = sorted({m.peer for m in layout.sends} | {m.peer for m in layout.recvs})
        self._mapped = {p: [runtime.ipcOpenMemHandle(h) for h in handles[p]] for p in peers}
        # Where each of this rank's messages lands in its destination's receive buffer.
        offsets = comm.mpi.alltoall([{m.peer: m.offset for m in layout.recvs}.get(r) for r in range(comm.size)])
        packer.write_sends_to([self._mapped[m.peer][0] + offsets[m.peer] for m in layout.sends])

        def slots(ranks: list[int]) -> tuple[Any, Any, int]:
            flag_addresses = cupy.asarray(np.array([self._mapped[r][1] for r in ranks] or [0], dtype=np.uint64))
            return flag_addresses, cupy.asarray(np.array(ranks or [0], dtype=np.int32)), len(ranks)

        self._destinations = slots([m.peer for m in layout.sends])
        self._sources = slots([m.peer for m in layout.recvs])
        self._threads = max(32, -(-max(self._destinations[2], self._sources[2]) // 32) * 32)
        self._limit_ns = np.uint64(0)
        comm.mpi.Barrier()  # every mapping is in place before anyone's first exchange

    def _launch(self, step: int, peers: tuple[Any, Any, int], stream: Any) -> None:
        flag_addresses, ranks, count = peers
        _signal_kernel()(
            (1,),
            (self._threads,),
            (
                np.int32(step),
                self._epoch,
                self._flags,
                flag_addresses,
                ranks,
                np.int32(count),
                np.int32(self._comm.rank),
                np.int32(self._comm.size),
                self._limit_ns,
                np.uint64(self._error.ctypes.data),
            ),
            stream=stream,
        )

    def check(self, operation: str) -> None:
        """Raise GridcommTimeout if a GPU-side wait gave up (read from host-mapped memory; no sync)."""
        if self._error[0]:
            _, peer, epoch, step = (int(x) for x in self._error)
            self._error[:] = 0
            raise GridcommTimeout(
                f"{operation}: GPU wait for {_STEP_NAMES.get(step, 'a flag')} in exchange {epoch}",
                self._comm.rank,
                [peer],
                self._limit_ns / 1e9,
            )

    def before_pack(self, stream: Any, timeout: float) -> None:
        self._limit_ns = np.uint64(int(timeout * 1e9))
        self._launch(BEGIN, self._destinations, stream)

    def start(self, stream: Any = None) -> None:
        self._launch(SIGNAL_READY, self._destinations, stream)  # after the pack launch wrote into the peers

    def wait(self, timeout: float, operation: str, stream: Any = None) -> None:
        self.check(operation)
        self._limit_ns = np.uint64(int(timeout * 1e9))
        self._launch(WAIT_READY, self._sources, stream)

    def finish(self, stream: Any = None) -> None:
        self._launch(SIGNAL_CONSUMED, self._sources, stream)

    def close(self) -> None:
        import cupy

        cupy.cuda.Device().synchronize()
        self._comm.mpi.Barrier()  # no peer writes into our buffers any more
        for addresses in self._mapped.values():
            for address in addresses:
                cupy.cuda.runtime.ipcCloseMemHandle(address)
        self._mapped = {}
