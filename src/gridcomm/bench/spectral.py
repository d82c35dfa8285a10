"""``gridcomm bench spectral``: time per step of the spectral-transform dwarf and its split, each phase beside
its ceiling measured in the same run (the Legendre products against a matrix product of the same shape)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ..apps.spectral.dwarf import PHASES, run_spectral
from ..comm import Communicator
from ..grids.octahedral import OctahedralGrid


def legendre_flops(grid: OctahedralGrid, truncation: int, batch: int) -> float:
    """Floating-point operations of one step's Legendre products (inverse and direct, all ranks together):
    per wavenumber m and direction, real products (2 batch x (T - m + 1)) by ((T - m + 1) x N) over the
    northern rows, i.e. 4 batch (T - m + 1) N multiply-adds; summed over m that is 4 batch N ncoef."""
    ncoef = (truncation + 1) * (truncation + 2) // 2
    return 2.0 * 2 * (2 * batch) * ncoef * grid.N


def matmul_gflops(comm: Communicator, grid: OctahedralGrid, truncation: int, batch: int, xp: Any = np) -> float:
    """FP64 matrix-product rate of this rank [GFLOP/s], on the shape of the largest Legendre product (m = 0,
    one parity): (2 batch x T/2) by (T/2 x N); the slowest rank's rate."""
    k = max(1, (truncation + 1) // 2)
    a = xp.ones((2 * batch, k))
    b = xp.ones((k, grid.N))
    flops = 2.0 * a.shape[0] * k * grid.N
    best = float("inf")
    for _ in range(5):
        comm.mpi.Barrier()
        start = time.perf_counter()
        repeats = 0
        while True:
            a @ b
            repeats += 1
            elapsed = time.perf_counter() - start
            if elapsed > 0.05:
                break
        best = min(best, elapsed / repeats)
    from mpi4py import MPI

    return comm.mpi.allreduce(flops / best / 1e9, op=MPI.MIN)


def benchmark_spectral(
    comm: Communicator, grid: str, *, levels: int, fields: int, steps: int, transport: str = "auto"
) -> dict[str, Any]:
    """One result row: the dwarf's time per step and split (slowest rank per phase), the Legendre rate against
    the matrix-product rate measured here, and the round-trip error."""
    octahedral = OctahedralGrid(grid)
    r = run_spectral(comm, octahedral, levels=levels, fields=fields, steps=steps, transport=transport)
    flops = legendre_flops(octahedral, r["truncation"], r["batch"]) / comm.size  # per rank, balanced in pairs
    ceiling = matmul_gflops(comm, octahedral, r["truncation"], r["batch"])
    legendre = r["split_s"]["legendre"]
    return {
        **r,
        "legendre_GFLOPs_per_rank": flops / legendre / 1e9 if legendre else None,
        "matmul_GFLOPs_per_rank": ceiling,
        "transposition_fraction": r["split_s"]["transposition"] / r["time_per_step_s"],
    }


def plot_spectral(payload: dict[str, Any], png: Path) -> Path:
    """Each grid's step split into its phases, as shares of the step (slowest rank per phase, so the shares
    may add up to more than 100 %), the step time written above each bar."""
    from .results import machine_title, panels_figure

    rows = payload["results"]
    fig, (ax,) = panels_figure(1)
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for phase in PHASES:
        shares = np.array([100 * r["split_s"][phase] / r["time_per_step_s"] for r in rows])
        ax.bar(x, shares, bottom=bottom, label=phase)
        bottom += shares
    for k, r in enumerate(rows):
        ax.annotate(f"{r['time_per_step_s'] * 1e3:.1f} ms", (k, bottom[k]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{r['grid']} T{r['truncation']}\n{r['batch']} fields x levels" for r in rows], fontsize=7)
    ax.set(ylabel="share of the step [%] (inverse + direct)", ylim=(0, 1.4 * max(bottom)))
    ax.legend(fontsize=7, loc="upper left", ncol=3)
    machine_title(fig, "spectral transform", payload["machine"])
    fig.savefig(png, dpi=110)
    return png
