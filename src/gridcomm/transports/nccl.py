"""Transport ``nccl``: grouped NCCL send/recv per peer, enqueued on the exchange's stream.

``wait()`` is stream-ordered, as ipc's and nvshmem's are: the stream already orders later work after the
transfers, so the host does not wait for the GPU (that wait was 18.6 of the 43.2 µs of an eager nccl exchange on
4 x H100). NCCL's kernels cannot give up by themselves, so a watchdog thread (one per process, as
torch.distributed's) watches each exchange in flight: one whose transfers have not finished ``timeout`` seconds
after the GPU reached them (after the exchange before it on the channel finished) makes it abort the
communicator, which frees the GPU; the timeout is raised by the next ``start()``, ``wait()``, ``check()`` or
``close()`` on the host, naming that exchange. The host runs at most MAX_AHEAD exchanges ahead of the GPU.

An eager exchange replays a CUDA graph of its own (``BoundExchange.replay``) where the abort can run without
Python's GIL (nccl_abort): NCCL's abort waits until the graphs that captured the communicator are freed, and they
can be freed only once the abort has ended their replays, so the abort runs on a thread of its own meanwhile.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..comm import Communicator
from ..device import gpu_count
from ..errors import ArgumentError, GridcommError, GridcommTimeout
from ..gpu import nccl_communicator
from ..packing.table import message_range
from . import nccl_abort
from .base import Channel, PackerKind, Transport, poll_until

log = logging.getLogger(__name__)

#: Exchanges of one channel the host may enqueue before waiting on the host for the oldest: a full launch queue
#: would block the host inside a CUDA or NCCL call, where the watchdog could not reach it.
MAX_AHEAD = 32
#: Seconds between the watchdog's looks at the exchanges in flight.
WATCH_INTERVAL_S = 0.005
#: Seconds the watchdog waits for an abort running beside it (nccl_abort) before it goes on without it.
ABORT_WAIT_S = 60.0


@dataclass(frozen=True)
class NcclTransport(Transport):
    """NCCL point-to-point (``cupy.cuda.nccl``), bootstrapped over MPI; graph-capturable.

    Args:
        direct: send and receive a message that lies as one contiguous range in its array on both sides (a
            block of a transposition, whole rows of a C-order field) from and into the arrays themselves, with
            no pack or unpack (``"nccl/direct=0"``: every message through the buffers).
    """

    direct: bool = True
    name = "nccl"
    memories = frozenset({"device"})
    graph_capturable = True
    # Replayable where its channel can abort without the GIL (module doc; the channel's ``replayable``): with
    # CuPy's abort, which holds it, a silent peer deadlocked a replaying rank (2 x H100, 2026-11-26).
    replayable = True

    def local_reason(self, on_device: bool) -> str | None:
        if (reason := super().local_reason(on_device)) is not None:
            return reason
        try:
            from cupy.cuda import nccl  # noqa: F401
        except Exception as error:
            return f"cupy.cuda.nccl is not available ({error})"
        return None if gpu_count() else "no GPU"

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def __post_init__(self) -> None:
        if self.direct not in (True, False):  # 0 and 1 too: a label's "direct=0"
            raise ArgumentError(f"NcclTransport(direct={self.direct!r}): give True or False")

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _NcclChannel(comm, packer, bool(self.direct))


class _Watchdog:
    """The thread that aborts the NCCL communicator of an exchange that outlived its timeout (module doc). The
    channels' queues of exchanges in flight are read and written under ``lock`` only."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._watched: set[_NcclChannel] = set()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, channel: _NcclChannel) -> None:
        """Look at ``channel`` until it has nothing in flight (call with ``lock`` held)."""
        if channel in self._watched:  # looked at already: the thread is awake (waking it costs the caller µs)
            return
        self._watched.add(channel)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="gridcomm-nccl-watchdog", daemon=True)
            self._thread.start()
        self._woken.set()

    def _run(self) -> None:
        while True:
            self._woken.wait()
            with self.lock:
                now = time.monotonic()
                self._watched = {c for c in self._watched if self._look(c, now)}
                if not self._watched:
                    self._woken.clear()
            time.sleep(WATCH_INTERVAL_S)

    @staticmethod
    def _look(channel: _NcclChannel, now: float) -> bool:
        """``channel.look(now)``; an error there (a CUDA call refused, say) is logged and looked at again next
        time: the thread must outlive it, or no exchange would be watched any more."""
        try:
            return channel.look(now)
        except Exception as error:
            log.warning("the nccl watchdog could not look at an exchange in flight: %s", error)
            return True


_WATCHDOG = _Watchdog()


