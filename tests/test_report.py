"""``gridcomm report``: the suites, the report of result files (committed GPU results stand in for a GPU run),
``--compare``, a real quick CPU run under MPI, failures and hangs recorded in the report, clear errors."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from conftest import TESTS, needs_mpiexec
from gridcomm.errors import ArgumentError
from gridcomm.lab.bench import seeds
from gridcomm.lab.cli.main import app
from gridcomm.lab.report import run as run_module
from gridcomm.lab.report import suite
from gridcomm.lab.report.compare import write_compare
from gridcomm.lab.report.figures import number
from gridcomm.lab.report.render import write_report
from gridcomm.lab.report.run import run_suite
from gridcomm.lab.report.suite import Invocation
from test_cli import gridcomm

RESULTS = TESTS.parent / "benchmarks" / "results"
SEEDS = TESTS.parent.parent / "shared" / "seeds"
#: Committed GPU runs: one per benchmark the GPU suites run, three stencil2d transports of one rank count.
GPU_FILES = (
    "halo-gpu-2r-20261123T111126Z",
    "p2p-gpu-2r-20261123T111106Z",
    "alltoall-gpu-2r-20261123T111155Z",
    "stencil2d-gpu-2r-20261123T111223Z",
    "stencil2d-gpu-2r-nccl-20261123T095213Z",
    "stencil2d-gpu-2r-staged-20261123T095228Z",
    "mpdata-gpu-1r-20261123T185012Z",
    "spectral-gpu-1r-20261123T174807Z",
)


def copy_results(folder: Path, names: tuple[str, ...]) -> Path:
    """A result folder holding the committed files ``names`` (JSON and PNG) in raw/."""
    raw = folder / "raw"
    raw.mkdir(parents=True)
    for name in names:
        for file in RESULTS.glob(f"{name}.*"):
            shutil.copy(file, raw / file.name)
    return folder


class Page(HTMLParser):
    """Checks that every element opened is closed in order, and collects the images."""

    VOID = frozenset({"meta", "img", "br", "hr", "link"})

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.images: list[str] = []
        self.tables = 0
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag == "table":
            self.tables += 1
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()


def check_html(folder: Path, name: str = "report.html") -> Page:
    page = Page()
    page.feed((folder / name).read_text())
    page.close()
    assert not page.errors and not page.open, (page.errors, page.open)
    for src in page.images:
        assert (folder / src).is_file(), f"{name} shows {src}, which is not in the folder"
    return page


def flat(text: str) -> str:
    """A console message without rich's box and line breaks (it wraps to the terminal's width)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def table_rows(md: str, *key: str) -> list[str]:
    """The Markdown table rows whose first cells are ``key``."""
    start = "| " + " | ".join(key) + " |"
    return [line for line in md.splitlines() if line.startswith(start)]


# -- the suites ---------------------------------------------------------------------------------------------


def test_suites_fit_their_machine_class_and_budget():
    cpu = suite.select(suite.CPU, True, 2, False)
    assert [i.args[:4] for i in cpu] == [
        ("bench", b, "--np", "2") for b in ("halo", "transpose", "mpdata", "spectral")
    ]  # fmt: skip
    one = suite.select(suite.ONE_GPU, True, 1, False)
    assert [i.args[1] for i in one] == ["halo", "stencil2d", "mpdata", "spectral"]
    assert all(i.args[2:4] == ("--np", "1") for i in one)
    several = suite.select(suite.GPUS, False, 4, False)
    ranks = {(i.key, i.args[1]): i.args[3] for i in several}
    assert ranks[("p2p", "p2p")] == "2" and ranks[("alltoall", "alltoall")] == "4" and ranks[("halo", "halo")] == "4"
    assert ranks[("mpdata-1gpu", "mpdata")] == "1" and ranks[("mpdata", "mpdata")] == "4"
    # The budgets of the issue, on the estimates (module docstring of gridcomm.lab.report.suite: where they come from).
    assert suite.estimate(suite.select(suite.GPUS, True, 2, False)) < 120
    assert suite.estimate(suite.select(suite.GPUS, False, 2, False)) < 600
    # CUDA-aware MPI is measured beside the others only where MPI is CUDA-aware.
    plain = " ".join(" ".join(i.args) for i in suite.select(suite.GPUS, True, 2, False))
    aware = " ".join(" ".join(i.args) for i in suite.select(suite.GPUS, True, 2, True))
    assert ",mpi" not in plain and "{mpi}" not in plain
    assert "ipc,nccl,staged,mpi,host" in aware and "staged,nccl,ipc,mpi" in aware

    # The persistent stencil kernel in the quick suite only where NVSHMEM is usable.
    def stencil_modes(nvshmem: bool) -> str:
        (stencil,) = [i.args for i in suite.select(suite.ONE_GPU, True, 1, False, nvshmem) if i.key == "stencil2d"]
        return stencil[stencil.index("--modes") + 1]

    assert stencil_modes(False) == "traditional,graph" and stencil_modes(True) == "traditional,graph,persistent"


