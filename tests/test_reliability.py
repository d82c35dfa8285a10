"""Faults: a rank killed or silent mid-run ends the whole job in bounded time, with a message, leaving no process.

Each case runs tests/mpi_programs/faults.py on 4 ranks. With the launcher's own cleanup (MPICH's hydra kills
the job when a rank dies) and without it (``-disable-auto-cleanup``: then gridcomm's timeout and abort are what
end it), on every host transport.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from conftest import MPIEXEC, PROGRAMS, needs_mpiexec, run_mpi
from gpu_support import gpu_count, needs_gpus
from gridcomm.errors import ArgumentError, ArgumentTypeError
from gridcomm.exchange import eager_replay
from gridcomm.timeouts import check_on_timeout, check_timeout
from gridcomm.validate import check_validate

RANKS = 4
TIMEOUT_S = 3  # gridcomm's, inside the job
SLACK_S = 40  # start-up of 4 Python ranks on 2 busy cores, the abort, the launcher's cleanup


def _is_hydra() -> bool:
    if MPIEXEC is None:
        return False
    try:
        return "HYDRA" in subprocess.run([MPIEXEC, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


HYDRA = _is_hydra()


def run_fault(
    fault: str,
    transport: str,
    tmp_path: Path,
    launcher_cleanup: bool = True,
    ranks: int = RANKS,
    env: dict[str, str] | None = None,
) -> tuple[int, str, float]:
    """Run faults.py on ``ranks`` ranks; (exit status, output, seconds). Fails the test if the job outlives
    TIMEOUT_S + SLACK_S (run_mpi) or leaves a rank behind."""
    pids = tmp_path / "pids"
    pids.mkdir()
    start = time.monotonic()
    rc, text = run_mpi(
        ranks,
        [str(PROGRAMS / "faults.py"), fault, transport, str(pids)],
        TIMEOUT_S + SLACK_S,
        {"GRIDCOMM_TIMEOUT": str(TIMEOUT_S), **(env or {})},
        () if launcher_cleanup else ("-disable-auto-cleanup",),
    )
    seconds = time.monotonic() - start
    time.sleep(0.5)  # the launcher has returned; give the kernel a moment to reap what it killed
    left = [p.name for p in pids.iterdir() if _alive(int(p.read_text()))]
    assert not left, f"{fault}/{transport}: rank(s) {left} still running after the job ended:\n{text[-4000:]}"
    assert len(list(pids.iterdir())) == ranks, f"not every rank started:\n{text[-4000:]}"
    return rc, text, seconds


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _gridcomm_abort(text: str, rank_waited_for: int) -> bool:
    return "timed out" in text and f"rank(s) {rank_waited_for}" in text and "aborts the job" in text


TRANSPORTS = ["mpi", "neighbor", "cma", "shm"]


def _reports_the_death(text: str) -> bool:
    """The launcher's report of a rank killed by signal 9, or gridcomm's timeout naming rank 3 and the abort."""
    return "signal 9" in text or "KILLED BY SIGNAL" in text.upper() or _gridcomm_abort(text, RANKS - 1)


def _hydra_failed(text: str) -> bool:
    """MPICH's hydra gave up on the job itself: with -disable-auto-cleanup its proxy sometimes fails writing a
    PMI response to the killed rank's closed socket, and mpiexec then ends every rank with its own errors
    before gridcomm's timeout comes (seen in about 1 of 20 runs of each case)."""
    return "unable to forward PMI response" in text and "process manager error" in text