def direct_messages(comm: Communicator, packer: Any) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """Collective: the send and the receive messages (by index: (address, bytes)) that move from and into the
    arrays themselves (``table.message_range`` on both sides of the pair, agreed with each peer: NCCL pairs a
    send with a receive of as many bytes). None where the ranges a rank would send from and receive into overlap
    (an array transposed into itself): NCCL's kernel would read what it writes."""
    layout = packer.layout
    sends = {m.peer: (i, message_range(m, layout.fields, packer.sources)) for i, m in enumerate(layout.sends)}
    recvs = {m.peer: (i, message_range(m, layout.fields, packer.destinations)) for i, m in enumerate(layout.recvs)}
    read = [r for _, r in sends.values() if r is not None]
    written = [r for _, r in recvs.values() if r is not None]
    if any(a < b + n and b < a + m for a, m in read for b, n in written):
        sends, recvs = {}, {}
    # What each peer can do for this pair: (it sends to me from its array, it receives from me into its array).
    told = comm.mpi.alltoall(
        [(p in sends and sends[p][1] is not None, p in recvs and recvs[p][1] is not None) for p in range(comm.size)]
    )
    direct_sends = {i: r for p, (i, r) in sends.items() if r is not None and told[p][1]}
    direct_recvs = {i: r for p, (i, r) in recvs.items() if r is not None and told[p][0]}
    return direct_sends, direct_recvs