def test_the_announced_time_says_when_the_machine_is_busy():
    """The quick CPU suite announced 9 s and took 53 s: the estimates are now those measured here (4 ranks on 2
    cores), and a busy machine is said to take longer, not promised the idle figure."""
    quick = suite.select(suite.CPU, True, 4, False)
    assert suite.estimate_text(quick, load=0.5, cores=2) == f"about {suite.estimate(quick):.0f} s"
    assert suite.estimate_text(quick, load=5.5, cores=2) == f"about {suite.estimate(quick):.0f} s"  # as measured
    busy = suite.estimate_text(quick, load=13.2, cores=2)
    assert (
        busy
        == f"about {suite.estimate(quick):.0f} s, longer here: other work keeps the cores busy (load 13.2 on 2 cores)"
    )


@pytest.mark.parametrize("machine", [suite.CPU, suite.ONE_GPU, suite.GPUS])
@pytest.mark.parametrize("quick", [True, False])
def test_every_suite_invocation_parses_as_its_bench_command(machine, quick):
    """Each command's options are the bench command's own, with valid values (the GPU suites cannot run here)."""
    bench = typer.main.get_command(app).commands["bench"]
    for aware in (False, True):
        for invocation in suite.select(machine, quick, 1 if machine == suite.ONE_GPU else 2, aware):
            args = list(invocation.command("raw")[3:])  # after python -m gridcomm
            assert args[0] == "bench"
            command = bench.commands[args[1]]
            command.make_context(args[1], args[2:])  # raises on an unknown option or a bad value


# -- the report of result files -----------------------------------------------------------------------------


