"""Transport ``staged``: GPU pack, copy to pinned host memory, MPI, copy back, GPU unpack, in pipelined chunks.

The baseline the seeds measure against (what users hand-roll today), for any MPI, CUDA-aware or not, and the
fallback across nodes where neither a CUDA-aware MPI nor NCCL is there. Each message is cut into chunks of
``chunk_bytes``, and the three copies of a chunk overlap those of its neighbours, as MVAPICH2-GDR pipelines
its host-staged path: while MPI moves chunk i, the GPU copies chunk i + 1 down to the host and, on the
receiving side, chunk i - 1 up. The pinned buffers and one persistent MPI request per chunk are made once, when
the exchanger is bound.

Between ranks of one node the host copy that MPI would make goes too: each receiver's buffer is pinned memory that
its senders on the node map (``node_memory``), a sender's copy down lands straight in it, and MPI carries a note
per chunk; the receiver returns a credit per exchange once its copies up have read it. Across nodes the chunks go
through MPI.

Per exchange: ``start`` posts every receive, sends the credits, and enqueues the device-to-host copies that may
go (an event after each) on a stream of their own; ``wait`` sends each chunk (or its note) as soon as its copy has
landed, and enqueues each received chunk's host-to-device copy as soon as it has arrived, on another stream, so
that copies down and up overlap; the exchange's stream then waits for both (the unpack launch follows them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arguments import whole_number
from ..comm import Communicator
from ..device import gpu_count
from ..errors import ArgumentError, GridcommTimeout
from .base import Channel, PackerKind, Transport, poll_until
from .node_memory import NodeMemory

#: Bytes per chunk: small enough for the copies of neighbouring chunks to overlap within a message of a few MiB,
#: large enough that each chunk's copy launch and MPI message cost little beside its bytes.
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class StagedTransport(Transport):
    """Device buffers staged through pinned host memory and moved by (host) MPI, chunk by chunk.

    Args:
        chunk_bytes: bytes per chunk of a message (default CHUNK_BYTES); each chunk's copies overlap the
            neighbouring chunks' MPI transfers.
        node_memory: a peer on this rank's node (``Communicator.nodes``, declared nodes included) receives
            through pinned host memory it shares with its senders (``node_memory.NodeMemory``): a sender's copy
            down lands in the receiver's inbox, and MPI carries only a note per chunk (no host copy, no host
            bandwidth spent by MPI). False, or where /dev/shm cannot hold it: every chunk through MPI.
    """

    chunk_bytes: int = CHUNK_BYTES
    node_memory: bool = True
    name = "staged"
    memories = frozenset({"device"})

    def __post_init__(self) -> None:
        whole_number(self.chunk_bytes, "StagedTransport(chunk_bytes)", least=1, meaning="bytes per chunk")
        if self.node_memory not in (True, False):  # 0 and 1 too: a label's "staged/node_memory=0"
            raise ArgumentError(f"StagedTransport(node_memory={self.node_memory!r}): give True or False")

    def local_reason(self, on_device: bool) -> str | None:
        return super().local_reason(on_device) or (None if gpu_count() else "no GPU (or CuPy is missing)")

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _StagedChannel(comm, packer, tag, self.chunk_bytes, self.node_memory)


def chunks(offset: int, nbytes: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """(offset, bytes) of each chunk of the message of ``nbytes`` at ``offset``, in order (none when empty)."""
    return [(offset + start, min(chunk_bytes, nbytes - start)) for start in range(0, nbytes, chunk_bytes)]


@dataclass
class _Chunk:
    """One chunk of a message: its place in the message buffers (``start``, ``nbytes``), its peer and MPI request
    (the bytes, or a note where they go through node memory), and the host address it is copied down to (a send:
    this rank's send buffer or the peer's inbox) or up from (a receive), with, for a send, the event after its copy
    down and whether that copy is enqueued in this exchange (``queued``)."""

    start: int
    nbytes: int
    peer: int
    request: Any
    host: int
    copied: Any = None
    queued: bool = False


class _StagedChannel(Channel):
    """One exchanger's messages in chunks through pinned host memory: this rank's send buffer, or the inboxes of
    the destinations on its node (node memory); its own receive buffer, an inbox where ``node_memory`` allows."""

    def __init__(self, comm: Communicator, packer: Any, tag: int, chunk_bytes: int, node_memory: bool) -> None:
        import cupy

        self._comm, self._device = comm, packer
        layout = packer.layout
        send_n, recv_n = max(layout.send_nbytes, 1), max(layout.recv_nbytes, 1)
        self._inbox = NodeMemory.create(recv_n) if node_memory and layout.recvs else None
        self._memory = [cupy.cuda.alloc_pinned_memory(send_n)]
        if self._inbox is None:
            self._memory.append(cupy.cuda.alloc_pinned_memory(recv_n))
        send = np.frombuffer(self._memory[0], dtype=np.uint8, count=send_n)
        recv = self._inbox.array if self._inbox is not None else np.frombuffer(self._memory[1], np.uint8, recv_n)
        self._outboxes: dict[int, tuple[NodeMemory, int]] = self._map_inboxes(layout) if node_memory else {}
        # The sources that write into this rank's inbox (each sender decides, by mapping it or not).
        writers = comm.mpi.alltoall([r in self._outboxes for r in range(comm.size)]) if node_memory else []
        by_memory = {r for r, writes in enumerate(writers) if writes}
        if self._inbox is not None:
            self._inbox.forget_name()  # every sender has mapped it, or never will
        nothing = np.empty(0, dtype=np.uint8)
        # Per chunk, one persistent request; one tag per exchanger, so a peer's chunks are started in order.
        self._sends: list[_Chunk] = []
        for m in layout.sends:
            box, there = self._outboxes.get(m.peer, (None, 0))
            for start, n in chunks(m.offset, m.nbytes, chunk_bytes):
                request = comm.mpi.Send_init(nothing if box else send[start : start + n], m.peer, tag)
                host = box.address + there + start - m.offset if box else send.ctypes.data + start
                self._sends.append(
                    _Chunk(start, n, m.peer, request, host, cupy.cuda.Event(block=False, disable_timing=True))
                )
        self._recvs = [
            _Chunk(start, n, m.peer, comm.mpi.Recv_init(nothing if m.peer in by_memory else recv[start : start + n],
                                                        m.peer, tag), recv.ctypes.data + start)
            for m in layout.recvs
            for start, n in chunks(m.offset, m.nbytes, chunk_bytes)
        ]  # fmt: skip
        # A receiver tells each sender through its inbox that the last exchange's copies up have read it.
        credit = tag + 1
        self._credits_out = [comm.mpi.Send_init(nothing, m.peer, credit) for m in layout.recvs if m.peer in by_memory]
        self._credits_in = {peer: comm.mpi.Recv_init(nothing, peer, credit) for peer in self._outboxes}
        self._cleared: set[int] = set()  # destinations whose credit came in this exchange
        self._down, self._up = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        self._packed, self._downloaded, self._uploaded = (
            cupy.cuda.Event(block=False, disable_timing=True) for _ in range(3)
        )
        self._stream: Any = None

    def _map_inboxes(self, layout: Any) -> dict[int, tuple[NodeMemory, int]]:
        """Collective: the inboxes of the destinations on this rank's node (``Communicator.nodes``, declared ones
        included) mapped here, with the offset of this rank's message in each, by peer; a destination whose inbox
        cannot be mapped (another host, no inbox) is reached through MPI."""
        comm = self._comm
        inboxes = comm.mpi.allgather(None if self._inbox is None else (self._inbox.path, self._inbox.nbytes))
        offsets = {m.peer: m.offset for m in layout.recvs}
        there = comm.mpi.alltoall([offsets.get(r) for r in range(comm.size)])
        mapped = {}
        for m in layout.sends:
            if inboxes[m.peer] is None or there[m.peer] is None or comm.nodes[m.peer] != comm.nodes[comm.rank]:
                continue
            if (box := NodeMemory.open(*inboxes[m.peer])) is not None:
                mapped[m.peer] = (box, there[m.peer])
        return mapped

    def start(self, stream: Any = None) -> None:
        self._stream = stream
        # The last exchange's copies up have read the receive buffer: MPI and the senders may write into it again.
        self._uploaded.synchronize()
        for request in (*(c.request for c in self._recvs), *self._credits_out, *self._credits_in.values()):
            request.Start()
        for chunk in self._sends:
            chunk.queued = False
        # What is left to do, in chunk order; each progress pass looks at these only (a 128 MiB message has 128).
        self._to_copy, self._to_send, self._to_receive = list(self._sends), list(self._sends), list(self._recvs)
        self._in_flight: list[_Chunk] = []
        self._cleared = set()
        self._packed.record(stream)  # copies down read the packed buffer; copies up follow the last unpack
        self._down.wait_event(self._packed)
        self._up.wait_event(self._packed)
        self._progress()

    def _progress(self) -> bool:
        """Copy down every chunk that may be (to a peer through node memory, once its credit has come), send every
        chunk whose copy down has landed, copy up every chunk that has arrived; True once every chunk is sent and
        received (and its copy up enqueued) and every credit sent."""
        from cupy.cuda import runtime

        if len(self._cleared) < len(self._credits_in):
            self._cleared.update(p for p, r in self._credits_in.items() if p not in self._cleared and r.Test())
        device = self._device.send_buffer.data.ptr
        waiting = []
        for c in self._to_copy:
            if c.peer in self._credits_in and c.peer not in self._cleared:
                waiting.append(c)
                continue
            runtime.memcpyAsync(c.host, device + c.start, c.nbytes, runtime.memcpyDeviceToHost, self._down.ptr)
            c.copied.record(self._down)
            c.queued = True
        self._to_copy = waiting
        # The chunks of a peer share one tag, so MPI matches them in the order they start: start them in order,
        # each peer's stopping at its first whose copy down has not landed. (Checking on past it started a later
        # chunk whose copy landed between the two checks before an earlier one: chunks swapped at the receiver, or
        # MPI_ERR_TRUNCATE where a full chunk met the shorter last one's receive.)
        behind, waiting = set(), []
        for c in self._to_send:
            if c.peer in behind or not c.queued or not c.copied.done:
                behind.add(c.peer)
                waiting.append(c)
                continue
            c.request.Start()
            self._in_flight.append(c)
        self._to_send = waiting
        device = self._device.recv_buffer.data.ptr
        waiting = []
        for c in self._to_receive:
            if not c.request.Test():
                waiting.append(c)
                continue
            runtime.memcpyAsync(device + c.start, c.host, c.nbytes, runtime.memcpyHostToDevice, self._up.ptr)
        self._to_receive = waiting
        self._in_flight = [c for c in self._in_flight if not c.request.Test()]
        return not (self._to_send or self._to_receive or self._in_flight) and all(r.Test() for r in self._credits_out)

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        def silent(elapsed: float) -> GridcommTimeout:
            unheard = {c.peer for c in self._to_receive} | set(self._credits_in).difference(self._cleared)
            return GridcommTimeout(operation, self._comm.rank, sorted(unheard), elapsed)

        poll_until(self._progress, timeout, silent)
        self._downloaded.record(self._down)
        self._uploaded.record(self._up)
        self._stream.wait_event(self._downloaded)  # the next pack may overwrite what was copied down
        self._stream.wait_event(self._uploaded)  # the unpack reads what was copied up

    def close(self) -> None:
        self._down.synchronize()
        self._up.synchronize()
        for request in (*(c.request for c in (*self._sends, *self._recvs)), *self._credits_out,
                        *self._credits_in.values()):  # fmt: skip
            request.Free()
        self._sends, self._recvs, self._credits_out, self._credits_in, self._memory = [], [], [], {}, []
        for box, _ in self._outboxes.values():
            box.close()
        self._outboxes = {}
        if self._inbox is not None:
            self._inbox.close()
            self._inbox = None
