"""MPI requests waited for inside MPI with a timeout (gridcomm.mpi_waits), on one rank in-process: a receive
that nothing sends must end in the caller's timeout (tested in a loop as the sends are, or in MPI_Waitall ended
by cancelling it), and a later wait must complete it once it is sent."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

from gridcomm.errors import ArgumentError
from gridcomm.mpi_waits import WATCH_S, BlockingWait, blocking_waits_usable, host_wait_mode


class _Late(Exception):
    pass


def _late(elapsed: float, outstanding) -> Exception:
    return _Late(elapsed, list(outstanding))


def _split(requests: list, receives: int) -> tuple[list, list]:
    return requests[:receives], requests[receives:]


@pytest.mark.parametrize("receives", [0, 1])
def test_a_wait_with_nothing_to_wait_for_gives_up_then_completes_what_arrives(receives):
    """receives=0: the receive tested in a loop until the timeout, as sends are; 1: in MPI_Waitall, which the
    watchdog ends by cancelling it (the next wait starts it again)."""
    comm = MPI.COMM_SELF
    got, sent = np.zeros(4), np.arange(4.0)
    waiting = BlockingWait()
    try:
        receive = comm.Recv_init(got, 0, tag=3)
        send = comm.Send_init(sent, 0, tag=3)
        receive.Start()
        start = time.perf_counter()
        with pytest.raises(_Late) as caught:
            waiting.wait(*_split([receive], receives), 0.2, _late)
        took = time.perf_counter() - start
        assert 0.2 <= caught.value.args[0] <= took and took >= 0.2
        assert caught.value.args[1] == [0]  # the receive is what is outstanding
        send.Start()  # the receive left outstanding now completes in the next wait
        waiting.wait(*_split([receive], receives), 30.0, _late)
        send.Wait()
        assert np.array_equal(got, sent)
        for _ in range(3):  # and the next exchanges as usual
            got[:] = 0
            receive.Start()
            send.Start()
            waiting.wait(*_split([receive, send], receives), 30.0, _late)
            assert np.array_equal(got, sent)
        receive.Free()
        send.Free()
    finally:
        waiting.close()


def test_a_request_that_cannot_be_cancelled_is_given_up_no_sooner_than_the_timeout():
    comm = MPI.COMM_SELF
    waiting = BlockingWait()
    try:
        receive = comm.Irecv(np.zeros(1), 0, tag=4)
        start = time.perf_counter()
        with pytest.raises(_Late):
            waiting.wait((), [receive], 5 * WATCH_S, _late)
        assert time.perf_counter() - start >= 5 * WATCH_S
        receive.Cancel()
        receive.Wait()
    finally:
        waiting.close()


def test_only_what_is_not_complete_is_named():
    """A receive that arrives (waited for in MPI_Waitall) and one tested in a loop that never does: the timeout
    names the second alone (index 1: receives first, then others), and so does a second wait, the first being
    inactive by then."""
    comm = MPI.COMM_SELF
    waiting = BlockingWait()
    got = np.zeros(2)
    try:
        arrives = comm.Recv_init(got[:1], 0, tag=5)
        send = comm.Send_init(np.ones(1), 0, tag=5)
        silent = comm.Irecv(got[1:], 0, tag=6)
        arrives.Start()
        send.Start()
        for _ in range(2):
            with pytest.raises(_Late) as caught:
                waiting.wait([arrives], [silent, send], 3 * WATCH_S, _late)
            assert caught.value.args[1] == [1], caught.value.args
        assert got[0] == 1.0
        silent.Cancel()
        silent.Wait()
        arrives.Free()
        send.Free()
    finally:
        waiting.close()


def test_host_wait_mode_is_checked(monkeypatch):
    monkeypatch.setenv("GRIDCOMM_HOST_WAIT", "spin")
    with pytest.raises(ArgumentError, match="GRIDCOMM_HOST_WAIT='spin'"):
        host_wait_mode()
    multiple = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    monkeypatch.setenv("GRIDCOMM_HOST_WAIT", "poll")
    assert host_wait_mode() == "poll" and not blocking_waits_usable(spare_cpus=8)
    monkeypatch.setenv("GRIDCOMM_HOST_WAIT", "block")  # wherever MPI allows it, spare CPUs or not
    assert blocking_waits_usable(spare_cpus=0) == multiple and blocking_waits_usable(spare_cpus=None) == multiple
    monkeypatch.delenv("GRIDCOMM_HOST_WAIT")
    assert host_wait_mode() == "auto"
    assert not blocking_waits_usable(spare_cpus=None)  # not known
    assert not blocking_waits_usable(spare_cpus=0)  # a CPU per rank and none to spare: polled
    assert not blocking_waits_usable(spare_cpus=-2)  # oversubscribed
    assert blocking_waits_usable(spare_cpus=8) == multiple