@needs_mpiexec
@pytest.mark.parametrize("launcher_cleanup", [True, False], ids=["launcher-cleanup", "no-launcher-cleanup"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_killed_rank_ends_the_job(transport, launcher_cleanup, tmp_path):
    """SIGKILL on rank 3 mid-run ends every rank with a report of it. With the launcher's cleanup, hydra does
    it; with ``-disable-auto-cleanup`` the dead rank's neighbours time out, name it and abort (or hydra still
    ends the job first: it does so in some runs, and in a few its proxy fails on the dead rank's socket and
    ends the job with hydra's own errors: still no hang and no rank left, which run_fault checks)."""
    if not launcher_cleanup and not HYDRA:
        pytest.skip("-disable-auto-cleanup is an option of MPICH's hydra launcher")
    rc, text, _ = run_fault("kill", transport, tmp_path, launcher_cleanup=launcher_cleanup)
    assert rc != 0, f"the job exited 0 although rank 3 was killed:\n{text[-4000:]}"
    ended_by_hydra_failing = not launcher_cleanup and _hydra_failed(text)
    assert _reports_the_death(text) or ended_by_hydra_failing, f"nothing says that rank 3 died:\n{text[-4000:]}"


@needs_mpiexec
@pytest.mark.parametrize("transport", ["mpi", "cma", "shm"])
def test_silent_rank_ends_the_job_with_a_timeout_naming_it(transport, tmp_path):
    """Rank 3 stays alive but stops exchanging: its neighbours time out naming it, and the job is aborted."""
    rc, text, seconds = run_fault("silent", transport, tmp_path)
    assert rc != 0
    assert _gridcomm_abort(text, RANKS - 1), f"no timeout naming rank 3, then an abort:\n{text[-4000:]}"
    assert "halo exchange #21" in text, text[-4000:]
    assert seconds >= TIMEOUT_S


@needs_mpiexec
def test_rank_that_never_builds_the_exchanger_ends_the_job(tmp_path):
    """Rank 3 never calls HaloExchanger(...): the others give up in the constructor instead of hanging in it."""
    rc, text, _seconds = run_fault("late", "mpi", tmp_path)
    assert rc != 0
    assert "HaloExchanger() (waiting for every rank to call it) timed out" in text, text[-4000:]
    assert "aborts the job" in text


def test_on_timeout_setting(monkeypatch):
    monkeypatch.delenv("GRIDCOMM_ON_TIMEOUT", raising=False)
    assert check_on_timeout(None) == "abort"
    monkeypatch.setenv("GRIDCOMM_ON_TIMEOUT", "raise")
    assert check_on_timeout(None) == "raise"
    assert check_on_timeout("abort") == "abort"
    monkeypatch.setenv("GRIDCOMM_ON_TIMEOUT", "ignore")
    with pytest.raises(ArgumentError, match="GRIDCOMM_ON_TIMEOUT='ignore'"):
        check_on_timeout(None)
    with pytest.raises(ArgumentError, match="on_timeout='later'"):
        check_on_timeout("later")


def test_timeout_and_validate_settings(monkeypatch):
    assert check_timeout(None, 60.0) == 60.0
    assert check_timeout(2, 60.0) == 2.0
    for bad in (0, -1, float("nan"), "soon"):
        with pytest.raises(ArgumentError, match="timeout"):
            check_timeout(bad, 60.0)
    with pytest.raises(ArgumentTypeError):
        check_timeout(True, 60.0)
    monkeypatch.delenv("GRIDCOMM_VALIDATE", raising=False)
    assert check_validate(None) is False
    monkeypatch.setenv("GRIDCOMM_VALIDATE", "1")
    assert check_validate(None) is True
    assert check_validate(False) is False
    monkeypatch.setenv("GRIDCOMM_VALIDATE", "sometimes")
    with pytest.raises(ArgumentError, match="GRIDCOMM_VALIDATE"):
        check_validate(None)
    with pytest.raises(ArgumentTypeError, match="validate"):
        check_validate("yes")
    monkeypatch.delenv("GRIDCOMM_REPLAY", raising=False)
    assert eager_replay() is True
    for off in ("0", "off", " No "):
        monkeypatch.setenv("GRIDCOMM_REPLAY", off)
        assert eager_replay() is False
    monkeypatch.setenv("GRIDCOMM_REPLAY", "graphs")
    with pytest.raises(ArgumentError, match=r"GRIDCOMM_REPLAY='graphs': use 1 \(replay"):
        eager_replay()


@needs_mpiexec
@pytest.mark.gpu
@needs_gpus(1)
@pytest.mark.parametrize("fault", ["kill", "silent"])
@pytest.mark.parametrize("transport", ["nccl", "ipc", "staged"])
def test_gpu_faults_end_the_job(transport, fault, tmp_path):
    """On one rank per GPU, 2 to 4 of them (or 2 sharing the one GPU lent: ipc and staged): the last rank killed,
    or silent, mid-run: the job ends in bounded time, no rank left behind; a silent peer is named in a timeout."""
    if transport == "nccl" and gpu_count() < 2:
        pytest.skip("NCCL refuses two ranks on one GPU, and only one GPU is here")
    ranks = min(max(gpu_count(), 2), RANKS)
    rc, text, _ = run_fault(fault, transport, tmp_path, ranks=ranks, env={"GRIDCOMM_CHECK_DEVICE": "gpu"})
    assert rc != 0, text[-4000:]
    if fault == "silent":
        last = ranks - 1
        assert _gridcomm_abort(text, last), f"no timeout naming rank {last}, then an abort:\n{text[-4000:]}"


@needs_mpiexec
@pytest.mark.parametrize("nranks", [2, 3])
def test_validation_names_a_corrupted_halo(mpi_checks, nranks):
    """checks_validate: a changed cell is reported with its field, peer and box; right exchanges pass."""
    mpi_checks("checks_validate", nranks, timeout=120)


@needs_mpiexec
@pytest.mark.parametrize("program", ["checks_exchange", "checks_unstructured", "checks_transpose"])
def test_validation_passes_every_right_exchange(mpi_checks, program):
    """The exchange, unstructured and transposition suites with GRIDCOMM_VALIDATE=1: no false alarm (every
    transport, dtype, memory order, trailing axis and periodic wrap the suites cover)."""
    # The unstructured suite's hypothesis part at 300 examples (of 1000 in its own run), on 1 to 3 ranks.
    mpi_checks(program, 3, timeout=300, env={"GRIDCOMM_VALIDATE": "1", "GRIDCOMM_UNSTRUCTURED_EXAMPLES": "300"})


def test_dropping_an_unclosed_exchanger_warns(decompose):
    """An exchanger dropped without close() keeps its MPI objects: a ResourceWarning says so; a closed one is quiet."""
    import gc
    import warnings

    import numpy as np

    from gridcomm import HaloExchanger

    d = decompose((8,), halo=1, periodic=True)
    exchanger = HaloExchanger(d, d.zeros(np.float64))
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del exchanger
        gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with HaloExchanger(d, d.zeros(np.float64)) as closed:
            closed.exchange()
        del closed
        gc.collect()


class _ScriptedEvent:
    """A CUDA event whose ``done`` answers from a script, then True: a copy that lands between two checks."""

    def __init__(self, *answers: bool) -> None:
        self._answers = list(answers)

    @property
    def done(self) -> bool:
        return self._answers.pop(0) if self._answers else True


class _Request:
    def __init__(self, k: int, started: list[int]) -> None:
        self.k, self._started = k, started

    def Start(self) -> None:
        self._started.append(self.k)

    def Test(self) -> bool:
        return True


def test_staged_sends_the_chunks_of_a_peer_in_order(monkeypatch):
    """The chunks of a peer share a tag, so MPI matches them in the order they start. Chunk 0's copy down lands
    just after it was checked, chunk 1's before it is: chunk 1 must still wait for chunk 0 (on 4 x H100 the
    other order ended a halo bench in MPI_ERR_TRUNCATE)."""
    import sys
    import types

    from gridcomm.transports.staged import _Chunk, _StagedChannel

    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace())  # _progress imports it; no copy is enqueued
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    started: list[int] = []
    channel = object.__new__(_StagedChannel)
    events = [_ScriptedEvent(False), _ScriptedEvent(), _ScriptedEvent(False, False)]
    channel._to_send = [_Chunk(k, 1, 1, _Request(k, started), 0, events[k], queued=True) for k in range(3)]
    channel._to_copy, channel._to_receive, channel._in_flight = [], [], []
    channel._credits_out, channel._credits_in, channel._cleared = [], {}, set()
    pointer = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0))
    channel._device = types.SimpleNamespace(send_buffer=pointer, recv_buffer=pointer)
    progress = [channel._progress() for _ in range(4)]
    assert started == [0, 1, 2]
    assert progress == [False, False, False, True]


