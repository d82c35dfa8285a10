"""``gridcomm bench spectral``: time per step of the spectral-transform dwarf and its split, each phase beside
its ceiling measured in the same run: the Legendre products against a batched FP64 matrix product of the shape
they run (cuBLAS on the GPU, the host's BLAS on the CPU), and, on the GPU, the FFT phase's bytes against the
HBM copy bandwidth. Beside the whole step stands its peer, measured in the same run: the same transforms by
ducc0 (``ducc0.sht``, a multithreaded CPU library, the one that tests/test_spectral.py checks against) on the
node's CPUs."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...comm import Communicator
from ...grids.octahedral import OctahedralGrid
from ...transports import by_label
from ..apps.spectral.dwarf import PHASES, run_spectral
from ..apps.spectral.transform import max_buckets
from ..measure.timing import time_collective


def legendre_flops(grid: OctahedralGrid, truncation: int, batch: int) -> float:
    """Floating-point operations of one step's Legendre products (inverse and direct, all ranks together):
    per wavenumber m and direction, real products (2 batch x (T - m + 1)) by ((T - m + 1) x N) over the
    northern rows (both parities of l - m together), i.e. 4 batch (T - m + 1) N multiply-adds; summed over m
    that is 4 batch N ncoef per direction. The zero padding of the batched products is not counted."""
    ncoef = (truncation + 1) * (truncation + 2) // 2
    return 2.0 * 2 * (2 * batch) * ncoef * grid.N


def fft_bytes(grid: OctahedralGrid, truncation: int, batch: int) -> float:
    """The fewest bytes one step's FFT phase must move (inverse and direct, all ranks together): each direction
    reads or writes the grid values once (8 bytes x batch x points) and the Fourier coefficients once
    (16 bytes x batch x (T + 1) wavenumbers x 2N rows), i.e. 2 batch (8 points + 32 N (T + 1)) bytes."""
    return 2.0 * batch * (8 * grid.size + 16 * (truncation + 1) * 2 * grid.N)


def matmul_gflops(
    comm: Communicator, grid: OctahedralGrid, truncation: int, batch: int, xp: Any = np, stack: int = 1
) -> float:
    """FP64 matrix-product rate of this rank [GFLOP/s] on the shape of the largest Legendre product (m = 0, one
    parity): ``stack`` products (N x T/2) by (T/2 x 2 batch) in one batched call, as the transform's buckets
    run them; the slowest rank's rate, the device synchronised before the clock is read."""
    k = max(1, (truncation + 1) // 2)
    a = xp.ones((stack, grid.N, k))
    b = xp.ones((stack, k, 2 * batch))
    flops = 2.0 * stack * grid.N * k * 2 * batch
    finish = None if xp is np else xp.cuda.get_current_stream().synchronize
    timing = time_collective(comm.mpi, lambda: xp.matmul(a, b), samples=5, min_sample_s=0.05, finish=finish)
    return flops / timing.minimum / 1e9


def ducc0_geometry(grid: OctahedralGrid) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The grid for ducc0's transforms on arbitrary rings: (``theta``, ``nphi``, ``phi0``, ``ringstart``: the rows'
    colatitudes [rad], points, first longitude [rad] and first point), and each point's quadrature area
    2 pi w_row / n_row [sr], by which the adjoint synthesis of a field becomes its Gauss quadrature."""
    rings = {
        "theta": np.pi / 2 - grid.latitudes,
        "nphi": grid.nlon.astype(np.uintp),
        "phi0": np.zeros(2 * grid.N),
        "ringstart": grid.offsets[:-1].astype(np.uintp),
    }
    return rings, (2 * np.pi * grid.weights / grid.nlon)[grid.row]


def ducc0_peer(comm: Communicator, grid: OctahedralGrid, truncation: int, batch: int) -> dict[str, Any] | None:
    """The dwarf's step done by ducc0 on the node's CPUs (collective): each rank synthesises its share of the
    ``batch`` fields (one ``ducc0.sht.synthesis`` call for all of them) and analyses them back (the adjoint
    synthesis of the values times each point's quadrature area, Gauss quadrature as in the dwarf), on an equal
    share of the node's CPUs (or on those it is bound to, where fewer). One warm-up call on one field, then one
    step timed.

    Returns ``step_s`` (the slowest rank's seconds for the step), ``threads`` per rank, ``version`` and
    ``round_trip_error`` (largest |a - direct(inverse(a))| over largest |a|, all ranks); None where ducc0 is not
    installed (it comes with the ``test`` extra)."""
    try:
        import ducc0
    except ImportError:
        return None
    from ..apps.spectral.dwarf import random_coefficients, round_trip_error

    # An equal share of the node's CPUs (as the launcher gives each rank's BLAS), fewer where the rank is bound.
    threads = max(1, min(len(os.sched_getaffinity(0)), (os.cpu_count() or 1) // comm.local_size))
    geometry, area = ducc0_geometry(grid)
    rings = {**geometry, "lmax": truncation, "spin": 0, "nthreads": threads}
    share = len(np.array_split(np.arange(batch), comm.size)[comm.rank])
    a = random_coefficients(truncation, np.arange(truncation + 1), share, seed=comm.rank)[:, None, :]

    def step() -> np.ndarray:
        values = ducc0.sht.synthesis(alm=a, **rings)
        values *= area
        return ducc0.sht.adjoint_synthesis(map=values, **rings)

    if share:
        ducc0.sht.synthesis(alm=a[:1], **rings)  # warm-up: ducc0's threads and tables
    comm.rendezvous("bench spectral's ducc0 peer")
    start = time.perf_counter()
    back = step() if share else a
    seconds = time.perf_counter() - start
    from mpi4py import MPI

    return {
        "step_s": comm.mpi.allreduce(seconds, op=MPI.MAX),
        "threads": threads,
        "version": ducc0.__version__,
        "round_trip_error": round_trip_error(comm, back, a),
    }


def benchmark_spectral(
    comm: Communicator,
    grid: str,
    *,
    levels: int,
    fields: int,
    steps: int,
    transport: str = "auto",
    gpu: bool = False,
    graphs: bool | None = None,
    fft_streams: int | None = None,
    pipeline: int | tuple[int, int] | str = "auto",
    peer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One result row: the dwarf's time per step and split (slowest rank per phase), the Legendre rate against
    the matrix-product rate measured here and its share of it, for the whole Legendre phase and for its matrix
    products alone (``legendre_products_*``: the phase less the moves of their operands), the FFT phase's
    bandwidth (``fft_bytes`` per rank over its time) beside the HBM copy bandwidth on the GPU (None on the
    CPU), and the round-trip error; ``peer`` (``ducc0_peer`` of the same grid and batch) as ``ducc0_*`` entries,
    None where not given. ``transport`` is a transport's name or label (``transports.by_label``); with
    ``pipeline`` chunks the step overlaps the transpositions with the compute (run_spectral), and
    ``exposed_fraction`` is the share of the step that the transpositions add beyond the compute.
    Rates per rank assume the work is shared evenly (wavenumbers in pairs, rows by points)."""
    octahedral = OctahedralGrid(grid)
    r = run_spectral(
        comm, octahedral, levels=levels, fields=fields, steps=steps, transport=by_label(transport), gpu=gpu,
        graphs=graphs, fft_streams=fft_streams, pipeline=pipeline,
    )  # fmt: skip
    r["transport_label"] = transport
    t, batch = r["truncation"], r["batch"]
    xp = np
    if gpu:
        import cupy as xp
    # The ceiling stacks a whole bucket, about (T + 1) / (ranks x buckets) wavenumbers of two parities each, in
    # one call: the chunks a GPU may cut a bucket into (to bound its work arrays) are not the ceiling's concern.
    stack = 2 * max(1, math.ceil((t + 1) / (comm.size * max_buckets(xp))))
    ceiling = matmul_gflops(comm, octahedral, t, batch, xp=xp, stack=stack)
    legendre, fft, products = r["split_s"]["legendre"], r["split_s"]["fft"], r["legendre_products_s"]
    flops = legendre_flops(octahedral, t, batch) / comm.size
    rate = flops / legendre / 1e9 if legendre else None
    products_rate = flops / products / 1e9 if products else None
    hbm = None
    if gpu:
        from .ceilings import hbm_copy_gbps

        hbm = hbm_copy_gbps(comm)
    fft_rate = fft_bytes(octahedral, t, batch) / comm.size / fft / 1e9 if fft else None
    return {
        **r,
        "legendre_GFLOPs_per_rank": rate,
        "matmul_GFLOPs_per_rank": ceiling,
        "legendre_share_of_matmul": rate / ceiling if rate is not None else None,
        "legendre_products_GFLOPs_per_rank": products_rate,
        "legendre_products_share_of_matmul": products_rate / ceiling if products_rate is not None else None,
        "fft_GBps_per_rank": fft_rate,
        "hbm_GBps": hbm,
        "fft_share_of_hbm": fft_rate / hbm if fft_rate is not None and hbm else None,
        "transposition_fraction": r["split_s"]["transposition"] / (r["sequential_step_s"] or r["time_per_step_s"]),
        "exposed_fraction": r["exposed_transposition_s"] / r["time_per_step_s"],
        "ducc0_step_s": peer and peer["step_s"],
        "ducc0_threads_per_rank": peer and peer["threads"],
        "ducc0_version": peer and peer["version"],
        "ducc0_round_trip_error": peer and peer["round_trip_error"],
        "ducc0_over_step": peer and peer["step_s"] / r["time_per_step_s"],
    }


def spectral_case(r: dict[str, Any]) -> str:
    """A row's transport (its label where one was given) and, pipelined, its stages x groups of rows."""
    label = r.get("transport_label") or r["transport"]
    if r.get("pipeline", 1) == 1:
        return label
    stages, groups = r.get("pipeline_shape") or (r["pipeline"], 1)
    return f"{label}, {stages}x{groups}"


def plot_spectral(payload: dict[str, Any], png: Path) -> Path:
    """Each grid's step split into its phases, as shares of the step (slowest rank per phase, so the shares
    may add up to more than 100 %; pipelined, of the step with the stages one after the other), the step time
    written above each bar (pipelined: with the transpositions overlapping the Legendre products)."""
    from .results import machine_title, panels_figure

    rows = payload["results"]
    fig, (ax,) = panels_figure(1)
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for phase in PHASES:  # shares of the step the split was timed in: pipelined, the stages one after the other
        shares = np.array([100 * r["split_s"][phase] / (r.get("sequential_step_s") or r["time_per_step_s"])
                           for r in rows])  # fmt: skip
        ax.bar(x, shares, bottom=bottom, label=phase)
        bottom += shares
    for k, r in enumerate(rows):
        ax.annotate(f"{r['time_per_step_s'] * 1e3:.1f} ms", (k, bottom[k]), ha="center", va="bottom", fontsize=8)
    labels = [f"{r['grid']} T{r['truncation']}\n{spectral_case(r)}, batch {r['batch']}" for r in rows]
    ax.set_xticks(x, labels, fontsize=7)
    ax.set(ylabel="share of the step [%] (inverse + direct)", ylim=(0, 1.4 * max(bottom)))
    ax.legend(fontsize=7, loc="upper left", ncol=3)
    where = "GPU" if any(r.get("gpu") for r in rows) else "CPU"
    machine_title(fig, f"spectral transform ({where})", payload["machine"])
    fig.savefig(png, dpi=110)
    return png
