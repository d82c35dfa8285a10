"""The MPDATA GPU figure from synthetic result payloads (no GPU needed)."""

from __future__ import annotations

from typing import Any

import pytest

from gridcomm.lab.bench.mpdata_plot import plot_mpdata

PNG = b"\x89PNG\r\n\x1a\n"
KERNELS = ("upwind/inner", "upwind/halo", "antidiffusive", "limiter")


def machine(gpus: int) -> dict[str, Any]:
    """The shape machine_info writes (as in benchmarks/results/spectral-gpu-1r-*.json)."""
    return {
        "date": "2026-11-23T17:48:07+00:00",
        "device": "NVIDIA H200",
        "gpus_used": gpus,
        "gpus": [{"index": k, "name": "NVIDIA H200", "memory_GiB": 140.4} for k in range(gpus)],
        "cpu": "Intel(R) Xeon(R) Processor",
        "cpu_cores": 16,
        "ranks": gpus,
        "os": "Linux 6.18.44-fc-v657-gpu",
        "python": "3.12.3",
        "versions": {"gridcomm": "0.1.0", "numpy": "2.5.2", "mpi4py": "4.1.2", "cupy": "14.2.0", "mpi": "Open MPI"},
        "mpi_cuda_aware": False,
    }


def kernels(step_s: float) -> list[dict[str, Any]]:
    shares = (0.45, 0.1, 0.3, 0.15)
    return [
        {
            "kernel": name,
            "time_s": share * step_s,
            "bytes": 10**9,
            "GBps": 3000 * (0.9 - 0.1 * k),
            "share_of_hbm": 0.9 - 0.1 * k,
            "share_of_step": share,
        }
        for k, (name, share) in enumerate(zip(KERNELS, shares, strict=True))
    ]


def row(grid: str, transport: str, gpus: int, step_s: float, *, joules: float | None = 1.5, **extra: Any) -> dict:
    return {
        "grid": grid,
        "nodes": 6599680 if grid == "O1280" else 421120,
        "levels": 137,
        "ranks": gpus if transport != "none" else 1,
        "gpus": gpus,
        "transport": transport,
        "transport_used": "ipc" if transport == "auto" else transport,
        "graphs": True,
        "time_per_step_s": step_s,
        "joules_per_step": None if joules is None else joules * step_s / 0.01,
        "hbm_GBps": 3800.0,
        "step_share_of_hbm": 0.7,
        "kernels": [],
        **extra,
    }


def payload(gpus: int, rows: list[dict]) -> dict[str, Any]:
    config = {"grids": sorted({r["grid"] for r in rows}), "levels": [137], "steps": 20}
    return {"benchmark": "mpdata-gpu", "machine": machine(gpus), "config": config, "results": rows}


def test_one_payload_two_grids_three_transports(tmp_path):
    rows = [
        row(grid, transport, 1, step, kernels=kernels(step) if transport == "none" else [])
        for grid, step in (("O320", 0.004), ("O1280", 0.06))
        for transport in ("none", "ipc", "host")
    ]
    png = plot_mpdata([payload(1, rows)], tmp_path / "mpdata.png")
    assert png == tmp_path / "mpdata.png"
    assert png.read_bytes()[:8] == PNG


def test_two_payloads_give_a_speedup_line(tmp_path):
    one = [row("O1280", "none", 1, 0.06, kernels=kernels(0.06)), row("O1280", "ipc", 1, 0.065)]
    two = [row("O1280", "ipc", 2, 0.034, kernels=kernels(0.034)), row("O1280", "auto", 2, 0.035)]
    two.append(row("O1280", "ipc", 2, 0.04, graphs=False))  # slower duplicate: the faster one is drawn
    png = plot_mpdata([payload(1, one), payload(2, two)], tmp_path / "scaling.png")
    assert png.read_bytes()[:8] == PNG


def test_more_gpu_counts_use_log2_axes(tmp_path):
    rows = [row("O1280", "nccl", g, 0.06 / g**0.9) for g in (1, 2, 4, 8)]
    png = plot_mpdata([payload(8, rows)], tmp_path / "log2.png")
    assert png.read_bytes()[:8] == PNG


def test_missing_energy(tmp_path):
    rows = [row("O320", t, 1, 0.004, joules=None) for t in ("none", "staged")]
    png = plot_mpdata([payload(1, rows)], tmp_path / "no-energy.png")
    assert png.read_bytes()[:8] == PNG


def test_no_rows_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no result rows"):
        plot_mpdata([payload(1, [])], tmp_path / "empty.png")
    with pytest.raises(ValueError, match="no result rows"):
        plot_mpdata([], tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()
