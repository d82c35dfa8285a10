"""RecordedLaunch (packing/cuda.py): outside a capture a kernel launch is recorded once as a graph and replayed,
and recorded again when its key (a wait's time limit) changes; inside a capture it is the kernel itself. CuPy's
streams and graphs are stubbed: what is checked is which launches happen, with which arguments, on which stream."""

from __future__ import annotations

import sys
import types

import pytest

from gridcomm.packing.cuda import RecordedLaunch


class FakeStream:
    def __init__(self, log: list, name: str, capturing: bool = False) -> None:
        self.log, self.name, self.capturing = log, name, capturing

    def is_capturing(self) -> bool:
        return self.capturing

    def begin_capture(self) -> None:
        self.capturing = True

    def end_capture(self) -> FakeGraph:
        self.capturing = False
        recorded = [entry for entry in self.log if entry[1] == self.name]
        return FakeGraph(self.log, recorded[-1][2])


class FakeGraph:
    def __init__(self, log: list, args: tuple) -> None:
        self.log, self.args = log, args

    def launch(self, stream: FakeStream) -> None:
        self.log.append(("replay", stream.name, self.args))


@pytest.fixture
def cuda(monkeypatch):
    """A CuPy whose streams record what is launched on them; the log of every launch and replay."""
    log: list = []
    made = iter(range(1000))
    current = FakeStream(log, "current")
    fake = types.SimpleNamespace(
        Stream=lambda non_blocking=False: FakeStream(log, f"recorder {next(made)}"),
        get_current_stream=lambda: current,
    )
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=fake))
    return log


def kernel(log: list):
    def launch(grid, block, args, stream):
        log.append(("kernel", stream.name, args))

    return launch


def test_recorded_once_and_replayed_until_the_key_changes(cuda):
    limit = [5]
    launch = RecordedLaunch(kernel(cuda), 3, 256)
    mine = FakeStream(cuda, "mine")
    for _ in range(3):
        launch.launch(lambda: ("table", limit[0]), mine, key=limit[0])
    assert [e[0] for e in cuda] == ["kernel", "replay", "replay", "replay"]
    assert cuda[0][1].startswith("recorder") and all(e[1] == "mine" for e in cuda[1:])
    limit[0] = 9  # a new timeout: the graph is recorded again with it
    launch.launch(lambda: ("table", limit[0]), None, key=limit[0])
    assert cuda[-2][0] == "kernel" and cuda[-2][2] == ("table", 9)
    assert cuda[-1] == ("replay", "current", ("table", 9))  # None: the current stream


def test_inside_a_capture_the_kernel_itself(cuda):
    launch = RecordedLaunch(kernel(cuda), 1, 1024)
    capturing = FakeStream(cuda, "capturing", capturing=True)
    launch.launch(lambda: ("a",), capturing, key=1)
    launch.launch(lambda: ("a",), capturing, key=1)
    assert cuda == [("kernel", "capturing", ("a",))] * 2