def test_staged_waits_for_a_credit_before_copying_into_a_peers_inbox(monkeypatch):
    """A chunk bound for a peer's inbox (node memory) is copied down only once that peer has said its last copies up
    have read the inbox; a chunk through MPI to another peer goes meanwhile."""
    import sys
    import types

    from gridcomm.transports.staged import _Chunk, _StagedChannel

    copies: list[int] = []
    runtime = types.SimpleNamespace(memcpyDeviceToHost=2, memcpyAsync=lambda dst, *_: copies.append(dst))
    cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)

    class Credit:
        came = False

        def Test(self) -> bool:
            return self.came

    class Recorded(_ScriptedEvent):
        def record(self, stream) -> None:
            pass

    started: list[int] = []
    channel = object.__new__(_StagedChannel)
    sends = [_Chunk(0, 1, 1, _Request(0, started), 100, Recorded()),  # to rank 1's inbox
             _Chunk(1, 1, 2, _Request(1, started), 200, Recorded())]  # to rank 2 through MPI  # fmt: skip
    credit = Credit()
    channel._to_copy, channel._to_send, channel._to_receive, channel._in_flight = list(sends), list(sends), [], []
    channel._credits_out, channel._credits_in, channel._cleared = [], {1: credit}, set()
    pointer = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0))
    channel._device = types.SimpleNamespace(send_buffer=pointer, recv_buffer=pointer)
    channel._down = types.SimpleNamespace(ptr=0)
    assert not channel._progress()
    assert copies == [200] and started == [1]
    credit.came = True
    assert channel._progress()
    assert copies == [200, 100] and started == [1, 0]


