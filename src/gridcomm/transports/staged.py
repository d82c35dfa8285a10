"""Transport ``staged``: GPU pack, copy to pinned host memory, MPI, copy back, GPU unpack, in pipelined chunks.

The baseline the seeds measure against (what users hand-roll today), for any MPI, CUDA-aware or not, and the
fallback across nodes where neither a CUDA-aware MPI nor NCCL is there. Each message is cut into chunks of
``chunk_bytes``, and the three copies of a chunk overlap those of its neighbours, as MVAPICH2-GDR pipelines
its host-staged path: while MPI moves chunk i, the GPU copies chunk i + 1 down to the host and, on the
receiving side, chunk i - 1 up. The pinned buffers and one persistent MPI request per chunk are made once, when
the exchanger is bound.

Per exchange: ``start`` enqueues every chunk's device-to-host copy (an event after each) and posts every
receive; ``wait`` sends each chunk as soon as its copy has landed, and enqueues each received chunk's
host-to-device copy as soon as it has arrived, on the exchange's stream (the unpack launch follows them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arguments import whole_number
from ..comm import Communicator
from ..device import gpu_count
from ..errors import GridcommTimeout
from .base import Channel, PackerKind, Transport, poll_until

#: Bytes per chunk: small enough for the copies of neighbouring chunks to overlap within a message of a few MiB,
#: large enough that each chunk's copy launch and MPI message cost little beside its bytes.
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class StagedTransport(Transport):
    """Device buffers staged through pinned host memory and moved by (host) MPI, chunk by chunk.

    Args:
        chunk_bytes: bytes per chunk of a message (default CHUNK_BYTES); each chunk's copies overlap the
            neighbouring chunks' MPI transfers.
    """

    chunk_bytes: int = CHUNK_BYTES
    name = "staged"
    memories = frozenset({"device"})

    def __post_init__(self) -> None:
        whole_number(self.chunk_bytes, "StagedTransport(chunk_bytes)", least=1, meaning="bytes per chunk")

    def local_reason(self, on_device: bool) -> str | None:
        return super().local_reason(on_device) or (None if gpu_count() else "no GPU (or CuPy is missing)")

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _StagedChannel(comm, packer, tag, self.chunk_bytes)


def chunks(offset: int, nbytes: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """(offset, bytes) of each chunk of the message of ``nbytes`` at ``offset``, in order (none when empty)."""
    return [(offset + start, min(chunk_bytes, nbytes - start)) for start in range(0, nbytes, chunk_bytes)]


class _StagedChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any, tag: int, chunk_bytes: int) -> None:
        import cupy

        self._comm, self._device = comm, packer
        layout = packer.layout
        sizes = [max(n, 1) for n in (layout.send_nbytes, layout.recv_nbytes)]
        self._memory = [cupy.cuda.alloc_pinned_memory(n) for n in sizes]
        send, recv = (np.frombuffer(m, dtype=np.uint8, count=n) for m, n in zip(self._memory, sizes, strict=True))
        self._host = (send, recv)
        # Per chunk: (offset, bytes, peer, persistent request); one tag per exchanger, chunks of a peer in order.
        self._sends = [
            (start, n, m.peer, comm.mpi.Send_init(send[start : start + n], m.peer, tag))
            for m in layout.sends
            for start, n in chunks(m.offset, m.nbytes, chunk_bytes)
        ]
        self._recvs = [
            (start, n, m.peer, comm.mpi.Recv_init(recv[start : start + n], m.peer, tag))
            for m in layout.recvs
            for start, n in chunks(m.offset, m.nbytes, chunk_bytes)
        ]
        self._copied = [cupy.cuda.Event(block=False, disable_timing=True) for _ in self._sends]
        self._uploaded = cupy.cuda.Event(block=False, disable_timing=True)  # the last exchange's copies up
        self._sent: list[bool] = []
        self._landed: list[bool] = []
        self._stream: Any = None

    def start(self, stream: Any = None) -> None:
        from cupy.cuda import runtime

        self._stream = stream
        self._uploaded.synchronize()  # MPI may write into the host buffers once the last copies up have read them
        for *_, request in self._recvs:
            request.Start()
        device, host = self._device.send_buffer.data.ptr, self._host[0].ctypes.data
        for (start, n, _, _), copied in zip(self._sends, self._copied, strict=True):
            runtime.memcpyAsync(host + start, device + start, n, runtime.memcpyDeviceToHost, stream.ptr)
            copied.record(stream)
        self._sent = [False] * len(self._sends)
        self._landed = [False] * len(self._recvs)

    def _progress(self) -> bool:
        """Send every chunk whose copy to the host has landed, copy up every chunk that has arrived; True once
        every chunk is sent and received (and its copy up enqueued)."""
        from cupy.cuda import runtime

        for k, (*_, request) in enumerate(self._sends):
            # The chunks of a peer share one tag, so MPI matches them in the order they start: start them in order,
            # stopping at the first whose copy down has not landed. (Checking on past it started a later chunk
            # whose copy landed between the two checks before an earlier one: chunks swapped at the receiver, or
            # MPI_ERR_TRUNCATE where a full chunk met the shorter last one's receive.)
            if self._sent[k]:
                continue
            if not self._copied[k].done:
                break
            request.Start()
            self._sent[k] = True
        device, host = self._device.recv_buffer.data.ptr, self._host[1].ctypes.data
        for k, (start, n, _, request) in enumerate(self._recvs):
            if not self._landed[k] and request.Test():
                runtime.memcpyAsync(device + start, host + start, n, runtime.memcpyHostToDevice, self._stream.ptr)
                self._landed[k] = True
        return all(self._landed) and all(self._sent) and all(r.Test() for *_, r in self._sends)

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        def silent(elapsed: float) -> GridcommTimeout:
            peers = sorted({p for (*_, p, _), landed in zip(self._recvs, self._landed, strict=True) if not landed})
            return GridcommTimeout(operation, self._comm.rank, peers, elapsed)

        poll_until(self._progress, timeout, silent)
        self._uploaded.record(self._stream)

    def close(self) -> None:
        for *_, request in (*self._sends, *self._recvs):
            request.Free()
        self._sends, self._recvs, self._copied, self._memory = [], [], [], []
