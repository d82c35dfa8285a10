"""The ``gridcomm`` command as a user runs it: it starts its own ranks, prints what it did, writes results."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from gridcomm import __version__
from gridcomm.lab import console as lab_console
from gridcomm.lab.cli import common
from gridcomm.lab.cli.main import app

pytestmark = pytest.mark.mpi


def run_gridcomm(*args: str, timeout: float = 180, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """``gridcomm ARGS`` run as a fresh process outside any launcher (in ``cwd``, with ``env`` added), stdout
    and stderr apart."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_", "COLUMNS"))}
    environ.update(GRIDCOMM_TIMEOUT="30", GRIDCOMM_OVERSUBSCRIBE_OK="1", PYTHONUNBUFFERED="1", **env)
    return subprocess.run(
        [sys.executable, "-m", "gridcomm", *args], capture_output=True, text=True, env=environ, timeout=timeout, cwd=cwd
    )


def gridcomm(*args: str, timeout: float = 180, cwd: Path | None = None) -> str:
    """Run ``gridcomm ARGS`` as a fresh process outside any launcher; fail the test on a non-zero exit."""
    proc = run_gridcomm(*args, timeout=timeout, cwd=cwd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"gridcomm {' '.join(args)} exited {proc.returncode}:\n{out[-6000:]}"
    return out


def test_info_names_the_transports_and_the_auto_choice():
    out = gridcomm("info")
    assert "MPI CUDA-aware" in out and "transports, host arrays" in out
    # Measured where cma and mpi can both move host arrays here; the order of preference where only mpi can.
    assert "auto picks" in out and ("measured on its own exchange" in out or "(fastest first)" in out)


def test_info_gives_the_order_of_preference_where_auto_does_not_measure():
    proc = run_gridcomm("info", GRIDCOMM_AUTO="order")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "auto picks" in proc.stdout and "(fastest first)" in proc.stdout


def test_info_warns_of_ranks_bound_to_one_cpu():
    """A rank bound to one CPU shares it with its libraries' threads (NVSHMEM's proxy polls without sleeping):
    gridcomm info says which ranks and how to launch instead."""
    from conftest import MPIEXEC, run_mpi
    from gridcomm import launch

    if MPIEXEC is None or launch._is_open_mpi(MPIEXEC):
        pytest.skip("binds ranks with MPICH's hydra (-bind-to core); gridcomm's Open MPI launch binds nothing")
    rc, out = run_mpi(2, ["-m", "gridcomm", "info"], timeout=120, launcher_args=("-bind-to", "core"))
    assert rc == 0 and "CPUs per rank" in out and "bound to one CPU" in out and "--bind-to none" in out, out


def test_info_names_the_nodes_and_the_transports_of_each_group_of_peers():
    """Ranks declared on nodes of their own (GRIDCOMM_RANKS_PER_NODE=1): gridcomm info lists the nodes and, for
    the peers on a rank's node and the others, the transports that can serve them."""
    from conftest import run_mpi

    rc, out = run_mpi(2, ["-m", "gridcomm", "info"], timeout=120, env={"GRIDCOMM_RANKS_PER_NODE": "1"})
    text = " ".join(out.split())
    assert rc == 0 and "nodes 2: rank 0 | rank 1 (GRIDCOMM_RANKS_PER_NODE=1)" in text, out
    assert "one transport per group of peers" in text and "peers, network mpi" in text, out


def test_demo_on_four_ranks_is_verified():
    out = gridcomm("demo", "--np", "4", "--shape", "16,12,10")  # the comma form, as bench soak takes it
    assert "grid (16, 12, 10) periodic" in out and "4 ranks on process grid" in out and out.rstrip().endswith("OK")


def test_run_mpdata_starts_ranks_reports_and_plots(tmp_path):
    png = tmp_path / "bell.png"
    out = gridcomm("run", "mpdata", "--grid", "O8", "--np", "2", "--steps", "6", "--alpha", "0.785", "--plot", str(png))
    assert "2 rank(s)" in out and "l1 / l2 / linf error" in out and "mass change" in out
    assert out.rstrip().endswith("OK") and png.stat().st_size > 10_000


def test_run_spectral_reports_the_round_trip_and_the_split():
    out = gridcomm("run", "spectral", "--grid", "O16", "--levels", "2", "--fields", "2", "--steps", "2", "--np", "3")
    assert "T = 15" in out and "3 rank(s)" in out and "round-trip error" in out
    assert "transposition" in out and "legendre" in out and out.rstrip().endswith("OK")
    # One rank's split, which adds up to its step (each phase on its own slowest rank added up to 111 %).
    shares = [int(x) for x in re.findall(r"ms \((\d+) %\)", out)]
    assert len(shares) == 4 and sum(shares) == 100 and "adds up to its step" in out, out
    grouped = gridcomm(
        "run", "spectral", "--grid", "O16", "--levels", "2", "--steps", "1", "--np", "2", "--pipeline", "2"
    )
    assert "2 stages x 1 group of rows" in grouped and grouped.rstrip().endswith("OK"), grouped
    both = gridcomm(
        "run", "spectral", "--grid", "O16", "--levels", "2", "--steps", "1", "--np", "2", "--pipeline", "2x2"
    )
    assert "2 stages x 2 groups of rows" in both and both.rstrip().endswith("OK"), both
    assert "8x4" in gridcomm_fails("run", "spectral", "--grid", "O16", "--pipeline", "2x2x2", "--np", "1")
    assert "--pipeline" in gridcomm_fails("run", "spectral", "--grid", "O16", "--pipeline", "0", "--np", "1")
    assert "'many'" in gridcomm_fails("run", "spectral", "--grid", "O16", "--pipeline", "many", "--np", "1")


def gridcomm_fails(*args: str) -> str:
    """Run ``gridcomm ARGS``, which must exit non-zero; its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "gridcomm", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode != 0, f"gridcomm {' '.join(args)} succeeded"
    return proc.stdout + proc.stderr


def test_run_spectral_refuses_a_truncation_above_n_minus_1():
    assert "N - 1 = 15" in gridcomm_fails("run", "spectral", "--grid", "O16", "--truncation", "16", "--np", "1")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("stencil2d", "--mode", "bogus"), "mode='bogus' is unknown"),
        (("stencil2d", "--mode", "graph", "--cpu"), "mode 'graph' captures the step"),  # the README's line, on a CPU
        (("spectral", "--grid", "O16", "--truncation", "16"), "N - 1 = 15"),
    ],
)
def test_a_dwarfs_bad_option_is_said_once_by_rank_0_without_a_traceback(args, said):
    """Every rank read the same command line and printed the same error, without the rank its prefix promised."""
    proc = run_gridcomm("run", *args, "--np", "2", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("gridcomm: error: ") == 1 and proc.stderr.count(said) == 1, proc.stderr
    assert "gridcomm: error: rank 0: Invalid value for '--" in proc.stderr and "Traceback" not in proc.stderr


def test_run_mpdata_refuses_a_time_step_beyond_cfl():
    assert "violates the CFL condition" in gridcomm_fails("run", "mpdata", "--grid", "O8", "--np", "1", "--dt", "1e6")


def test_bench_mpdata_writes_results_with_machine_and_date(tmp_path):
    out = gridcomm(
        "bench", "mpdata", "--np", "2", "--grids", "O8", "--levels", "1,2", "--steps", "3", "--out", str(tmp_path)
    )
    assert "MPDATA step on 2 rank(s)" in out
    (path,) = tmp_path.glob("mpdata-cpu-2r-*.json")
    payload = json.loads(path.read_text())
    assert payload["machine"]["ranks"] == 2 and payload["machine"]["date"] and payload["machine"]["versions"]["mpi"]
    assert [r["levels"] for r in payload["results"]] == [1, 2]
    assert all(r["median_s"] > 0 and r["owned_per_rank"] == [r["nodes"] // 2] * 2 for r in payload["results"])


def test_bench_stencil2d_and_halo_write_results(tmp_path):
    out = gridcomm(
        "bench", "stencil2d", "--np", "2", "--cpu", "--sizes", "16,32", "--samples", "2", "--out", str(tmp_path)
    )
    assert "2-D Jacobi step on 2 rank(s)" in out
    (path,) = tmp_path.glob("stencil2d-cpu-2r-*.json")
    rows = json.loads(path.read_text())["results"]
    assert {(r["n"], r["mode"]) for r in rows} == {(n, m) for n in (16, 32) for m in ("traditional", "overlapped")}
    assert all(r["time_per_step_s"] > 0 and r["no_exchange_s"] > 0 for r in rows)
    # Run from another directory without --out: the results go there (not into a benchmarks/results made there),
    # it says where, and the progress comes as lines (no terminal here).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = gridcomm("bench", "halo", "--np", "2", "--quick", cwd=elsewhere)
    (halo,) = elsewhere.glob("halo-cpu-2r-*.json")
    assert [p.name for p in elsewhere.iterdir() if p.is_dir()] == [] and f"results: {halo.name}" in out
    assert "halo exchange cases: 0/2" in out and "halo exchange cases: 2/2" in out
    payload = json.loads(halo.read_text())
    assert payload["machine"]["cpu"] and all(r["floor"]["median_s"] > 0 for r in payload["results"])


def test_results_record_the_transport_settings_in_effect(monkeypatch):
    """Two runs of one bench under different MPI or NCCL settings are told apart by their files."""
    from gridcomm.lab.measure.machine import machine_info

    monkeypatch.setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "cma")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    monkeypatch.setenv("OMPI_MCA_orte_hnp_uri", "1764950016.0;tcp://192.0.2.2:58679")  # the launch, not a setting
    settings = machine_info(1)["settings"]
    assert settings["OMPI_MCA_btl_vader_single_copy_mechanism"] == "cma" and settings["NCCL_NVLS_ENABLE"] == "0"
    assert "UNRELATED_SETTING" not in settings and "OMPI_MCA_orte_hnp_uri" not in settings


def test_bench_halo_mixed_times_one_exchange_against_three(tmp_path):
    """u, v and p of their own halos and staggering: one exchanger against one per field, every host transport;
    the figures are the machine's to judge, the test checks what was measured."""
    out = gridcomm("bench", "halo", "--np", "2", "--mixed", "--quick", "--out", str(tmp_path))
    assert "one exchange against three" in out
    (path,) = tmp_path.glob("halo-mixed-cpu-2r-*.json")
    rows = json.loads(path.read_text())["results"]
    assert [r["n"] for r in rows] == [8, 32]
    for r in rows:
        assert r["messages_per_rank"]["three"] == 3 * r["messages_per_rank"]["one"] > 0
        for name, ways in r["times"].items():
            assert set(ways) == {"one", "three", "three overlapped", "same bytes, one halo"}
            assert all(w["median_s"] > 0 for w in ways.values()) and r["three_over_one"][name] > 0
            assert r["one_over_same_bytes"][name] > 0
        # the reference moves the same bytes to within one of its levels
        assert abs(r["same_bytes_per_rank"] - r["bytes_per_rank"]) <= r["same_bytes_per_rank"] / 8


def test_bench_transpose_writes_results_beside_its_peers(tmp_path):
    """Every figure checked equal before timing (a mismatch stops the run); the hand-written pack + Alltoallv is
    always there, mpi4py-fft where installed, else one line says why."""
    out = gridcomm("bench", "transpose", "--np", "2", "--quick", "--out", str(tmp_path))
    assert "slab redistribution of an N³ float64 array on 2 rank(s)" in out
    (path,) = tmp_path.glob("transpose-cpu-2r-*.json")
    payload = json.loads(path.read_text())
    rows = payload["results"]
    assert [r["n"] for r in rows] == [16, 32] and all(r["bytes_total"] == r["n"] ** 3 * 8 for r in rows)
    # each cma (one thread, threads) twice: reading the slabs with process_vm_readv, and out of memory the ranks
    # share (shared_zeros)
    cma = {"cma", "cma/threads"}
    variants = {"mpi", "mpi p2p/datatype", "mpi neighbor/datatype", "shm"} | cma | {f"{c}, shared slabs" for c in cma}
    assert all(set(r["variants"]) == variants and r["best"] in r["variants"] for r in rows)
    # the ceiling beside them: every rank copying its slab once, at the same time
    assert all(r["one_copy"]["median_s"] > 0 and r["best_over_one_copy"] > 0 for r in rows)
    assert "ceiling" in out
    installed = importlib.util.find_spec("mpi4py_fft") is not None
    peers = {"pack+Alltoallv", "mpi4py-fft"} if installed else {"pack+Alltoallv"}
    assert all(set(r["peers"]) == peers and set(r["peers_over_best"]) == peers for r in rows)
    assert (payload["config"]["peers"]["mpi4py-fft"] is None) == installed
    assert installed or "skipped: mpi4py-fft not installed" in out


def test_bench_peers_that_cannot_load_are_skipped_in_one_line(tmp_path):
    """A peer that is missing (or built against another MPI, so that its import fails) is skipped: one line says
    which and how to get it, the result file keeps the reason, and the benchmark runs the rest."""
    stubs = tmp_path / "stubs"
    for module in ("ghex", "mpi4py_fft"):
        (stubs / module).mkdir(parents=True)
        (stubs / module / "__init__.py").write_text("raise ImportError('libmpi.so.12: cannot open shared object')\n")
    pythonpath = os.pathsep.join([str(stubs), os.environ.get("PYTHONPATH", "")])
    for command, label in (("halo", "GHEX"), ("transpose", "mpi4py-fft")):
        proc = run_gridcomm("bench", command, "--np", "1", "--quick", "--out", str(tmp_path), PYTHONPATH=pythonpath)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        (line,) = [x for x in out.splitlines() if x.startswith("skipped:")]
        assert f"skipped: {label} cannot load: libmpi.so.12" in line and "docs/benchmarks.md, Peers" in line
        (path,) = tmp_path.glob(f"{command}-cpu-1r-*.json")
        payload = json.loads(path.read_text())
        assert "cannot load" in payload["config"]["peers"][label]
        assert all(label not in r["peers"] for r in payload["results"])


def test_ranks_share_the_cores_between_their_blas_threads(monkeypatch):
    from gridcomm import launch

    monkeypatch.setattr(launch.os, "cpu_count", lambda: 8)
    env = launch.rank_environment(4, {"PATH": "/bin"})
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    assert launch.rank_environment(16, {})["OPENBLAS_NUM_THREADS"] == "1"
    assert launch.rank_environment(4, {"OMP_NUM_THREADS": "3"}) == {"OMP_NUM_THREADS": "3"}  # the user's choice


def test_open_mpi_ranks_are_not_bound_to_one_core(tmp_path):
    """Open MPI binds 2 ranks to a core each by default; the launcher asks it not to, so a library's polling
    thread (NVSHMEM's proxy) never shares the one core with the rank's own thread. MPICH binds nothing."""
    from gridcomm import launch

    fake = {}
    for name, version in (("ompi", "mpirun (Open MPI) 4.1.6"), ("mpich", "HYDRA build details:")):
        fake[name] = tmp_path / name
        fake[name].write_text(f"#!/bin/sh\necho '{version}'\n")
        fake[name].chmod(0o755)
    ompi = launch.mpiexec_command(2, ["python3", "x.py"], str(fake["ompi"]))
    assert (
        ompi[ompi.index("--bind-to") + 1] == "none" and "--oversubscribe" in ompi and ompi[-2:] == ["python3", "x.py"]
    )
    mpich = launch.mpiexec_command(2, ["python3", "x.py"], str(fake["mpich"]))
    assert mpich == [str(fake["mpich"]), "-n", "2", "python3", "x.py"]


def test_bench_spectral_writes_results_and_plot(tmp_path):
    out = gridcomm("bench", "spectral", "--np", "2", "--grids", "O16", "--levels", "2", "--steps", "1",
                   "--out", str(tmp_path))  # fmt: skip
    assert "spectral transform on 2 rank(s)" in out
    (path,) = tmp_path.glob("spectral-cpu-2r-*.json")
    payload = json.loads(path.read_text())
    (row,) = payload["results"]
    assert row["grid"] == "O16" and row["round_trip_error"] < 1e-12 and set(row["split_s"]) == {
        "legendre", "fft", "transposition"
    }  # fmt: skip
    assert payload["machine"]["date"] and path.with_suffix(".png").stat().st_size > 10_000
    # The Legendre phase's matrix products alone run faster than the whole phase (the moves are left out).
    assert 0 < row["legendre_products_s"] < row["split_s"]["legendre"]
    assert row["legendre_products_share_of_matmul"] > row["legendre_share_of_matmul"] > 0
    # The peer: the same step by ducc0 (a test dependency) on the node's CPUs, right to round-off.
    assert row["ducc0_step_s"] > 0 and row["ducc0_threads_per_rank"] >= 1 and row["ducc0_round_trip_error"] < 1e-12
    assert row["ducc0_over_step"] == pytest.approx(row["ducc0_step_s"] / row["time_per_step_s"])
    assert f"ducc0 {row['ducc0_version']}: the same step" in out


def test_bench_spectral_without_its_peer(tmp_path):
    gridcomm("bench", "spectral", "--np", "1", "--grids", "O16", "--levels", "1", "--steps", "1", "--no-peer",
             "--out", str(tmp_path))  # fmt: skip
    (path,) = tmp_path.glob("spectral-cpu-1r-*.json")
    payload = json.loads(path.read_text())
    assert payload["config"]["peer"] is False and payload["results"][0]["ducc0_step_s"] is None


def test_bench_spectral_on_one_rank_runs_one_case_per_grid(tmp_path):
    """One rank transposes nothing, so a list of transports gives one case per grid, said so, transport "none"."""
    out = gridcomm("bench", "spectral", "--np", "1", "--grids", "O16", "--levels", "2", "--steps", "1",
                   "--transports", "cma,mpi", "--out", str(tmp_path))  # fmt: skip
    assert "one rank has no transposition" in out
    (path,) = tmp_path.glob("spectral-cpu-1r-*.json")
    (row,) = json.loads(path.read_text())["results"]
    assert row["transport"] == "none" and row["split_s"]["transposition"] < 0.01


def test_help_texts_hold_no_square_brackets():
    """rich reads [text] in a help string as markup and drops it: units such as [s] vanished from --help."""
    import typer

    from gridcomm.lab.cli.main import app

    def walk(command, path):
        yield path, command.help or ""
        for param in command.params:
            yield f"{path} {param.name}", getattr(param, "help", None) or ""
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    eaten = [(where, text) for where, text in walk(typer.main.get_command(app), "gridcomm") if "[" in text]
    assert not eaten, eaten


def test_run_help_shows_the_dwarfs_options_after_its_name():
    """`gridcomm run mpdata --help` is what a user types to learn the dwarf's options: click read every --help
    as run's own and showed run's help instead."""
    dwarf = gridcomm("run", "stencil2d", "--help")
    assert "Usage: gridcomm run stencil2d" in dwarf and "--steps" in dwarf and "--mode" in dwarf
    assert "--np" in dwarf  # `gridcomm run DWARF --np N`: the option the dwarf's help left out
    own = gridcomm("run", "--help")
    assert "run [OPTIONS]" in own and "--np" in own and "--steps" not in own


# -- in one process: help, options, output ---------------------------------------------------------------------

COMMANDS = {}


def _walk(command, path=()):
    COMMANDS[path] = command
    for name, sub in getattr(command, "commands", {}).items():
        _walk(sub, (*path, name))


_walk(typer.main.get_command(app))


def invoke(*args: str, **env: str):
    return CliRunner().invoke(app, list(args), env=env, prog_name="gridcomm")


def test_version_and_short_help():
    """`gridcomm --version` and `-h` were "No such option"."""
    assert invoke("--version").output == f"gridcomm {__version__}\n"
    assert invoke("-V").exit_code == 0
    for args in ((), ("bench",), ("bench", "halo"), ("app", "mpdata")):
        result = invoke(*args, "-h")
        assert result.exit_code == 0 and "Usage: gridcomm" in result.output and "--help" in result.output, args


@pytest.mark.parametrize("path", sorted(p for p in COMMANDS if p != ("run",)), ids=" ".join)
def test_help_shows_no_type_beside_flags(path):
    """rich showed `--help <bool>` (and `--fct --no-fct <bool>`): flags take no value."""
    result = invoke(*path, "--help", COLUMNS="120")
    assert result.exit_code == 0 and "<bool>" not in result.output, result.output


@pytest.mark.parametrize("columns", [80, 95, 110])
@pytest.mark.parametrize("group", [(), ("bench",), ("app",)], ids=lambda g: " ".join(g) or "gridcomm")
def test_help_wraps_whole_sentences(group, columns):
    """Each command's line in a group's help breaks only where the next word would not fit (rich kept the
    docstrings' own line breaks: 'beside its floors measured in the same' / 'run: bare MPI ...')."""
    lines = invoke(*group, "--help", COLUMNS=str(columns)).output.splitlines()
    panel = lines[next(i for i, line in enumerate(lines) if "Commands" in line) + 1 :]
    rows = [line[1:-1] for line in panel if line.startswith("│") and line.endswith("│")]
    text = next(row.index(word) for row in rows[:1] for word in row.split()[1:2])  # where the help column starts
    for line, following in itertools.pairwise(rows):
        if following[:text].strip():  # the next command's first line
            continue
        room = len(line) - 1 - text  # rich keeps one column of padding on the right
        assert len(line[text:].rstrip()) + 1 + len(following.split()[0]) > room, f"broken early:\n{line}\n{following}"


@pytest.mark.parametrize("path", [p for p, c in COMMANDS.items() if any(q.name == "shape" for q in c.params)])
def test_every_shape_option_takes_the_comma_form(path):
    """`demo --shape 24,20,16` failed while `bench soak --shape` wanted exactly that form."""
    (shape,) = [q for q in COMMANDS[path].params if q.name == "shape"]
    assert shape.metavar == "X,Y,Z"

    def parsed(text: str) -> tuple[int, ...]:
        return tuple(COMMANDS[path].make_context(path[-1], ["--shape", text]).params["shape"])

    assert parsed("24,20,16") == (24, 20, 16)
    for bad in ("24 20 16", "24,20", "24,0,16", "a,b,c"):
        with pytest.raises(Exception, match="comma-separated"):
            parsed(bad)


def test_every_dwarf_takes_np():
    """`gridcomm run mpdata --np 4` is how a dwarf starts its ranks; its help did not list --np."""
    for name in ("mpdata", "spectral", "stencil2d"):
        result = invoke("run", name, "--help", COLUMNS="120")
        assert result.exit_code == 0 and re.search(r"--np\s+<int>\s+Ranks to start", result.output), result.output


def test_line_progress_where_the_output_is_no_terminal(capsys, monkeypatch):
    """rich's bar draws nothing off a terminal: a report ran 53 s without a line; now one per part."""
    monkeypatch.setattr(lab_console._LineProgress.__init__, "__defaults__", (0.0,))  # a line on every update
    with lab_console.progress(True) as bar:
        task = bar.add_task("cases", total=3)
        bar.advance(task)
        bar.update(task, description="cases, the last", completed=3)
        other = bar.add_task("[1/2] halo (~3 s)", total=7.5, counted=False)
        bar.update(other, completed=2.0)
    said = capsys.readouterr().out.splitlines()
    assert [re.sub(r" \(\d+ s\)$", "", line) for line in said] == [
        "cases: 0/3", "cases: 1/3", "cases, the last: 3/3", "[1/2] halo (~3 s):", "[1/2] halo (~3 s):"
    ]  # fmt: skip
    with lab_console.progress(False) as bar:  # the other ranks
        bar.advance(bar.add_task("cases", total=3))
    assert capsys.readouterr().out == ""


@given(st.lists(st.floats(0, 1e3), min_size=1, max_size=8))
def test_shares_add_up_to_100(values):
    shares = common.percentages(values)
    assert sum(shares) == (100 if sum(values) > 0 else 0)
    assert all(abs(s - 100 * v / sum(values)) < 1 for s, v in zip(shares, values, strict=True) if sum(values) > 0)


def test_the_spectral_split_is_one_ranks_and_adds_up_to_its_step():
    """Each phase on its own slowest rank added up to 111 % of the step; the slowest rank's own split adds up."""
    from gridcomm.lab.apps.spectral.dwarf import _splits

    ranks = [(2.0, {"legendre": 0.5, "fft": 1.0, "transposition": 0.4}), (3.0, {"legendre": 1.0, "fft": 0.5,
             "transposition": 1.2})]  # fmt: skip
    r = _splits(SimpleNamespace(allgather=lambda _: ranks), *ranks[0], steps=2)
    assert r["slowest_rank"] == 1 and r["time_per_step_s"] == 1.5
    own = {"legendre": 0.5, "fft": 0.25, "transposition": 0.6, "other": 0.15}
    assert r["slowest_rank_split_s"] == pytest.approx(own)
    assert sum(r["slowest_rank_split_s"].values()) == pytest.approx(r["time_per_step_s"])
    assert r["split_s"] == {"legendre": 0.5, "fft": 0.5, "transposition": 0.6}  # each phase's own slowest rank


def test_info_in_a_pipe_follows_columns_and_pads_no_line():
    """`gridcomm info | cat` padded every line to 160 characters."""
    piped = run_gridcomm("info", timeout=120)
    assert piped.returncode == 0 and "transports, host arrays" in piped.stdout
    assert not [line for line in piped.stdout.splitlines() if line.endswith(" ")], piped.stdout
    narrow = run_gridcomm("info", timeout=120, COLUMNS="70")
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 70, narrow.stdout


def test_ranks_started_from_a_terminal_are_told_its_width(monkeypatch):
    """The ranks write into mpiexec's pipes, not the terminal: without COLUMNS their tables took 160 columns."""
    from gridcomm import launch

    started = {}
    monkeypatch.setattr(launch, "mpiexec_command", lambda n, command: list(command))
    monkeypatch.setattr(
        launch.subprocess, "run", lambda args, env: started.update(env) or SimpleNamespace(returncode=0)
    )
    monkeypatch.setattr(launch.shutil, "get_terminal_size", lambda: os.terminal_size((93, 40)))
    monkeypatch.delenv("COLUMNS", raising=False)
    for tty, columns in ((True, "93"), (False, None)):
        monkeypatch.setattr(launch.sys, "stdout", SimpleNamespace(isatty=lambda tty=tty: tty))
        started.clear()
        assert launch.run_under_mpiexec(2, ["true"]) == 0 and started.get("COLUMNS") == columns


def test_a_dwarf_run_in_this_process_exits_with_its_status(monkeypatch):
    """`gridcomm run stencil2d --np 1` runs the dwarf here: its exit status 1 (a result unlike the serial run's)
    came back as 0."""
    import gridcomm.lab.apps.stencil2d as stencil2d

    differs = {
        "global_shape": (8, 8), "proc_grid": (1, 1), "ranks": 1, "halo": 1, "steps": 1, "mode": "traditional",
        "device": "cpu", "dtype": "float64", "transport": "none", "time_per_step_s": 1e-6,
        "point_updates_per_s": 1.0, "bytes_per_step": 0, "checked": True, "max_abs_diff": 1.0, "bitwise_equal": False,
    }  # fmt: skip
    monkeypatch.setattr(stencil2d, "run_stencil2d", lambda *args, **kwargs: differs)
    result = invoke("run", "stencil2d", "--np", "1", "--cpu", "--n", "8", "--steps", "1")
    assert result.exit_code == 1 and "MISMATCH" in result.output, result.output


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 on this platform")
def test_sigusr1_prints_where_a_stuck_command_is(tmp_path):
    """kill -USR1 of a gridcomm process prints every thread's stack and leaves it running (a stuck rank's place)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_"))}
    child = "import time; print('ready', flush=True); time.sleep(600)"
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gridcomm", "run", "--np", "1", sys.executable, "-c", child],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=environ, start_new_session=True,
        )  # fmt: skip
        try:
            assert proc.stdout.readline().strip() == "ready"  # the command (so its handler) is running
            proc.send_signal(signal.SIGUSR1)
            for _ in range(600):  # until the stack is written (no time limit on a busy machine but this one)
                if "launch.py" in err.read_text():
                    break
                time.sleep(0.1)
            assert proc.poll() is None, "SIGUSR1 ended the command"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = err.read_text()
    assert "Current thread" in text and "run_under_mpiexec" in text, text


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals on this platform")
def test_a_command_with_a_progress_bar_finishes_on_a_terminal(tmp_path):
    """Open MPI gives its ranks a pseudo-terminal for stdout, so rank 0 draws rich's bar; a line printed while
    the bar ran went round between rich's stdout proxy and the console for ever (every bench on 4 GPUs hung),
    and its tables were cut to rich's 80 columns."""
    import select

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_", "COLUMNS"))}
    args = ["bench", "spectral", "--np", "1", "--grids", "O24", "--levels", "2", "--steps", "1", "--no-peer"]
    main, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gridcomm", *args, "--out", str(tmp_path)],
        stdin=terminal, stdout=terminal, stderr=terminal, env=environ, start_new_session=True,
    )  # fmt: skip
    os.close(terminal)
    output = b""
    try:
        deadline = time.monotonic() + 600  # it needs seconds; only a hang comes near this
        while time.monotonic() < deadline:
            if select.select([main], [], [], 1.0)[0]:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the terminal's other end is closed: the command has ended
                    break
                if not chunk:
                    break
                output += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=60) == 0, output.decode(errors="replace")[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(main)
    text = output.decode(errors="replace")
    assert list(tmp_path.glob("spectral-cpu-1r-*.json")), text[-4000:]
    # A pseudo-terminal of no size (as Open MPI's) gets 160 columns, not rich's 80 that cut every cell short.
    table = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line) for line in text.splitlines() if "\u2502" in line]
    widest = max(map(len, table), default=0)
    assert widest > 100, text[-4000:]


def test_bench_halo_on_declared_nodes_times_the_mixes(tmp_path):
    """4 ranks as 2 nodes of 2: cma cannot serve the peers on the other node, so it is left out and cma+mpi (cma
    on the node, mpi across) is timed beside the mpi variants and beside each of its groups alone; the run does
    not stop on cma's refusal."""
    proc = run_gridcomm(
        "bench", "halo", "--np", "4", "--quick", "--no-peers", "--out", str(tmp_path), GRIDCOMM_RANKS_PER_NODE="2"
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (path,) = tmp_path.glob("halo-cpu-4r-*.json")
    payload = json.loads(path.read_text())
    assert payload["machine"]["declared_ranks_per_node"] == 2  # the file says the nodes were declared
    for r in payload["results"]:
        assert "cma" not in r["variants"] and {"cma+mpi", "p2p/copy"} <= set(r["variants"]), r["variants"]
        # each mix beside its groups alone (exchanger.only), and its time over the slower of them
        assert {"cma+mpi: node alone", "cma+mpi: network alone"} <= set(r["groups_alone"]), r["groups_alone"]
        assert r["mixed_over_slower_group"]["cma+mpi"] > 0, r["mixed_over_slower_group"]
