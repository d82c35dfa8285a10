"""Transport ``shm``: on one node, each rank copies its messages straight into its peers' receive buffers, which lie
in memory the node's ranks share, and says so by writing a number into the peer's memory: no MPI call in an
exchange.

Each rank's receive buffer is a file of ``/dev/shm`` (``node_memory.NodeMemory``, not pinned) that its senders
map when the exchange is bound. In front of the buffer lie two rows of counters, one per rank of the
communicator, each in a cache line of its own: *arrivals* (row 1, written by the senders: the number of the
last exchange whose message they have copied in) and *acknowledgements* (row 2, written by the receivers of this
rank's messages: the number of the last exchange they have unpacked). Per exchange:

* before its pack, a rank waits until each of its receivers has acknowledged the last exchange (its buffer may be
  written again; nearly always true at once);
* the pack: small messages (``direct_bytes``) are packed into the rank's own send buffer (one ``MPI_Pack``) and
  copied into the receivers' buffers by ``start`` in one ``MPI_Unpack`` (a datatype of byte blocks at the
  receivers' addresses, made at bind): two calls whatever the peer count; larger ones are packed straight into
  the receivers' buffers, one ``MPI_Pack`` each (``CopyPacker.send_into``): a copy fewer;
* ``start``: the rank writes the exchange's number into each receiver's arrival counter;
* ``wait``: it polls its own arrival counters until every sender's has that number (a timeout names those whose
  has not) and unpacks its receive buffer (one ``MPI_Unpack``);
* ``finish``: it writes the number into each sender's acknowledgement counter.

What MPI spends on matching, its progress engine and its own copies through shared memory is not spent: on 16 ranks
of one host a small transposition is a few Python calls and a poll of one array. The counters (``counters``) are
written after the data by plain stores, which x86-64 keeps in order for the other cores, so a receiver that sees
the number sees the data; other processors reorder stores, and there the transport says it cannot run (use
``cma`` or ``mpi``).
"""

from __future__ import annotations

import atexit
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..agreement import raise_if_any
from ..comm import Communicator
from ..errors import GridcommError, GridcommTimeout, TransportError
from . import counters, node_memory
from .base import Channel, PackerKind, Transport, other_nodes, poll_until
from .node_memory import NodeMemory

#: Receive buffers made by ``ShmTransport.receive_buffer``, by the address of their first byte, until their
#: channel is bound.
_INBOXES: dict[int, NodeMemory] = {}


@atexit.register
def _forget_unbound() -> None:
    """The files of receive buffers whose channel was never bound (an exchanger that failed between the two): their
    names go with the process, not left in /dev/shm."""
    for inbox in _INBOXES.values():
        inbox.forget_name()


@dataclass(frozen=True)
class ShmTransport(Transport):
    """Exchange of host memory between ranks of one node through receive buffers in shared memory (x86-64).

    Args:
        direct_bytes: messages of at least this many bytes on average are packed straight into their receivers'
            buffers, one ``MPI_Pack`` each; smaller ones are packed together and copied in one call (a copy more,
            calls fewer).
    """

    direct_bytes: int = 16384
    name = "shm"
    memories = frozenset({"host"})
    reach = "node"

    def local_reason(self, on_device: bool) -> str | None:
        return super().local_reason(on_device) or counters.store_order_reason("shm", "cma or mpi")

    def ranks_reason(self, comm: Communicator) -> str | None:
        if "shm" not in comm.reasons:  # collective the first time, remembered afterwards
            comm.reasons["shm"] = other_nodes(comm)
        return comm.reasons["shm"]

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def receive_buffer(self, comm: Communicator, nbytes: int) -> Any:
        """The receive buffer in shared memory, behind its counters; None where ``/dev/shm`` is missing or full
        (the channel then refuses on every rank)."""
        header = counters.rows_bytes(comm.size)
        inbox = NodeMemory.create(header + max(nbytes, 1), pinned=False)
        if inbox is None:
            return None
        buffer = inbox.array[header:]
        _INBOXES[buffer.ctypes.data] = inbox
        return buffer

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _ShmChannel(comm, packer, self.direct_bytes)