class _NcclChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any, direct: bool = True) -> None:
        import cupy
        from cupy.cuda import nccl

        self._nccl = nccl
        self._owner = comm
        self._comm = nccl_communicator(comm)
        self._handle = nccl_abort.handle(self._comm)  # None: CuPy's abort, which holds the GIL: no replay
        self.replayable = self._handle is not None
        layout = packer.layout
        self._sends = [(packer.send_message(i).data.ptr, m.nbytes, m.peer) for i, m in enumerate(layout.sends)]
        self._recvs = [(packer.recv_message(i).data.ptr, m.nbytes, m.peer) for i, m in enumerate(layout.recvs)]
        # Messages that lie whole in their arrays on both sides move from and into them: no pack, no unpack.
        sends, recvs = direct_messages(comm, packer) if direct and hasattr(packer, "leave_out") else ({}, {})
        if sends or recvs:
            packer.leave_out(sends, recvs)
            self._sends = [(*sends[i], p) if i in sends else (a, n, p) for i, (a, n, p) in enumerate(self._sends)]
            self._recvs = [(*recvs[i], p) if i in recvs else (a, n, p) for i, (a, n, p) in enumerate(self._recvs)]
        self.direct = (len(sends), len(recvs))  # messages moved without the buffers: (sends, receives)
        self._cupy = cupy
        self._device = cupy.cuda.Device().id  # the watchdog's thread queries the events on this device
        # Under _WATCHDOG.lock: the exchanges in flight, oldest first, as (event, operation, timeout); since when
        # the oldest one has been the oldest (its timeout counts from then); events free for the next exchanges;
        # the timeout the watchdog found, not yet raised on the host.
        self._in_flight: collections.deque[tuple[Any, object, float]] = collections.deque()
        self._oldest_since = 0.0
        self._free_events: list[Any] = []
        self._timed_out: GridcommTimeout | None = None
        self._aborted = ""  # why the communicator was aborted: nothing may use it afterwards
        self.replay_check, self.replay_track = self._usable, self._track  # the exchanger's lean replay
        # NCCL connects a pair of ranks on their first send/recv, and that needs both on the host: connect
        # now, while every rank is here (binding is collective), so that no exchange blocks in groupEnd.
        warm_up = cupy.cuda.Stream(non_blocking=True)
        self.start(warm_up)
        warm_up.synchronize()

    def _usable(self) -> None:
        if self._timed_out is not None:  # read without the lock (it is called 3 times an exchange): a timeout
            self._raise_timeout()  # the watchdog sets just after this read is raised by the next call
        if self._aborted:
            raise GridcommError(
                f"rank {self._owner.rank}: this exchanger's NCCL communicator was aborted after {self._aborted}; "
                "its halos are undefined. Make a new HaloExchanger (NCCL cannot recover an aborted communicator)"
            )
        if self._owner.nccl is not self._comm:  # another exchanger over it timed out, or it was closed
            raise GridcommError(
                f"rank {self._owner.rank}: the NCCL communicator under this exchanger was aborted (a timeout in "
                "another exchanger over the same Communicator) or closed; make a new Communicator and exchanger"
            )

    def before_pack(self, stream: Any, timeout: float) -> None:
        self._usable()

    def start(self, stream: Any = None) -> None:
        self._usable()
        if not (self._recvs or self._sends):
            # Nothing to move (one rank; a periodic wrap is the pack kernel's): an empty group would only cost,
            # and NCCL 2.27+ leaks ~160 B of host memory per group on a communicator of one rank (NCCL #1944;
            # measured: 1.7 MiB per 10,000 exchanges in gridcomm bench soak --gpu --np 1).
            return
        nccl, comm, ptr = self._nccl, self._comm, stream.ptr
        nccl.groupStart()
        for address, nbytes, peer in self._recvs:
            comm.recv(address, nbytes, nccl.NCCL_UINT8, peer, ptr)
        for address, nbytes, peer in self._sends:
            comm.send(address, nbytes, nccl.NCCL_UINT8, peer, ptr)
        nccl.groupEnd()

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        """Stream-ordered (module doc): the exchange is handed to the watchdog and the host goes on, unless
        MAX_AHEAD of this channel's exchanges are still in flight: then the host waits for the oldest. Nothing
        while the stream is captured into a graph (its replays are waited for by whoever launches them)."""
        self._usable()
        stream = stream if stream is not None else self._cupy.cuda.get_current_stream()
        if not stream.is_capturing():
            self._track(stream, operation, timeout)

    def _track(self, stream: Any, operation: object, timeout: float) -> None:
        """Hand the exchange just enqueued on ``stream`` (not being captured) to the watchdog; wait on the host for
        the oldest if MAX_AHEAD are in flight."""
        if not (self._recvs or self._sends):
            return
        pinned = getattr(operation, "pinned", None)  # the exchange's name with its number as it is now
        named = pinned() if pinned is not None else operation
        with _WATCHDOG.lock:  # taken once an exchange: an event reused (or made), recorded, handed over
            event = self._free_events.pop() if self._free_events else None
            if event is None:
                event = self._cupy.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
            if not self._in_flight:
                self._oldest_since = time.monotonic()
            self._in_flight.append((event, named, timeout))
            _WATCHDOG.watch(self)
            if len(self._in_flight) > MAX_AHEAD:  # the watchdog forgets finished ones only every WATCH_INTERVAL_S
                self._forget_finished(time.monotonic())
            ahead = len(self._in_flight) > MAX_AHEAD
        if ahead:
            self._wait_for_oldest()

    def _wait_for_oldest(self) -> None:
        with _WATCHDOG.lock:
            if not self._in_flight:
                return
            oldest, operation, timeout = self._in_flight[0]

        def gave_up(elapsed: float) -> GridcommTimeout:  # the watchdog aborts first; this is its backstop
            with _WATCHDOG.lock:
                self._give_up(operation, elapsed)
            self.abandoned = True
            return self._take_timeout() or GridcommTimeout(str(operation), self._owner.rank, [], elapsed)

        poll_until(lambda: oldest.done or bool(self._aborted), timeout + 2 * WATCH_INTERVAL_S + 1.0, gave_up)
        self._raise_timeout()

    def look(self, now: float) -> bool:
        """The watchdog's look (``_WATCHDOG.lock`` held): forget the exchanges that finished; abort the
        communicator if the oldest has outlived its timeout. Whether any exchange is still in flight."""
        if self._in_flight:
            self._cupy.cuda.runtime.setDevice(self._device)  # not the thread's default device 0's context
        self._forget_finished(now)
        if self._in_flight:
            _, operation, timeout = self._in_flight[0]
            if now - self._oldest_since > timeout:
                self._give_up(operation, now - self._oldest_since)
        return bool(self._in_flight)

    def _forget_finished(self, now: float) -> None:
        """Drop the finished exchanges from the front of the queue, their events kept for the next ones
        (``_WATCHDOG.lock`` held); the oldest left has been the oldest since ``now``."""
        while self._in_flight and self._in_flight[0][0].done:
            self._free_events.append(self._in_flight.popleft()[0])
            self._oldest_since = now

    def _give_up(self, operation: object, elapsed: float) -> None:
        """Abort the communicator (``_WATCHDOG.lock`` held): NCCL cannot say which peer is missing, and its
        kernels would spin forever; aborted, they end and the GPU is free again. It cannot be used afterwards."""
        if self._aborted:
            return
        peers = sorted({p for _, _, p in self._recvs})
        # Said before the communicator goes: the host's next call raises this timeout, not "aborted elsewhere".
        self._aborted = f"a timeout in {operation}"
        self._timed_out = GridcommTimeout(f"{operation} (nccl; communicator aborted)", self._owner.rank, peers, elapsed)
        self._owner.nccl = None
        if self._handle is not None:  # the abort's flags end the replays in flight, then the graphs can go
            aborting = nccl_abort.abort_in_background(self._comm, self._handle)
            self._owner.release_graphs()
            aborting.join(ABORT_WAIT_S)
            if aborting.is_alive():
                log.warning("rank %d: NCCL's abort still runs after %.0f s", self._owner.rank, ABORT_WAIT_S)
        else:  # CuPy's abort holds the GIL: the graphs go first (none replays: capture() says so)
            self._owner.release_graphs()
            self._comm.abort()
        self._free_events.extend(e for e, _, _ in self._in_flight)
        self._in_flight.clear()

    def _take_timeout(self) -> GridcommTimeout | None:
        with _WATCHDOG.lock:
            error, self._timed_out = self._timed_out, None
        return error

    def _raise_timeout(self) -> None:
        """Raise the timeout the watchdog found, once; the exchange it names is abandoned."""
        if (error := self._take_timeout()) is not None:
            self.abandoned = True
            raise error

    def check(self, operation: object) -> None:
        self._raise_timeout()

    def close(self) -> None:
        with _WATCHDOG.lock:
            self._in_flight.clear()
            self._free_events.clear()
        self._sends = self._recvs = []
