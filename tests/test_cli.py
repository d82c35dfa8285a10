"""The ``gridcomm`` command as a user runs it: it starts its own ranks, prints what it did, writes results."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi


def gridcomm(*args: str, timeout: float = 180) -> str:
    """Run ``gridcomm ARGS`` as a fresh process outside any launcher; fail the test on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_"))}
    env.update(GRIDCOMM_TIMEOUT="30", GRIDCOMM_OVERSUBSCRIBE_OK="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", "gridcomm", *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"gridcomm {' '.join(args)} exited {proc.returncode}:\n{out[-6000:]}"
    return out


def test_info_names_the_transports_and_the_auto_choice():
    out = gridcomm("info")
    assert "MPI CUDA-aware" in out and "transports, host arrays" in out
    assert "auto picks" in out and "(fastest first)" in out


def test_info_warns_of_ranks_bound_to_one_cpu():
    """A rank bound to one CPU shares it with its libraries' threads (NVSHMEM's proxy polls without sleeping):
    gridcomm info says which ranks and how to launch instead."""
    from conftest import MPIEXEC, run_mpi
    from gridcomm import launch

    if MPIEXEC is None or launch._is_open_mpi(MPIEXEC):
        pytest.skip("binds ranks with MPICH's hydra (-bind-to core); gridcomm's Open MPI launch binds nothing")
    rc, out = run_mpi(2, ["-m", "gridcomm", "info"], timeout=120, launcher_args=("-bind-to", "core"))
    assert rc == 0 and "CPUs per rank" in out and "bound to one CPU" in out and "--bind-to none" in out, out


def test_demo_on_four_ranks_is_verified():
    out = gridcomm("demo", "--np", "4")
    assert "4 ranks on process grid" in out and out.rstrip().endswith("OK")


def test_run_mpdata_starts_ranks_reports_and_plots(tmp_path):
    png = tmp_path / "bell.png"
    out = gridcomm("run", "mpdata", "--grid", "O8", "--np", "2", "--steps", "6", "--alpha", "0.785", "--plot", str(png))
    assert "2 rank(s)" in out and "l1 / l2 / linf error" in out and "mass change" in out
    assert out.rstrip().endswith("OK") and png.stat().st_size > 10_000


def test_run_spectral_reports_the_round_trip_and_the_split():
    out = gridcomm("run", "spectral", "--grid", "O16", "--levels", "2", "--fields", "2", "--steps", "2", "--np", "3")
    assert "T = 15" in out and "3 rank(s)" in out and "round-trip error" in out
    assert "transposition" in out and "legendre" in out and out.rstrip().endswith("OK")


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
    gridcomm("bench", "halo", "--np", "2", "--quick", "--out", str(tmp_path))
    (halo,) = tmp_path.glob("halo-cpu-2r-*.json")
    payload = json.loads(halo.read_text())
    assert payload["machine"]["cpu"] and all(r["floor"]["median_s"] > 0 for r in payload["results"])


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

    from gridcomm.cli.main import app

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
    own = gridcomm("run", "--help")
    assert "run [OPTIONS]" in own and "--np" in own and "--steps" not in own