class _ShmChannel(Channel):
    """Collective over the communicator: maps the peers' receive buffers and says where this rank's messages go."""

    def __init__(self, comm: Communicator, packer: Any, direct_bytes: int) -> None:
        from mpi4py import MPI

        layout = packer.layout
        me, size = comm.rank, comm.size
        self._comm = comm
        self._inbox = _INBOXES.pop(packer.recv_buffer.ctypes.data, None)
        self._mapped: dict[int, NodeMemory] = {}
        self._scatter: Any = None
        raise_if_any(
            comm.mpi,
            None
            if self._inbox is not None
            else f"shm: rank {me} found no room for its receive buffer in {node_memory.FOLDER} (missing or full); "
            "use transport='cma' or 'mpi', or give the container more shared memory",
            TransportError,
            before=self.close,
        )
        inbox = self._inbox
        header = counters.rows_bytes(size)
        self._sources = [m.peer for m in layout.recvs]
        self._destinations = [m.peer for m in layout.sends]
        # This rank's counters, from its first source (destination) to its last: a poll reads no more of the row
        # than its peers span (a node's ranks of a large job), and a rank in between that is not one is never
        # behind.
        (self._arrivals, self._first_source), (self._acks, self._first_destination) = (
            counters.watched(counters.row(inbox, row, size), peers)
            for row, peers in ((0, self._sources), (1, self._destinations))
        )
        # Where each destination receives this rank's message: (offset in its buffer, bytes).
        peers = {*self._sources, *self._destinations}
        self._mapped, problem = node_memory.map_peers(comm.mpi, inbox, peers, "shm", "receive buffer")
        placed = {m.peer: (m.offset, m.nbytes) for m in layout.recvs}
        there = comm.mpi.alltoall([placed.get(r) for r in range(size)])
        for m in layout.sends:
            if problem is None and (there[m.peer] is None or there[m.peer][1] != m.nbytes):
                problem = (
                    f"shm: rank {me} sends {m.nbytes} B to rank {m.peer}, which expects "
                    f"{'nothing' if there[m.peer] is None else str(there[m.peer][1]) + ' B'} from it"
                )
        raise_if_any(comm.mpi, problem, GridcommError, before=self.close)
        inbox.forget_name()  # every peer has mapped it: the memory goes with the last process that maps it
        # Counters this rank writes: its arrival in each destination's arrivals, its acknowledgement in each
        # source's acknowledgements.
        self._arrived_flags = [counters.row(self._mapped[p], 0, size)[me : me + 1] for p in self._destinations]
        self._ack_flags = [counters.row(self._mapped[p], 1, size)[me : me + 1] for p in self._sources]
        # Where each send message goes: straight from the fields by the pack (large messages), or from the send
        # buffer by one MPI_Unpack over blocks of bytes at those addresses (the send buffer's padding gaps into
        # scratch bytes), in send-buffer order.
        targets = [(self._mapped[m.peer].address + header + there[m.peer][0], m) for m in layout.sends]
        if layout.sends and layout.send_nbytes >= direct_bytes * len(layout.sends):
            # In a ring from the next rank on, so that the ranks do not all write into the same receiver at once.
            ring = sorted(range(len(targets)), key=lambda i: (targets[i][1].peer - me) % size)
            packer.send_into([MPI.buffer.fromaddress(a, m.nbytes) for a, m in targets], ring)
            targets = []
        blocks, at = [], 0
        ordered = sorted(targets, key=lambda target: target[1].offset)
        ends = [0, *(m.offset + m.nbytes for _, m in ordered)]
        gaps = [m.offset - end for (_, m), end in zip(ordered, ends[:-1], strict=True)]
        self._gaps = np.empty(max(sum(gaps), 1), dtype=np.uint8)
        gap_address = self._gaps.ctypes.data
        for (address, m), gap in zip(ordered, gaps, strict=True):
            if gap:
                blocks.append((gap_address, gap))
                gap_address += gap
            if m.nbytes:
                blocks.append((address, m.nbytes))
            at = m.offset + m.nbytes
        if any(n for _, n in blocks):
            base = min(a for a, _ in blocks)
            scattered = MPI.BYTE.Create_hindexed([n for _, n in blocks], [a - base for a, _ in blocks])
            self._type = scattered.Create_resized(0, 1).Commit()
            scattered.Free()
            send = MPI.buffer(packer.send_buffer[:at])
            self._scatter = functools.partial(
                self._type.Unpack, send, 0, MPI.buffer.fromaddress(base, 1), MPI.COMM_SELF
            )
        self._epoch = 0  # exchanges started
        self._operation: object = "shm exchange"  # the exchange waited for last, named if one times out

    # -- per exchange ------------------------------------------------------------------------------------

    def before_pack(self, stream: Any, timeout: float) -> None:
        """Until every receiver has unpacked the last exchange: its buffer may then be written again."""
        if min(self._acks) < self._epoch:
            poll_until(self._consumed, timeout, self._late_receivers)

    def start(self, stream: Any = None) -> None:
        self._epoch += 1
        if self._scatter is not None:
            self._scatter()
        epoch = self._epoch
        for flag in self._arrived_flags:  # after the data: x86-64 keeps the stores in this order
            flag[0] = epoch

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        self._operation = operation  # named by the next before_pack too, if its receivers are late
        if min(self._arrivals) >= self._epoch:
            return
        poll_until(self._arrived, timeout, self._silent_senders)

    def finish(self, stream: Any = None) -> None:
        epoch = self._epoch
        for flag in self._ack_flags:
            flag[0] = epoch

    # -- polls and timeouts ------------------------------------------------------------------------------

    def _arrived(self) -> bool:
        return min(self._arrivals) >= self._epoch

    def _consumed(self) -> bool:
        return min(self._acks) >= self._epoch

    def _silent_senders(self, elapsed: float) -> GridcommTimeout:
        late = [p for p in self._sources if self._arrivals[p - self._first_source] < self._epoch]
        return GridcommTimeout(self._operation, self._comm.rank, late, elapsed)

    def _late_receivers(self, elapsed: float) -> GridcommTimeout:
        late = [p for p in self._destinations if self._acks[p - self._first_destination] < self._epoch]
        operation = f"the exchange after {self._operation}, whose data its receivers have not unpacked yet,"
        return GridcommTimeout(operation, self._comm.rank, late, elapsed)

    def close(self) -> None:
        if self._scatter is not None:
            self._type.Free()
            self._scatter = None
        node_memory.release(self._inbox, self._mapped)
        self._inbox, self._mapped = None, {}
