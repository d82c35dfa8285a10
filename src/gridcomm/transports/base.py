"""The one small interface every transport implements.

A ``Transport`` is a choice (with its options) that can tell whether it works here and binds to one
exchange's messages; the bound ``Channel`` moves those messages, again and again, with nothing
allocated per exchange.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

from ..comm import Communicator
from ..waiting import poll_until

__all__ = ["Channel", "PackerKind", "Transport", "other_nodes", "poll_until"]

PackerKind = Literal["copy", "datatype", "direct"]


class Channel(ABC):
    """One exchange's messages, bound to a transport: started and completed once per exchange.

    ``stream`` is the CUDA stream the exchange is ordered on (None for host fields): the pack launch is
    enqueued on it before ``start`` and the unpack launch after ``wait``.
    """

    # True once the channel has given up on its exchange in flight (nothing will write into its buffers any
    # more), so that the exchanger may be closed without completing it.
    abandoned = False
    # False where this binding cannot replay a graph of its own although its transport is replayable (nccl where
    # its communicator cannot be aborted without the GIL).
    replayable = True
    # The host-mapped words a GPU-side wait writes when it gives up (word 0 nonzero), for channels whose waits run
    # on the GPU (GpuWaitChannel); None where the host waits.
    gpu_report: Any = None
    # For channels whose replays the host only books (nccl): what the exchanger's lean replay calls instead of
    # before_pack (``replay_check()``, which may raise a timeout found meanwhile) and instead of wait
    # (``replay_track(stream, operation, timeout)``), knowing the stream is not being captured; None elsewhere.
    replay_check: Any = None
    replay_track: Any = None

    def before_pack(self, stream: Any, timeout: float) -> None:  # noqa: B027 (optional hook)
        """Before the pack is enqueued: make sure the destinations may be written (if the transport must)."""

    @abstractmethod
    def start(self, stream: Any = None) -> None:
        """Post every receive and send (the pack is enqueued, or done for host fields, already)."""

    @abstractmethod
    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        """Complete every posted message (or enqueue its completion on ``stream``), or raise GridcommTimeout
        naming ``operation`` and the silent peers (``str(operation)``: an exchange's name is made only when an
        error needs it, not at every wait)."""

    def finish(self, stream: Any = None) -> None:  # noqa: B027 (optional hook)
        """After the unpack is enqueued: tell the senders their data has been consumed (if the transport must)."""

    def check(self, operation: object) -> None:  # noqa: B027 (optional hook)
        """Raise GridcommTimeout if a wait that ran on the GPU (e.g. in a replayed CUDA graph) gave up."""

    @abstractmethod
    def close(self) -> None:
        """Free what the channel holds. Only call when no exchange is in flight."""


def prepares(channel: Channel) -> bool:
    """Whether ``channel`` does anything before the pack (its class overrides ``before_pack``)."""
    return type(channel).before_pack is not Channel.before_pack


def other_nodes(comm: Communicator) -> str | None:
    """Why a transport that reaches only the ranks of one node cannot serve ``comm`` (collective on first use):
    some of its ranks are on other nodes (``Communicator.nodes``, declared ones included), else None."""
    if len(set(comm.nodes)) > 1:
        return f"some ranks are on other nodes ({len(set(comm.nodes))} nodes)"
    return None


class Transport(ABC):
    """A way of moving per-peer messages between ranks. What it can do is declared on the class, and every list
    of transports (the command line's choices, the benchmarks', ``auto``'s candidates, the test suites') is
    derived from these declarations in the registry (``transports/__init__.py``): a new transport is its module
    and one line there."""

    name: ClassVar[str]
    #: The memories whose fields it moves: "host", "device" (GPU) or both (then perhaps only where the library
    #: under it allows, which ``unusable_reason`` says).
    memories: ClassVar[frozenset[str]] = frozenset({"host"})
    #: "node" when it reaches only ranks of the same node (shared memory, CUDA IPC), "any" when it crosses nodes.
    reach: ClassVar[str] = "any"
    #: True when an exchange needs no host work between its launches, so it can be captured in a CUDA graph.
    graph_capturable: ClassVar[bool] = False
    #: True when eager exchanges may replay a graph of their own (``BoundExchange.replay``): captured, and a silent
    #: peer ends the exchange on the GPU by itself (ipc, nvshmem) or by an abort that can end a replay in flight
    #: (nccl: transports/nccl_abort.py; each binding says whether it can, ``Channel.replayable``).
    replayable: ClassVar[bool] = False

    def unusable_reason(self, comm: Communicator, on_device: bool) -> str | None:
        """Why this transport cannot move fields of that memory between the ranks of ``comm`` (None when it can):
        ``local_reason``, else ``ranks_reason`` (collective the first time for some transports)."""
        return self.local_reason(on_device) or self.ranks_reason(comm)

    def local_reason(self, on_device: bool) -> str | None:
        """Why it cannot move fields of that memory in this process, known without asking the other ranks (a
        memory it does not move, a library missing here), or None."""
        if ("device" if on_device else "host") not in self.memories:
            moves = " and ".join("GPU" if m == "device" else m for m in sorted(self.memories))
            return f"{self.name} moves {moves} memory only"
        return None

    def ranks_reason(self, comm: Communicator) -> str | None:
        """Why it cannot move fields between these ranks, which only they together can tell (other nodes, no peer
        access between their GPUs), or None."""
        return None

    @abstractmethod
    def packer_kind(self, on_device: bool) -> PackerKind:
        """Which packer feeds this transport: contiguous buffers ('copy'), MPI datatypes ('datatype') or
        the fields' own memory runs ('direct', for transports that copy straight between fields)."""

    def receive_buffer(self, comm: Communicator, nbytes: int) -> Any:
        """Collective: memory for a 'copy' packer to receive ``nbytes`` into, where the transport needs it to be its
        own (on the GPU NVSHMEM's symmetric heap, on the host shm's shared memory); None lets the packer allocate
        it."""
        return None

    @abstractmethod
    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        """A channel for the messages of ``packer`` (sends to ``packer.layout.sends``' peers, and so on)."""
