"""The scaling model (gridcomm.lab.bench.scaling, docs/scaling.md): its link arithmetic, each dwarf's prediction, the
inputs read from the committed result files, the comparison with the points measured on 2 GPUs, and the
command that prints and stores it all."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridcomm.lab.bench import scaling
from gridcomm.lab.cli import app

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
M = scaling.Machine(nvlink=(scaling.Link(2, 400.0, 8e-6),), network_GBps=50.0, network_latency_s=10e-6)


def test_an_exchange_uses_nvlink_and_the_network_at_once():
    assert M.exchange_s(0, 0, 2) == 0
    assert M.exchange_s(400e6, 0, 2) == pytest.approx(8e-6 + 1e-3)
    assert M.exchange_s(0, 50e6, 16) == pytest.approx(10e-6 + 1e-3)
    assert M.exchange_s(400e6, 50e6, 16) == pytest.approx(10e-6 + 1e-3)  # the slower link sets the time


def test_nvlink_takes_the_calibration_of_the_gpus_exchanging():
    """Measured on 2 and 4 GPUs: 2 and 3 GPUs take the 2-GPU figures, 4 to a node's 8 (and beyond) the 4-GPU
    ones; fewer GPUs than any calibration take the smallest."""
    m = scaling.Machine(nvlink=(scaling.Link(4, 300.0, 9e-6), scaling.Link(2, 400.0, 8e-6)))
    assert [m.nvlink_at(p).gpus for p in (1, 2, 3, 4, 8, 64)] == [2, 2, 2, 4, 4, 4]
    assert m.exchange_s(300e6, 0, 4) == pytest.approx(9e-6 + 1e-3)
    assert scaling.alltoall_s(m, 4, 100e6) == pytest.approx(9e-6 + 1e-3)


def test_alltoall_crosses_the_network_beyond_one_node():
    assert scaling.alltoall_s(M, 1, 1 << 20) == 0
    within = [scaling.alltoall_s(M, p, 1 << 20) for p in (2, 4, 8)]
    assert within == sorted(within) and within[-1] == pytest.approx(M.exchange_s(7 << 20, 0, 8))
    assert scaling.alltoall_s(M, 16, 1 << 20) == pytest.approx(M.exchange_s(7 << 20, 8 << 20, 16))


def test_stencil_exchange_is_that_of_its_slowest_rank():
    """A step that is all latency: the exchange, a strip kernel launched once it has landed, then the other strips
    back to back at the least time of a replayed kernel, set it."""
    one, kernel, floor = 4e-6, 2e-6, scaling.KERNEL_FLOOR_S
    assert scaling.stencil2d_s(M, 1, 512, one, kernel) == one
    on_node = scaling.stencil2d_s(M, 8, 512, one, kernel)  # 2 x 4 ranks: at most 3 neighbours, 3 strips
    assert on_node == pytest.approx(M.exchange_s(3 * 512 * 8, 0, 8) + kernel + 2 * floor)
    across = scaling.stencil2d_s(M, 64, 512, one, kernel)  # 8 x 8 ranks: a node is one row, its vertical peers not
    assert across > on_node
    assert across == pytest.approx(M.exchange_s(2 * 512 * 8, 2 * 512 * 8, 64) + kernel + 3 * floor)


def test_stencil_exchange_hides_behind_a_long_interior_update():
    """n = 8192: the interior update outlasts the exchange; the strips queued behind it follow at the least time
    of a replayed kernel each, whatever the exchange took."""
    one, floor = 400e-6, scaling.KERNEL_FLOOR_S
    assert scaling.stencil2d_s(M, 8, 8192, one) == pytest.approx(one + 3 * floor)  # 2 x 4 ranks: 3 strips
    assert scaling.stencil2d_s(M, 8, 8192, 1e-6) > M.exchange_s(3 * 8192 * 8, 0, 8)  # a short one does not hide it


def test_mpdata_strong_scaling_meets_its_floor():
    times = [scaling.mpdata_s(M, p, 6_553_600, 32, 22e-3, 8.4) for p in scaling.GPU_COUNTS]
    assert times[0] == 22e-3 and all(a > b for a, b in itertools.pairwise(times))
    assert times[-1] > scaling.MPDATA_KERNELS * scaling.KERNEL_FLOOR_S
    assert 22e-3 / (8 * times[3]) > 0.9  # 8 GPUs on one node: the exchanges are small beside the kernels


def test_spectral_prediction_adds_two_transpositions():
    """One GPU: its measured step. More: FFT and Legendre shared out, and per transposition the all-to-all plus
    the kept block read and written at the HBM copy bandwidth of the one-GPU run."""
    row = {"points": 1000, "batch": 10, "hbm_GBps": 1e-3, "split_s": {"legendre": 2.0, "fft": 2.0, "transposition": 0}}
    assert scaling.spectral_s(M, 1, row) == pytest.approx(4.0)
    per_peer = 1000 * 10 * scaling.SPECTRAL_BYTES_PER_VALUE / 4  # 20 kB, copied at 1 MB/s: 20 ms each way
    want = 2.0 + 2 * 2 * 20e-3 + 2 * scaling.alltoall_s(M, 2, per_peer)
    assert scaling.spectral_s(M, 2, row) == pytest.approx(want)


def test_halo_grows_with_the_perimeter_of_a_part():
    small, large = scaling.halo_coefficient("O48", 4), scaling.halo_coefficient("O48", 16)
    assert 4 < small < 16 and abs(small - large) / small < 0.25


def test_model_from_the_committed_results_matches_what_was_measured():
    inputs = scaling.load_inputs(RESULTS)
    links = {link.gpus: link for link in inputs.machine.nvlink}
    assert set(links) >= {2, 4} and all(1e-6 < link.latency_s < 20e-6 for link in links.values())
    assert 300 < links[2].GBps < 450 and 250 < links[4].GBps < 450  # out of each GPU, every peer at once
    predictions = scaling.predict(inputs, halo_per_sqrt=8.4)
    # one GPU: the model gives back its inputs
    for n, t in inputs.stencil_1gpu_s.items():
        assert predictions["stencil2d"][f"n = {n}"][1] == t
    for grid, (_, levels, t) in inputs.mpdata_1gpu_s.items():
        assert predictions["mpdata"][f"{grid} x {levels}"][1] == t
    (spectral,) = predictions["spectral"].values()
    # (the model counts the split's phases: on the H100 run they make 94 % of the step)
    assert spectral[1] == pytest.approx(inputs.spectral_1gpu["time_per_step_s"], rel=0.08)
    # two and four GPUs: every measured point has its prediction, within a factor of 1.5
    rows = scaling.compare(inputs, halo_per_sqrt=8.4)
    assert {r["dwarf"] for r in rows} == {"alltoall", "stencil2d", "mpdata", "spectral"} and len(rows) >= 20
    assert {r["gpus"] for r in rows} == {2, 4} and {r["gpus"] for r in rows if r["dwarf"] == "spectral"} == {2, 4}
    # MPDATA on 4 GPUs beside its one-GPU input of the same call (2026-11-27): strong scaling
    (mpdata,) = [r for r in rows if r["dwarf"] == "mpdata"]
    assert mpdata["gpus"] == 4 and mpdata["case"] in predictions["mpdata"]
    assert all(r["case"] in predictions[r["dwarf"]] for r in rows if r["dwarf"] != "alltoall" or r["size"] == 8)
    assert all(1 / 1.5 < r["ratio"] < 1.5 for r in rows), [(r["dwarf"], r["size"], r["ratio"]) for r in rows]
    targets = dict(scaling.targets(predictions))
    assert any("efficiency" in v for v in targets.values()) and any("x (target 3.6x" in v for v in targets.values())


def test_a_model_of_another_gpu_takes_that_gpus_runs_only():
    """--device H200: every input and measured point from the H200 runs; the default is the newest GPU with every
    input (H100, whose MPDATA ran on one GPU and on 4 in one call on 2026-11-27). A multi-GPU MPDATA run of an earlier
    session than the one-GPU input (other kernels) is no point of comparison; one of the same session is."""
    assert scaling.load_inputs(RESULTS).device == "NVIDIA H100 80GB HBM3"
    inputs = scaling.load_inputs(RESULTS, device="h200")
    assert inputs.device == "NVIDIA H200" and inputs.mpdata_1gpu_s and inputs.spectral_1gpu
    rows = scaling.compare(inputs, halo_per_sqrt=8.4)
    # TCo639 ran unpipelined on 2 x H200 on 2026-11-27 from 10:54 UTC, and on 4 x H200 at 08:21.
    assert {r["gpus"] for r in rows if r["dwarf"] == "spectral"} == {2, 4}
    # The 4-GPU run of 2026-11-27 came two minutes after its one-GPU input; the 2-GPU run is days older.
    assert {r["gpus"] for r in rows if r["dwarf"] == "mpdata"} == {4}
    # The H200's stencil steps were timed before the step's graph kept its nodes' priorities (2026-11-27), so their
    # exchange hid behind the interior update less than the model now counts: up to 1.5x the prediction.
    wide = {"stencil2d": 1.6}
    assert all(1 / wide.get(r["dwarf"], 1.5) < r["ratio"] < 1.5 for r in rows), [
        (r["dwarf"], r["size"], r["ratio"]) for r in rows
    ]
    assert (
        set(scaling.measured_curves(RESULTS, "H200")["spectral"]) and scaling.measured_curves(RESULTS, "H200")["mpdata"]
    )
    with pytest.raises(ValueError, match=r"no 2-GPU all-to-all on a GPU named 'A100' \(those with one: NVIDIA"):
        scaling.load_inputs(RESULTS, device="A100")


def test_measured_curves_join_the_runs_of_each_gpu_count():
    curves = scaling.measured_curves(RESULTS)
    graph = curves["stencil2d"]["n = 64, graph (ipc)"]
    assert set(graph) >= {1, 2} and all(0 < t < 1e-3 for t in graph.values())
    assert any(label.startswith("O1024, ") for label in curves["mpdata"])  # the largest grid the H100s ran
    assert all(set(c) <= {2, 4} for c in curves["alltoall"].values())  # run on 2 and 4 GPUs
    assert set(curves["alltoall"]["128 MiB, ipc graph"]) == {2, 4}  # the largest block both ran (one node each)


def test_command_prints_and_stores_the_model(tmp_path):
    result = CliRunner().invoke(app, ["bench", "scaling", "--out", str(tmp_path), "--network-gbps", "25"])
    assert result.exit_code == 0, result.output
    assert "predicted / measured" in result.output and "MPDATA O1280" in result.output
    (path,) = tmp_path.glob("scaling-model-*.json")
    payload = json.loads(path.read_text())
    assert payload["config"]["machine_model"]["network_GBps"] == 25
    assert {r["gpus"] for r in payload["results"]} == set(scaling.GPU_COUNTS)
    assert all(math.isfinite(r["predicted_s"]) for r in payload["results"])
    assert path.with_suffix(".png").stat().st_size > 10_000


def test_command_without_a_two_gpu_run_names_what_to_run(tmp_path):
    for name in ("mpdata-gpu-1r-20261123T195023Z.json",):
        shutil.copy(RESULTS / name, tmp_path / name)
    result = CliRunner().invoke(app, ["bench", "scaling", "--results", str(tmp_path), "--out", str(tmp_path)])
    text = re.sub(r"[│╭╮╰╯─\s]+", " ", result.output)  # the message as one line, out of its box
    assert result.exit_code != 0 and "gridcomm bench alltoall --np 2" in text, text