def test_gpu_side_waits_are_stream_ordered():
    """ipc's and nvshmem's wait() on the host neither blocks nor enqueues: it raises for an exchange whose wait
    gave up on the GPU before it was called (the report names that exchange), once, and marks it abandoned."""
    from gridcomm.errors import GridcommTimeout
    from gridcomm.transports.gpu_waits import GpuWaitChannel

    class Report:  # GpuWaitReport's error words and check, without its pinned memory
        def __init__(self) -> None:
            self.error, self.what = [0, 0, 0, 0], ""

        def check(self, operation: object) -> None:
            if self.error[0]:
                self.error[0] = 0
                raise GridcommTimeout(f"{operation}: {self.what}", 0, [1], 1.0)

    class Channel(GpuWaitChannel):
        def start(self, stream=None):
            pass

        def close(self):
            pass

    channel = Channel()
    channel._waits = Report()
    channel.wait(1.0, "halo exchange #1", stream=object())  # nothing gave up: returns at once, no stream work
    assert not channel.abandoned
    channel._waits.error[0], channel._waits.what = 1, "the GPU waited for the peer's halos in exchange 1"
    with pytest.raises(GridcommTimeout, match=r"halo exchange #2: .* in exchange 1"):
        channel.wait(1.0, "halo exchange #2", stream=object())
    assert channel.abandoned
    channel.wait(1.0, "halo exchange #3", stream=object())  # reported once


def _fake_nccl_channel(monkeypatch, events_done: bool, handle: int | None = None):
    """An nccl channel over fakes (no GPU, no NCCL): events whose ``done`` the test sets, a communicator that
    counts its aborts, one peer each way, and a graph captured over it (``Comm.log`` says what happened in
    which order); ``handle``: the raw communicator an abort without the GIL would take (None: CuPy's abort)."""
    import collections
    import types
    import typing

    from gridcomm.transports import nccl as nccl_transport

    class Event:
        def __init__(self) -> None:
            self.done = events_done

        def record(self, stream) -> None:
            self.done = events_done

    class Comm:
        aborts = 0
        log: typing.ClassVar[list[str]] = []

        def abort(self) -> None:
            Comm.aborts += 1
            Comm.log.append("abort")

    class Graph:
        def close(self) -> None:
            Comm.log.append("graph closed")

    class Stream:
        def is_capturing(self) -> bool:
            return False

    cuda = types.SimpleNamespace(
        Event=lambda **kw: Event(), get_current_stream=Stream, runtime=types.SimpleNamespace(setDevice=lambda d: None)
    )
    monkeypatch.setattr(nccl_transport, "WATCH_INTERVAL_S", 0.001)
    channel = object.__new__(nccl_transport._NcclChannel)
    comm = Comm()
    channel.__dict__.update(
        _cupy=types.SimpleNamespace(cuda=cuda), _device=0, _comm=comm, _handle=handle,
        _owner=types.SimpleNamespace(rank=0, nccl=comm, release_graphs=Graph().close),
        _sends=[(0, 8, 1)], _recvs=[(0, 8, 1)], _in_flight=collections.deque(),
        _oldest_since=0.0, _free_events=[], _timed_out=None, _aborted="",
    )  # fmt: skip
    return channel, Stream(), Comm


