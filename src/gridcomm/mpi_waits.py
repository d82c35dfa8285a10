"""MPI requests waited for inside MPI, with a timeout all the same.

A blocking MPI wait lets MPI drive its progress engine in C, as fast as it can; polling from Python calls it at
most every microsecond or two. On 16 ranks of a 64-core host with a CUDA-aware Open MPI 4.1.4, 30 persistent
sends and receives of a small transposition completed in 34.5 µs under ``MPI_Waitall`` against 45.6 µs tested
one at a time from Python and 73.4 µs with ``Testall`` (benchmarks/probe_mpi_waits.py,
``probe-mpi-waits-cpu-16r-20261127T024616Z``). A blocking wait never returns if a peer is silent, so:

* the receives are waited for in one ``MPI_Waitall``; a watchdog thread cancels those still pending once the
  timeout has passed (a receive that has not matched can always be cancelled), which ends the Waitall, and they
  are posted again at once, so that a later wait completes the exchange.
* what is left (sends, a collective's one request), which cannot be cancelled, is tested in a loop without
  yielding (``Testall``, or ``Test`` for one request) until it is complete or the timeout has passed. By the
  time the receives are in, the sends are nearly always done or about to be. Waiting for them in
  ``MPI_Waitsome`` beside an MPI generalized request that the watchdog completes (the way before) cost 8-25 µs
  per call on 16 ranks of a 4 x H100 host, and was needed in a third to nine tenths of the transpositions
  (``probe-mpi-waits-cpu-16r-20261127T054924Z``): more than the whole send side of ``MPI_Waitall``.

This needs an MPI that lets another thread cancel a request during a blocking wait (``MPI_THREAD_MULTIPLE``,
which mpi4py asks for) and, by default, more CPUs on the node than ranks: neither wait yields its core, and the
watchdog threads and the system need one. Elsewhere, or with ``GRIDCOMM_HOST_WAIT=poll``, channels poll
(``waiting.poll_until``), one request per turn; ``GRIDCOMM_HOST_WAIT=block`` waits inside MPI wherever MPI allows
it. ``RequestWait`` is what a channel holds: the one or the other.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .comm import node_spare_cpus
from .errors import ArgumentError
from .waiting import poll_until

#: Seconds between the watchdog's looks at the waits in progress: how late after its timeout a silent peer is
#: reported (timeouts are seconds; default 60).
WATCH_S = 0.01

#: ``on_timeout(elapsed, outstanding)``: the exception for a wait that gave up after ``elapsed`` seconds, with the
#: indices of the requests not complete.
OnTimeout = Callable[[float, Sequence[int]], Exception]


def host_wait_mode() -> str:
    """``GRIDCOMM_HOST_WAIT``: ``auto`` (the default: MPI's own wait where the node has CPUs to spare), ``block``
    (MPI's own wait wherever MPI allows it) or ``poll``."""
    value = os.environ.get("GRIDCOMM_HOST_WAIT") or "auto"
    if value not in ("auto", "block", "poll"):
        raise ArgumentError(f"GRIDCOMM_HOST_WAIT={value!r}: use 'auto' (the default), 'block' or 'poll'")
    return value


def blocking_waits_usable(spare_cpus: int | None) -> bool:
    """Whether MPI's own wait is used here: MPI runs with ``MPI_THREAD_MULTIPLE``, and ``GRIDCOMM_HOST_WAIT`` is
    ``block``, or ``auto`` where the node has more CPUs than ranks (``spare_cpus`` > 0; None: not known).

    A blocking wait spins without yielding, beside a watchdog thread per rank: where the ranks take every CPU,
    polling (which yields) was faster (2 ranks on 2 cores with MPICH: 3.3 µs per 8-byte halo exchange waiting
    inside MPI, 2.9-3.0 µs polled; benchmarks/host_exchange.py)."""
    from mpi4py import MPI

    mode = host_wait_mode()
    if mode == "poll" or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        return False
    return mode == "block" or (spare_cpus is not None and spare_cpus > 0)


class BlockingWait:
    """Waits for MPI requests inside MPI, giving up after a timeout (see the module's text). One per channel;
    ``close()`` it with the channel."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self._waitall, self._testall = MPI.Request.Waitall, MPI.Request.Testall
        self._status = MPI.Status
        # Under the watchdog's lock: the receives in MPI_Waitall now and when it is to end them
        # (time.perf_counter() seconds), and whether it did.
        self._receiving: Sequence[Any] = ()
        self._deadline = 0.0
        self._late = False
        self._statuses: list[Any] = []
        _WATCHDOG.watch(self)

    def wait(self, receives: Sequence[Any], others: Sequence[Any], timeout: float, on_timeout: OnTimeout) -> None:
        """Until every request is complete: ``receives``, persistent receives (which may be cancelled and started
        again), and ``others``; after ``timeout`` seconds raise ``on_timeout(elapsed, outstanding)``, the indices
        (receives first, then others) of those not complete. A later call with the same requests waits for those
        still outstanding (the others complete before are inactive, or null, and count as done)."""
        start = time.perf_counter()
        deadline = start + timeout
        left = self._receive(receives, deadline) if receives else []
        if others and (left or not self._spin(others, deadline)):
            # Request_get_status neither frees nor deactivates, and finds an inactive request complete.
            left += [len(receives) + i for i, request in enumerate(others) if not request.Get_status()]
        if left:
            raise on_timeout(time.perf_counter() - start, left)

    def _receive(self, receives: Sequence[Any], deadline: float) -> list[int]:
        """Wait for ``receives`` in one MPI_Waitall; the indices of those the watchdog cancelled at ``deadline``,
        which are posted again (active, as they were: a test of the channel's requests must not find them
        complete)."""
        if len(self._statuses) != len(receives):
            self._statuses = [self._status() for _ in receives]
        with _WATCHDOG.lock:
            self._receiving, self._deadline, self._late = receives, deadline, False
        try:
            self._waitall(receives, self._statuses)
        finally:
            with _WATCHDOG.lock:
                self._receiving, late = (), self._late
        if not late:
            return []
        cancelled = [i for i, status in enumerate(self._statuses) if status.Is_cancelled()]
        for i in cancelled:
            receives[i].Start()
        return cancelled

    def _spin(self, others: Sequence[Any], deadline: float) -> bool:
        """Test ``others`` until they are complete (True) or ``deadline`` has passed (False). One request is tested
        alone: MPICH 5.0's Testall fails a persistent neighbourhood collective with MPI_ERR_IN_STATUS, its status
        saying no error."""
        clock = time.perf_counter
        if len(others) == 1:
            test = others[0].Test
            while not test():
                if clock() > deadline:
                    return False
            return True
        testall = self._testall
        while not testall(others):
            if clock() > deadline:
                return False
        return True

    def ring(self, now: float) -> None:
        """The watchdog's look (its lock held): cancel the receives of a wait past its deadline."""
        if self._receiving and not self._late and now > self._deadline:
            self._late = True
            for request in self._receiving:
                request.Cancel()  # no effect on one complete already

    def close(self) -> None:
        with _WATCHDOG.lock:
            _WATCHDOG.forget(self)


class RequestWait:
    """How a channel waits for its MPI requests: inside MPI (BlockingWait) where ``blocking_waits_usable`` (the
    node's spare CPUs as the job's first communicator found them; unknown counts as none), else polled one request
    per turn, the last unfinished: each test drives MPI's progress as Testall does, at a fraction of its cost over
    many requests (16 ranks, CUDA-aware Open MPI 4.1: 51.1 µs per transposition against 75.2 with Testall over
    2 x 15 requests; probe-mpi-waits-cpu-16r-20261127T024440Z). ``close()`` it with the channel."""

    def __init__(self) -> None:
        usable = blocking_waits_usable(node_spare_cpus())
        self._blocking: BlockingWait | None = BlockingWait() if usable else None
        if self._blocking is not None:  # its own wait, called straight: one Python call fewer in every wait
            self.wait = self._blocking.wait  # type: ignore[method-assign]

    @property
    def blocking(self) -> bool:
        """Whether MPI's own wait is used (else a poll)."""
        return self._blocking is not None

    def wait(self, receives: Sequence[Any], others: Sequence[Any], timeout: float, on_timeout: OnTimeout) -> None:
        """Until every request of ``receives`` (persistent receives, which a blocking wait may cancel and start
        again) and ``others`` is complete; after ``timeout`` seconds raise ``on_timeout(elapsed, outstanding)``,
        ``outstanding`` the indices (receives first, then others) of those not complete. (This is the poll; a
        blocking RequestWait's ``wait`` is its BlockingWait's.)"""
        left = [*receives, *others]  # tested from the end; what is left is a prefix, so its indices are theirs

        def done() -> bool:  # the last first: the sends (others) of a channel go before its receives
            while left and left[-1].Test():
                left.pop()
            return not left

        def gave_up(elapsed: float) -> Exception:  # those left behind the last one tested may be complete
            return on_timeout(elapsed, [i for i, request in enumerate(left) if not request.Test()])

        poll_until(done, timeout, gave_up)

    def close(self) -> None:
        if self._blocking is not None:
            self._blocking.close()
            self._blocking = None
            del self.wait  # the poll again, with nothing to poll


class _Watchdog:
    """The thread that cancels the receives of waits past their deadline: started with the first BlockingWait, a
    daemon that looks every WATCH_S seconds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._waits: weakref.WeakSet[BlockingWait] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def watch(self, wait: BlockingWait) -> None:
        with self.lock:
            self._waits.add(wait)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gridcomm-mpi-watchdog", daemon=True)
                self._thread.start()

    def forget(self, wait: BlockingWait) -> None:
        self._waits.discard(wait)

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_S)
            now = time.perf_counter()
            with self.lock:
                for wait in list(self._waits):
                    wait.ring(now)


_WATCHDOG = _Watchdog()
