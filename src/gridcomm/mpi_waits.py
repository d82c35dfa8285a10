"""MPI requests waited for inside MPI, with a timeout all the same.

A blocking MPI wait lets MPI drive its progress engine in C, as fast as it can; polling from Python calls it at
most every microsecond or two. On 16 ranks of a 64-core host with a CUDA-aware Open MPI 4.1.4, 30 persistent
sends and receives of a small transposition completed in 34.5 µs under ``MPI_Waitall`` against 45.6 µs tested
one at a time from Python and 73.4 µs with ``Testall`` (benchmarks/probe_mpi_waits.py,
``probe-mpi-waits-cpu-16r-20261127T024616Z``). A blocking wait never returns if a peer is silent, so a watchdog
thread ends a wait that has lasted longer than its timeout:

* the receives are waited for in one ``MPI_Waitall``; the watchdog cancels those still pending (a receive
  that has not matched can always be cancelled), which ends the Waitall, and they are posted again at once.
* what is left (sends, a collective) in ``MPI_Waitsome`` together with an *alarm*, an MPI generalized request
  that nothing but the watchdog completes. ``MPI_Waitsome`` returns as requests trickle in (22 times over 30
  requests, 3-4 µs of Python each: 189 µs per transposition against 110 for ``MPI_Waitall`` at 16 ranks,
  ``probe-mpi-waits-cpu-16r-20261127T042615Z``), which is why the receives are not waited for so; by the time
  they are in, the sends are nearly always done.

This needs an MPI that lets another thread cancel or complete a request during a blocking wait
(``MPI_THREAD_MULTIPLE``, which mpi4py asks for) and, by default, more CPUs on the node than ranks: a blocking wait
does not yield its core, and the watchdog threads and the system need one. Elsewhere, or with
``GRIDCOMM_HOST_WAIT=poll``, channels poll (``waiting.poll_until``), one request per turn; ``GRIDCOMM_HOST_WAIT=block``
waits inside MPI wherever MPI allows it. ``RequestWait`` is what a channel holds: the one or the other.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
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

        self._mpi = MPI
        self._waitall, self._waitsome, self._testsome = MPI.Request.Waitall, MPI.Request.Waitsome, MPI.Request.Testsome
        self._alarm = MPI.Grequest.Start()
        self._alarm_rang = False  # the watchdog completed the alarm: the next wait needs a new one
        self._deadline: float | None = None  # time.perf_counter() seconds, while a wait is on
        self._late = False  # the watchdog found the wait in progress past its deadline
        self._receiving: Sequence[Any] = ()  # the receives in MPI_Waitall now, which the watchdog cancels when late
        self._statuses: list[Any] = []
        # The requests (by index) not yet complete when the last wait gave up: those completed before are
        # inactive (persistent) or null, and MPI never reports them again.
        self._outstanding: set[int] | None = None
        _WATCHDOG.watch(self)

    def restart(self) -> None:
        """A new set of requests was started: forget what a wait that gave up left outstanding."""
        self._outstanding = None

    def wait(self, receives: Sequence[Any], others: Sequence[Any], timeout: float, on_timeout: OnTimeout) -> None:
        """Until every request is complete: ``receives``, persistent receives (which may be cancelled and started
        again), and ``others``; after ``timeout`` seconds raise ``on_timeout(elapsed, outstanding)``, the indices
        (receives first, then others) of those not complete. A later call with the same requests waits for those
        still outstanding."""
        start = time.perf_counter()
        with _WATCHDOG.lock:
            self._deadline, self._late = start + timeout, False
        try:
            if self._outstanding is None:
                left = self._receive(receives)
                # By now the sends are nearly always done. (Testsome, not Testall: MPICH 5.0's Testall fails a
                # persistent neighbourhood collective with MPI_ERR_IN_STATUS, its status saying no error.)
                done = (self._testsome(others) or ()) if others else ()
                if len(done) < len(others):
                    first = len(receives)
                    left |= set(range(first, first + len(others))).difference(first + i for i in done)
            else:  # after a wait that gave up
                left = self._outstanding
            if left and not self._late:
                left = self._wait_some([*receives, *others], left)
        finally:
            with _WATCHDOG.lock:
                self._deadline = None
        if self._alarm_rang:  # a new alarm for the next wait; this one is freed (by Waitsome, or here)
            if self._alarm != self._mpi.REQUEST_NULL:
                self._alarm.Wait()
            self._alarm, self._alarm_rang = self._mpi.Grequest.Start(), False
        self._outstanding = left or None
        if left:
            raise on_timeout(time.perf_counter() - start, sorted(left))

    def _receive(self, receives: Sequence[Any]) -> set[int]:
        """Wait for ``receives`` in one MPI_Waitall; the indices of those the watchdog cancelled, which are
        posted again (active, as they were: a test of the channel's requests must not find them complete)."""
        if not receives:
            return set()
        if len(self._statuses) != len(receives):
            self._statuses = [self._mpi.Status() for _ in receives]
        with _WATCHDOG.lock:
            late = self._late
            if not late:
                self._receiving = receives
        if late:  # past the deadline already (a timeout shorter than the watchdog's look): test, do not block
            done = self._testsome(receives) or ()
            return set(range(len(receives))).difference(done)
        try:
            self._waitall(receives, self._statuses)
        finally:
            with _WATCHDOG.lock:
                self._receiving = ()
        cancelled = {i for i, status in enumerate(self._statuses) if status.Is_cancelled()} if self._late else set()
        for i in cancelled:
            receives[i].Start()
        return cancelled

    def _wait_some(self, requests: Sequence[Any], left: set[int]) -> set[int]:
        """MPI_Waitsome over ``requests`` and the alarm until those of ``left`` are complete or the alarm rings;
        what is left."""
        pending = [*requests, self._alarm]
        alarm = len(requests)
        while left:
            done = self._waitsome(pending) or ()
            left = left.difference(done)
            if alarm in done:
                break
        return left

    def ring(self, now: float) -> None:
        """The watchdog's look (its lock held): end a wait past its deadline, by cancelling the receives it
        waits for or by completing its alarm."""
        if self._deadline is None or now <= self._deadline or self._late:
            return
        self._late = True
        if self._receiving:
            for request in self._receiving:
                request.Cancel()  # no effect on one complete already
        elif not self._alarm_rang:
            self._alarm_rang = True
            self._alarm.Complete()

    def close(self) -> None:
        """Complete and free the alarm (nothing may be waiting on it)."""
        with _WATCHDOG.lock:
            _WATCHDOG.forget(self)
            if not self._alarm_rang:
                self._alarm_rang = True
                self._alarm.Complete()
        if self._alarm != self._mpi.REQUEST_NULL:
            self._alarm.Wait()


class RequestWait:
    """How a channel waits for its MPI requests: inside MPI (BlockingWait) where ``blocking_waits_usable`` (the
    node's spare CPUs as the job's first communicator found them; unknown counts as none), else polled one request
    per turn, the last unfinished: each test drives MPI's progress as Testall does, at a fraction of its cost over
    many requests (16 ranks, CUDA-aware Open MPI 4.1: 51.1 µs per transposition against 75.2 with Testall over
    2 x 15 requests; probe-mpi-waits-cpu-16r-20261127T024440Z). ``close()`` it with the channel."""

    def __init__(self) -> None:
        usable = blocking_waits_usable(node_spare_cpus())
        self._blocking: BlockingWait | None = BlockingWait() if usable else None

    def restart(self) -> None:
        """The channel started its requests anew."""
        if self._blocking is not None:
            self._blocking.restart()

    @property
    def blocking(self) -> bool:
        """Whether MPI's own wait is used (else a poll)."""
        return self._blocking is not None

    def wait(self, receives: Sequence[Any], others: Sequence[Any], timeout: float, on_timeout: OnTimeout) -> None:
        """Until every request of ``receives`` (persistent receives, which a blocking wait may cancel and start
        again) and ``others`` is complete; after ``timeout`` seconds raise ``on_timeout(elapsed, outstanding)``,
        ``outstanding`` the indices (receives first, then others) of those not complete."""
        if self._blocking is not None:
            self._blocking.wait(receives, others, timeout, on_timeout)
            return
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


class _Watchdog:
    """The thread that rings the alarms of waits past their deadline: started with the first BlockingWait, a
    daemon that looks every WATCH_S seconds. At exit (before mpi4py finalizes MPI) it frees the alarms that are
    left, so that no generalized request is pending at MPI_Finalize."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Held until closed, so that at exit the alarms of channels never closed are freed too.
        self._waits: set[BlockingWait] = set()
        self._thread: threading.Thread | None = None

    def watch(self, wait: BlockingWait) -> None:
        with self.lock:
            self._waits.add(wait)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gridcomm-mpi-watchdog", daemon=True)
                self._thread.start()
                atexit.register(self._close_all)

    def forget(self, wait: BlockingWait) -> None:
        self._waits.discard(wait)

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_S)
            now = time.perf_counter()
            with self.lock:
                for wait in list(self._waits):
                    wait.ring(now)

    def _close_all(self) -> None:
        from mpi4py import MPI

        if MPI.Is_finalized():
            return
        for wait in list(self._waits):
            wait.close()


_WATCHDOG = _Watchdog()