def test_report_of_committed_gpu_results_has_tables_ceilings_peers_seeds_and_energy(tmp_path):
    folder = copy_results(tmp_path / "gpu", GPU_FILES)
    md_path, html_path = write_report(folder)
    md = md_path.read_text()
    payload = {n: json.loads((folder / "raw" / f"{n}.json").read_text()) for n in GPU_FILES}
    # Halo: every transport beside NCCL's send/recv (peer) and the peer copy (ceiling), figures from the file.
    assert "peer: nccl send/recv [µs]" in md and "ceiling: peer copy [µs]" in md and "ceiling: HBM copy [GB/s]" in md
    first = payload["halo-gpu-2r-20261123T111126Z"]["results"][0]
    (row,) = table_rows(md, str(first["n"]), str(first["fields"]))[:1]
    assert f"| {number(first['times']['ipc graph']['median_s'] * 1e6)} |" in row
    # p2p: latency below 1 MiB, bandwidth from 1 MiB beside the ceiling.
    largest = payload["p2p-gpu-2r-20261123T111106Z"]["results"][-1]
    (row,) = table_rows(md, "128 MiB")[:1]
    assert f"| {number(largest['GBps']['ipc graph'])} |" in row and f"| {number(largest['ceiling_GBps'])} |" in row
    # stencil2d: the seed 004 table as printed, the three transports side by side.
    assert "| 64 | traditional |" in md and "195.33" in md and "21480.32" in md and "18394.88" in md
    assert "the peers measured in this run" in md and "| nccl [µs] | staged [µs] | ipc [µs] |" in md
    # MPDATA: J per step on every row, the seed's Figure 17 figures beside the same path, the problem difference.
    mp = payload["mpdata-gpu-1r-20261123T185012Z"]["results"]
    for r in mp:
        (row,) = table_rows(md, r["grid"], str(r["levels"]), r["transport"])[:1]
        assert f"| {number(r['joules_per_step'])} |" in row, row
        assert {"none": "0.0214 s", "ipc": "0.0216 s", "nccl": "0.0216 s", "host": "0.0835 s"}.get(
            r["transport"], "| — |"
        ) in row
    assert "ours: O1024 (4,231,168 nodes) x 32 levels" in md and "4 to 5 J (1 to 8 GPUs)" in md
    # Spectral: TCo639 beside the seed's Figure 4 (ipc beside its custom all-to-all) and its 93 J per step.
    sp = payload["spectral-gpu-1r-20261123T174807Z"]["results"][0]
    (row,) = table_rows(md, "O640 T639", "ipc", "412")
    assert f"| {number(sp['joules_per_step'])} |" in row and "| 0.12 s |" in row and "93 J (4 GPUs)" in row
    assert "1.89 s" in md and "0.16 s" in md and "on 4 V100 GPUs" in md
    # Every dwarf table has the energy column.
    for header in ("| n | mode |", "| grid | levels | transport | graph |", "| grid | transport | batch |"):
        lines = [line for line in md.splitlines() if line.startswith(header)]
        assert lines and all("energy per step [J]" in line for line in lines), header
    # Machine and versions; plots copied beside the report; the HTML says the same and is well formed.
    assert "| MPI CUDA-aware | no |" in md and "NVIDIA H200" in md
    # "seed", which the tables use, is defined where the report starts: the publications, named.
    assert md.index("The seeds are the publications") < md.index("seed 004") and "ESCAPE deliverable D3.4" in md
    page = check_html(folder)
    assert len(page.images) == len(GPU_FILES) and page.tables == md.count("\n| :---")
    html = html_path.read_text()
    for text in ("0.0835 s", "195.33", "peer: nccl send/recv [µs]", "energy per step [J]"):
        assert text in html


def test_mpdata_on_several_gpus_is_set_beside_one_gpu_and_the_seed_power_of_as_many(tmp_path):
    folder = copy_results(tmp_path / "r", ("mpdata-gpu-1r-20261123T185012Z",))
    one = json.loads((folder / "raw" / "mpdata-gpu-1r-20261123T185012Z.json").read_text())
    two = {**one, "machine": {**one["machine"], "gpus_used": 2, "ranks": 2, "date": "2026-11-23T19:00:00+00:00"}}
    two["results"] = [
        {**r, "gpus": 2, "ranks": 2, "time_per_step_s": r["time_per_step_s"] / 1.6, "kernels": []}
        for r in one["results"]
        if r["transport"] != "none"  # halos must move on 2 ranks
    ]  # as a run on 2 GPUs would write it (bench mpdata --gpu --np 2)
    (folder / "raw" / "mpdata-gpu-2r-20261123T190000Z.json").write_text(json.dumps(two))
    md = write_report(folder)[0].read_text()
    none, ipc = (
        next(r for r in one["results"] if (r["grid"], r["transport"]) == ("O1024", t)) for t in ("none", "ipc")
    )
    (row,) = table_rows(md, "O1024", "32", "2", "ipc")
    speedup = none["time_per_step_s"] / (ipc["time_per_step_s"] / 1.6)
    assert f"| {number(speedup)} |" in row and f"| {number(100 * speedup / 2)} |" in row
    assert "the text says only that the line shows a 'kink' from 4 to 8 GPUs" in md
    rows = table_rows(md, "O1024", "32", "ipc", "yes")
    assert len(rows) == 2 and "| 196 W |" in rows[0] and "| 183 W |" in rows[1]  # 1 GPU, then 2


