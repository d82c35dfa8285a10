"""gridcomm.lab.measure.energy: joules summed over distinct GPUs (ranks sharing one count it once), watts, and a
reason instead of a figure where NVML's counter cannot be read (this machine: no GPU)."""

from __future__ import annotations

import pytest

import gridcomm.lab.measure.energy as energy
from gridcomm import Communicator


class FakeMpi:
    """The collective calls EnergyMeter makes, answering for every rank from given rows."""

    def __init__(self, rows):
        self.rows = rows

    def Barrier(self):
        pass

    def allgather(self, mine):
        return [mine, *self.rows]


class FakeComm:
    def __init__(self, rows):
        self.mpi = FakeMpi(rows)


def meter_with_counter(monkeypatch, rows, start_mj=1000, end_mj=6000, gpu=("node", "0000:01:00.0")):
    readings = iter([start_mj, end_mj])
    monkeypatch.setattr(energy, "_gpu_counter", lambda: (gpu, lambda: next(readings), None))
    return energy.EnergyMeter(FakeComm(rows))


def test_joules_are_summed_over_distinct_gpus(monkeypatch):
    # This rank used 5 J on GPU A; another rank shares GPU A (same counter, 5.2 J read a moment later), a
    # third used 3 J on GPU B: 5.2 + 3 J over 2 GPUs.
    other_a = (("node", "0000:01:00.0"), 5200, 0.5, None)
    gpu_b = (("node", "0000:02:00.0"), 3000, 0.5, None)
    meter = meter_with_counter(monkeypatch, [other_a, gpu_b])
    with meter:
        pass
    result = meter.result
    assert result.gpus == 2 and result.joules == pytest.approx(8.2)
    assert result.seconds == pytest.approx(0.5) and result.watts == pytest.approx(16.4)
    assert result.per(4) == pytest.approx(2.05) and result.why is None


def test_one_rank_without_a_counter_makes_no_figure(monkeypatch):
    meter = meter_with_counter(monkeypatch, [(None, None, 0.1, "NVML's energy counter is not available")])
    with meter:
        pass
    assert meter.result.joules is None and meter.result.watts is None and meter.result.per(3) is None
    assert "not available" in meter.result.why


def test_without_a_gpu_the_meter_says_why():
    with Communicator() as comm, energy.EnergyMeter(comm) as meter:
        sum(range(1000))
    result = meter.result
    if result.joules is None:  # CI: no GPU
        assert result.why and result.gpus == 0 and result.seconds > 0
    else:  # a GPU machine: a figure, over this rank's one GPU
        assert result.gpus == 1 and result.joules >= 0
    assert set(result.as_dict()) == {"joules", "seconds", "watts", "gpus", "why"}


def test_a_region_shorter_than_the_counters_update_makes_no_figure(monkeypatch):
    meter = meter_with_counter(monkeypatch, [], start_mj=5000, end_mj=5000)
    with meter:
        pass
    assert meter.result.joules is None and meter.result.per(10) is None
    assert "did not advance" in meter.result.why


def test_energy_of_steps_meters_a_region_of_at_least_a_second(monkeypatch):
    """The steps cover ENERGY_REGION_S at the given step time, no fewer than ``least``, a multiple of ``multiple``
    (graph mode replays two steps at a time), all run inside the meter."""
    ran = []
    monkeypatch.setattr(energy, "_gpu_counter", lambda: (None, None, "no counter in this test"))
    comm = FakeComm([])
    result, steps = energy.energy_of_steps(comm, ran.append, step_s=0.3, least=4, multiple=2)
    assert steps == 4 and ran == [4] and "no counter" in result.why  # ceil(1 / 0.3) = 4, even already
    _, steps = energy.energy_of_steps(comm, ran.append, step_s=0.004, least=5)
    assert steps == 250 and ran[-1] == 250
    _, steps = energy.energy_of_steps(comm, ran.append, step_s=0.0041, multiple=2)
    assert steps == 244 and ran[-1] == 244  # ceil(243.9) = 244, even
    _, steps = energy.energy_of_steps(comm, ran.append, step_s=0.33, multiple=2)
    assert steps == 4  # ceil(3.03) = 4 steps, at least 4
    _, steps = energy.energy_of_steps(comm, ran.append, step_s=0.0047, multiple=2)
    assert steps % 2 == 0 and steps * 0.0047 >= energy.ENERGY_REGION_S