def test_nccl_waits_are_stream_ordered_and_a_watchdog_aborts_a_silent_exchange(monkeypatch):
    """nccl's wait() hands the exchange to the watchdog and returns; exchanges that finish are forgotten (their
    events reused) without an abort; one that outlives its timeout makes the watchdog abort the communicator,
    and the host's next call raises the timeout once, naming the exchange and the peer; the channel is then
    refused as aborted."""
    from gridcomm.errors import GridcommError, GridcommTimeout
    from gridcomm.waiting import poll_until

    channel, stream, comm = _fake_nccl_channel(monkeypatch, events_done=True)
    for k in range(5):
        channel.wait(60.0, f"halo exchange #{k}", stream)
    poll_until(lambda: not channel._in_flight, 60.0, lambda elapsed: AssertionError("finished exchanges stay watched"))
    assert comm.aborts == 0 and 1 <= len(channel._free_events) <= 5 and not channel.abandoned

    class Name:  # as exchange._InFlight: the exchanger's count goes on after this wait
        count = 7

        def pinned(self) -> str:
            return f"halo exchange #{self.count}"

    channel, stream, comm = _fake_nccl_channel(monkeypatch, events_done=False)
    name = Name()
    channel.wait(0.05, name, stream)  # returns at once: nothing waits on the host
    name.count = 9  # later exchanges started; the timeout still names #7
    poll_until(lambda: comm.aborts > 0, 60.0, lambda elapsed: AssertionError("the watchdog never aborted"))
    assert channel._owner.nccl is None  # the next exchanger gets a fresh communicator
    assert comm.log == ["graph closed", "abort"]  # NCCL's abort would wait for a graph that used the communicator
    with pytest.raises(GridcommTimeout, match=r"halo exchange #7 \(nccl; communicator aborted\)") as raised:
        channel.check("check()")
    assert raised.value.peers == (1,) and channel.abandoned
    channel.check("check()")  # raised once
    with pytest.raises(GridcommError, match="aborted after a timeout in halo exchange #7"):
        channel.start(stream)


def test_nccl_abort_beside_a_replay_in_flight_frees_its_graphs(monkeypatch):
    """Where nccl replays a graph of its own, the watchdog starts the abort without the GIL on a thread of its own,
    then frees the graphs: NCCL's abort raises its flags, which end the replay in flight (only then can its graph
    be freed), and waits until the graph is freed. Faked with those two waits: no deadlock, and in that order."""
    import collections
    import threading

    from gridcomm.errors import GridcommError, GridcommTimeout
    from gridcomm.transports import nccl as nccl_transport
    from gridcomm.waiting import poll_until

    channel, stream, comm = _fake_nccl_channel(monkeypatch, events_done=False, handle=0xC0FFEE)
    flags_up, graph_freed, order = threading.Event(), threading.Event(), []

    def abort_in_background(communicator, raw):
        def abort() -> None:  # NCCL: flags first, then wait for every graph that captured the communicator
            order.append(("flags up", raw))
            flags_up.set()
            order.append("abort finished" if graph_freed.wait(10.0) else "abort waited for ever")

        thread = threading.Thread(target=abort)
        thread.start()
        return thread

    def free_graphs() -> None:  # CUDA: a graph is freed once its replay in flight has ended
        order.append("graph freed" if flags_up.wait(10.0) else "graph free waited for ever")
        graph_freed.set()

    monkeypatch.setattr(nccl_transport.nccl_abort, "abort_in_background", abort_in_background)
    channel._owner.release_graphs = free_graphs
    channel.wait(0.05, "halo exchange #3", stream)
    poll_until(lambda: len(order) == 3, 60.0, lambda elapsed: AssertionError(f"the watchdog stopped at {order}"))
    assert order == [("flags up", 0xC0FFEE), "graph freed", "abort finished"]
    assert comm.aborts == 0 and channel._owner.nccl is None  # CuPy's abort (with the GIL) was not called
    with pytest.raises(GridcommTimeout, match=r"halo exchange #3 \(nccl; communicator aborted\)"):
        channel.check("check()")
    # Another exchanger's channel over the same communicator refuses it: its handle is gone (a call would crash)
    other = object.__new__(nccl_transport._NcclChannel)
    other.__dict__.update(channel.__dict__, _timed_out=None, _aborted="", _in_flight=collections.deque())
    with pytest.raises(GridcommError, match=r"aborted \(a timeout in another exchanger over the same Communicator\)"):
        other.start(stream)


def test_nccl_host_runs_at_most_max_ahead_exchanges_ahead(monkeypatch):
    """Past MAX_AHEAD exchanges in flight, wait() waits on the host for the oldest (so the host never blocks
    inside a full launch queue, out of the watchdog's reach), and gives up with the timeout if it never ends."""
    from gridcomm.errors import GridcommTimeout
    from gridcomm.transports import nccl as nccl_transport

    monkeypatch.setattr(nccl_transport, "MAX_AHEAD", 2)
    channel, stream, comm = _fake_nccl_channel(monkeypatch, events_done=False)
    channel.wait(0.2, "halo exchange #1", stream)
    channel.wait(0.2, "halo exchange #2", stream)
    with pytest.raises(GridcommTimeout, match="halo exchange #1"):
        channel.wait(0.2, "halo exchange #3", stream)  # the third waits for the first, which never ends
    assert comm.aborts == 1 and channel.abandoned and not channel._in_flight