def test_host_results_show_the_library_peers_beside_gridcomm(tmp_path):
    """GHEX beside the halo exchange and mpi4py-fft and the hand-written pack + Alltoallv beside the
    transposition, each time and the fastest over gridcomm's best, as the committed runs measured them."""
    halo, slabs = "halo-cpu-2r-20261126T075724Z", "transpose-cpu-2r-20261126T075628Z"
    md = write_report(copy_results(tmp_path / "r", (halo, slabs)))[0].read_text()
    assert "| peer: GHEX [µs] | peer: GHEX polled [µs] | fastest peer / best [x] |" in md
    for r in json.loads((RESULTS / f"{halo}.json").read_text())["results"]:
        (row,) = table_rows(md, str(r["n"]), str(r["fields"]))
        assert f"| {number(r['peers']['GHEX']['median_s'] * 1e6)} |" in row
        assert row.endswith(f"| {number(min(r['peers_over_best'].values()))} |"), row
    assert "| peer: pack+Alltoallv [µs] | peer: mpi4py-fft [µs] | fastest peer / best [x] |" in md
    for r in json.loads((RESULTS / f"{slabs}.json").read_text())["results"]:
        (row,) = table_rows(md, str(r["n"]), r["dtype"])
        assert f"| {number(r['peers']['mpi4py-fft']['median_s'] * 1e6)} |" in row, row


def test_a_result_file_without_the_fields_read_is_named_not_a_crash(tmp_path):
    folder = copy_results(tmp_path / "r", ("stencil2d-gpu-2r-20261123T111223Z", "halo-gpu-1r-20261123T111139Z"))
    damaged = folder / "raw" / "stencil2d-gpu-2r-20261123T111223Z.json"
    payload = json.loads(damaged.read_text())
    del payload["results"][0]["no_exchange_s"]  # as a file of another version might lack it
    damaged.write_text(json.dumps(payload))
    md = write_report(folder)[0].read_text()
    assert "stencil2d-gpu-2r-20261123T111223Z could not be read (KeyError: 'no_exchange_s')" in md
    assert "## halo" in md and "| 512 | 16 |" in md  # the other file is reported as usual


def test_compare_sets_the_same_figures_of_two_folders_side_by_side(tmp_path):
    before = copy_results(tmp_path / "before", ("stencil2d-gpu-2r-20261123T111223Z", "halo-gpu-1r-20261123T111139Z"))
    after = copy_results(tmp_path / "after", ("stencil2d-gpu-2r-20261123T111223Z", "p2p-gpu-2r-20261123T111106Z"))
    changed = after / "raw" / "stencil2d-gpu-2r-20261123T111223Z.json"
    payload = json.loads(changed.read_text())
    for r in payload["results"]:
        r["time_per_step_s"] *= 2  # "after" a change that doubled the step
    changed.write_text(json.dumps(payload))
    md_path, _ = write_compare(before, after, tmp_path / "out")
    md = md_path.read_text()
    first = payload["results"][0]
    (row,) = table_rows(md, str(first["n"]), first["mode"], "step [µs]")
    assert row.endswith(
        f"| {number(first['time_per_step_s'] * 1e6 / 2)} | {number(first['time_per_step_s'] * 1e6)} | 2 |"
    )
    (row,) = table_rows(md, str(first["n"]), first["mode"], "ceiling: no exchange [µs]")
    assert row.endswith("| 1 |")
    assert "seed 004" not in md  # the seeds' figures are the same in both: not compared
    assert "only in A: halo-gpu-1r-20261123T111139Z" in md and "only in B: p2p-gpu-2r-20261123T111106Z" in md
    check_html(tmp_path / "out", "compare.html")
    with pytest.raises(ArgumentError, match=r"folder A .*missing.* is not a folder"):
        write_compare(tmp_path / "missing", after, tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArgumentError, match=r"folder B .*empty.* holds no benchmark result"):
        write_compare(before, tmp_path / "empty", tmp_path / "out")


def test_bad_compare_folders_and_options_are_clear_errors_not_tracebacks(tmp_path, monkeypatch):
    proc = subprocess.run([sys.executable, "-m", "gridcomm", "report", "--compare", str(tmp_path / "gone"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60)  # fmt: skip
    out = flat(proc.stdout + proc.stderr)
    assert proc.returncode == 2 and "gone' is not a folder" in out and "Traceback" not in out, out
    monkeypatch.setattr("gridcomm.lab.report.probe.gpus_found", lambda: 1)  # as on a machine with one GPU
    result = CliRunner().invoke(app, ["report", "--gpu", "--np", "2", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "--np 2 but 1 GPU(s) found" in flat(result.output), result.output
    assert not (tmp_path / "r").exists()
    monkeypatch.setattr("gridcomm.lab.report.probe.gpus_found", lambda: 0)
    result = CliRunner().invoke(app, ["report", "--gpu"])
    assert result.exit_code == 2 and "no GPU found" in flat(result.output) and "--cpu" in result.output
    result = CliRunner().invoke(app, ["report", "--quick", "--compare", str(tmp_path), str(tmp_path)])
    assert result.exit_code == 2 and "give it only --out" in flat(result.output)


# -- running ------------------------------------------------------------------------------------------------


@pytest.mark.mpi
@needs_mpiexec
def test_quick_cpu_report_runs_under_mpi_and_every_figure_comes_from_that_run(tmp_path):
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    out = tmp_path / "r1"
    said = gridcomm("report", "--quick", "--cpu", "--np", "2", "--out", str(out), timeout=150)
    # Not a terminal: the progress comes as a line per benchmark (rich's bar drew nothing for the whole run).
    keys = ("halo", "transpose", "mpdata", "spectral")
    assert all(f"[{k}/4] {key} (~" in said for k, key in enumerate(keys, 1)), said
    assert re.search(r"the benchmarks took \d+ s \(\d+ s expected\)", said), said
    finished = dt.datetime.now(dt.UTC)
    record = json.loads((out / "runs.json").read_text())
    assert [(i["key"], i["status"]) for i in record["invocations"]] == [(key, "ok") for key in keys]
    written = sorted(f for i in record["invocations"] for f in i["files"])
    assert sorted(p.name for p in (out / "raw").iterdir()) == written
    md = (out / "report.md").read_text()
    for name in (f for f in written if f.endswith(".json")):
        payload = json.loads((out / "raw" / name).read_text())
        date = dt.datetime.fromisoformat(payload["machine"]["date"])
        assert started <= date <= finished and payload["machine"]["ranks"] == 2
        assert f"raw/{name}" in md and f"({name[:-5]})" in md
        if payload["benchmark"] == "mpdata":
            for r in payload["results"]:
                (row,) = table_rows(md, r["grid"], str(r["levels"]))
                assert f"| {number(r['median_s'] * 1e3)} |" in row and "| not measured |" in row
        if payload["benchmark"] == "spectral":  # its peer, ducc0, timed in the same run
            for r in payload["results"]:
                (row,) = table_rows(md, f"{r['grid']} T{r['truncation']}", r["transport"])
                assert f"| {number(r['ducc0_step_s'] * 1e3)} | {number(r['ducc0_over_step'])} |" in row, row
            assert f"by ducc0 {payload['results'][0]['ducc0_version']} on the node's CPUs" in md
    assert "4 of 4 benchmark(s) ran, 0 failed" in md and "gridcomm bench halo --np 2 --quick --out raw" in md
    assert "=== ok in" in (out / "log.txt").read_text()
    assert "| cma [µs] |" in md and "floor: Isend/Irecv [µs]" in md and "| mpi |" in md  # peers of the same run
    # the transposition beside the hand-written pack + Alltoallv, timed in the same run
    (name,) = [f for f in written if f.startswith("transpose-") and f.endswith(".json")]
    for r in json.loads((out / "raw" / name).read_text())["results"]:
        (row,) = table_rows(md, str(r["n"]), r["dtype"])
        hand = r["peers"]["pack+Alltoallv"]["median_s"] * 1e6
        assert f"| {number(hand)} |" in row and f"| {number(min(r['peers_over_best'].values()))} |" in row, row
    check_html(out)


@pytest.mark.mpi
def test_a_failing_or_hung_benchmark_is_reported_and_the_rest_still_run(tmp_path, monkeypatch):
    broken = Invocation("broken", ("bench", "halo", "--np", "1", "--sizes", "x"), 1.0)
    hung = Invocation("hung", ("bench", "soak", "--np", "1", "--steps", "100000000", "--shape", "8,8,8"), 1.0)
    good = Invocation("mpdata", ("bench", "mpdata", "--np", "1", "--grids", "O8", "--levels", "1", "--steps", "2"), 1.0)
    monkeypatch.setattr(run_module, "time_limit", lambda invocation: 4.0 if invocation.key == "hung" else 120.0)
    record = run_suite([broken, hung, good], tmp_path, {"quick": True, "machine": suite.CPU, "ranks": 1}, show=False)
    statuses = [i["status"] for i in record["invocations"]]
    assert statuses[0] == "failed (exit 2)" and statuses[1].startswith("timed out after") and statuses[2] == "ok"
    assert "is not a comma-separated list of integers" in record["invocations"][0]["error"]
    md_path, html_path = write_report(tmp_path)
    md = md_path.read_text()
    assert "1 of 3 benchmark(s) ran, 2 failed" in md
    assert "FAILED: broken (failed (exit 2))" in md and "is not a comma-separated list of integers" in md
    assert "FAILED: hung (timed out after" in md
    assert "## mpdata" in md and "| O8 | 1 |" in md  # the benchmark after the failures ran and is reported
    assert "is not a comma-separated list of integers" in html_path.read_text()
    check_html(tmp_path)


# -- the seeds' figures -------------------------------------------------------------------------------------


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed documents (../shared/seeds) are not beside the checkout")
def test_seed_figures_are_printed_in_the_seeds_as_kept():
    escape = (SEEDS / "000_7713f7d7a82d8e12.txt").read_text()
    figures = [
        *(seeds.SPECTRAL_ORIGINAL, seeds.SPECTRAL_CUDA_AWARE, seeds.SPECTRAL_IPC, seeds.SPECTRAL_WATTS_PER_GPU),
        *(seeds.SPECTRAL_JOULES_PER_STEP, seeds.MPDATA_NO_EXCHANGE, seeds.MPDATA_GPU_EXCHANGE),
        *(seeds.MPDATA_HOST_EXCHANGE, *seeds.MPDATA_WATTS_PER_GPU.values(), *seeds.MPDATA_JOULES_PER_STEP),
    ]
    for f in figures:
        assert re.search(rf"(?<![\d.]){re.escape(f'{f.value:.15g}')}\s?{f.unit}\b", escape), f
    assert "from 1.89s to 0.16s" in escape and "down to 0.12s" in escape and "4J to 5J per timestep" in escape
    stencil = (SEEDS / "004_3e68e1a67c503253.txt").read_text()
    for n, (traditional, persistent) in seeds.SEED_004_US.items():
        assert f"\n{n} {traditional:.15g} {persistent:.15g}\n" in stencil
    assert seeds.SEED_MPDATA == {"no_exchange_s": 0.0214, "exchange_s": 0.0216, "host_staged_s": 0.0835,
                                 "joules_per_step": (4.0, 5.0)}  # fmt: skip


def test_halo_plot_of_one_rank_has_an_axis_it_can_draw(tmp_path):
    """One rank sends to no peer (its periodic halo is its own): 0 bytes per peer cannot go on a log axis, so
    the plot draws against the points per rank side instead (matplotlib warned and drew nothing before)."""
    import warnings

    from gridcomm.lab.bench.results import halo_axis, plot_halo_gpu

    path = next(RESULTS.glob("report-gpu-1r-*/raw/halo-gpu-1r-*.json"))
    payload = json.loads(path.read_text())
    rows, x, label = halo_axis(payload["results"], payload["results"][0]["fields"])
    assert all(r["bytes_per_peer_mean"] == 0 for r in rows) and x == [float(r["n"]) for r in rows]
    assert "points per rank side" in label
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_halo_gpu(payload, tmp_path / "halo.png")
    two = json.loads(next(RESULTS.glob("halo-gpu-2r-*.json")).read_text())
    assert "KiB" in halo_axis(two["results"], two["results"][0]["fields"])[2]


def test_transfer_plot_draws_a_transport_refused_at_a_later_size(tmp_path):
    """bench alltoall/p2p stop timing a transport once it is refused (e.g. ipc where a CUDA-aware MPI mapped
    the buffers first): its line ends there, the others are drawn whole."""
    from gridcomm.lab.bench.results import plot_transfer

    payload = json.loads(next(RESULTS.glob("alltoall-gpu-2r-*.json")).read_text())
    for row in payload["results"][len(payload["results"]) // 2 :]:
        del row["times"]["ipc"], row["GBps"]["ipc"]
    assert plot_transfer(payload, tmp_path / "transfer.png").stat().st_size > 0
