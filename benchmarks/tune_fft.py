"""Choose how the spectral transform's FFT phase runs on this GPU: each way of calling cuFFT over the octahedral
grid's rows, timed as CUDA graph replays on one GPU, beside the HBM copy and the phase's fewest bytes.

    python3 benchmarks/tune_fft.py --out DIR [--grid O640] [--batches 31,412]

Variants (one direction each: inverse = C2R, direct = R2C):

- ``transform``: SpectralTransform.fourier_inverse / fourier_direct as they are (gathers, sums, copies included);
- ``cufft contiguous``: cuFFT alone, one batched plan per row length over both rows of that length, from and to
  contiguous scratch (what the library's own FFT calls cost);
- ``cufft in place``: one plan per row length, executed once per row, reading (direct) or writing (inverse) the
  grid values where they lie (odist = points per field), so no copy of the grid values is needed;
- the last with its rows spread over 4 streams (parallel graph branches).

Writes DIR/tune-fft-gpu-1r-<time>.json and prints one line per variant and batch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from gridcomm.apps.spectral.transform import SpectralTransform
from gridcomm.bench.ceilings import hbm_copy_gbps
from gridcomm.bench.machine import machine_info
from gridcomm.bench.results import write_results
from gridcomm.bench.spectral import fft_bytes
from gridcomm.comm import Communicator
from gridcomm.grids.octahedral import OctahedralGrid


def graph_seconds(work: Any, stream: Any, replays: int = 5) -> float:
    """Median seconds per replay of ``work()`` captured on ``stream`` (one eager run first)."""
    import cupy

    with stream:
        work()
        stream.synchronize()
        stream.begin_capture()
        work()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(replays):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def plan(n: int, kind: str, batch: int, idist: int, odist: int) -> Any:
    """A cuFFT plan of ``batch`` transforms of length n, unit strides, the given distances (elements)."""
    from cupy.cuda import cufft

    fft_type, bins = (cufft.CUFFT_Z2D, n // 2 + 1) if kind == "inverse" else (cufft.CUFFT_D2Z, n // 2 + 1)
    inembed, onembed = ([bins], [n]) if kind == "inverse" else ([n], [bins])
    return cufft.PlanNd([n], inembed, 1, idist, onembed, 1, odist, fft_type, batch, "C", -1, None)


def measure(grid: OctahedralGrid, batch: int, hbm: float) -> list[dict[str, Any]]:
    """One row per variant for ``batch`` fields on ``grid``."""
    import cupy
    from cupy.cuda import cufft

    stream = cupy.cuda.Stream(non_blocking=True)
    lanes = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
    rows_out = []
    transform = SpectralTransform(grid, xp=cupy)
    t = transform.truncation
    groups = transform._row_groups
    points = transform.points
    values = cupy.random.random((batch, points))
    fourier = cupy.asarray(np.random.default_rng(0).random((batch, t + 1, 2 * grid.N)) * (1 + 1j))
    spectra_size = transform._spectra_size
    spectra = cupy.zeros((batch * spectra_size,), np.complex128)  # row blocks of (batch, bins)
    contiguous_in = {g.length: cupy.zeros((batch, len(g.rows), g.length // 2 + 1), np.complex128) for g in groups}
    contiguous_out = {g.length: cupy.zeros((batch, len(g.rows), g.length), np.float64) for g in groups}
    plans: dict[tuple[int, str, bool], Any] = {}  # made on first use, dropped between families of variants

    def plan_of(n: int, kind: str, rows: bool) -> Any:
        """The plan for length n: per row in place (``rows``), or over both rows of n from contiguous scratch."""
        key = (n, kind, rows)
        if key not in plans:
            bins, count = n // 2 + 1, 1 if rows else int(np.count_nonzero(grid.nlon == n))
            grid_distance = points if rows else n
            distances = (bins, grid_distance) if kind == "inverse" else (grid_distance, bins)
            plans[key] = plan(n, kind, batch * count, *distances)
        return plans[key]

    row_starts = np.concatenate([[0], np.cumsum(grid.nlon)])
    blocks = np.concatenate([[0], np.cumsum([batch * (n // 2 + 1) for n in grid.nlon])])

    def contiguous(kind: str) -> None:
        for g in groups:
            p = plan_of(g.length, kind, rows=False)
            a, b = (contiguous_in, contiguous_out) if kind == "inverse" else (contiguous_out, contiguous_in)
            p.fft(a[g.length], b[g.length], cufft.CUFFT_INVERSE if kind == "inverse" else cufft.CUFFT_FORWARD)

    def in_place(kind: str, spread: bool = False) -> None:
        caller = cupy.cuda.get_current_stream()
        if spread:
            fork = cupy.cuda.Event(disable_timing=True)
            fork.record(caller)
            for lane in lanes:
                lane.wait_event(fork)
        k = 0
        for g in groups:
            p = plan_of(g.length, kind, rows=True)
            for r in g.rows:
                v = values[:, row_starts[r] :]
                s = spectra[blocks[r] :]
                with lanes[k % len(lanes)] if spread else caller:
                    if kind == "inverse":
                        p.fft(s, v, cufft.CUFFT_INVERSE)
                    else:
                        p.fft(v, s, cufft.CUFFT_FORWARD)
                k += 1
        if spread:
            for lane in lanes:
                joined = cupy.cuda.Event(disable_timing=True)
                joined.record(lane)
                caller.wait_event(joined)

    variants = {
        "transform inverse": lambda: transform.fourier_inverse(fourier),
        "transform direct": lambda: transform.fourier_direct(values),
        "cufft contiguous inverse": lambda: contiguous("inverse"),
        "cufft contiguous direct": lambda: contiguous("direct"),
        "cufft in place inverse": lambda: in_place("inverse"),
        "cufft in place direct": lambda: in_place("direct"),
        "cufft in place inverse, 4 streams": lambda: in_place("inverse", True),
        "cufft in place direct, 4 streams": lambda: in_place("direct", True),
    }
    least = fft_bytes(grid, t, batch) / 2  # one direction
    for name, work in variants.items():
        if name in ("cufft contiguous inverse", "cufft in place inverse"):
            plans.clear()
            cupy.fft.config.get_plan_cache().clear()
            cupy.get_default_memory_pool().free_all_blocks()
        try:
            pool = cupy.cuda.MemoryPool()
            with cupy.cuda.using_allocator(pool.malloc):
                seconds = graph_seconds(work, stream)
            row = {"batch": batch, "variant": name, "seconds": seconds, "share_of_hbm": least / seconds / 1e9 / hbm}
        except Exception as error:  # a failing variant is reported; the others still run
            row = {"batch": batch, "variant": name, "error": f"{type(error).__name__}: {error}"}
        rows_out.append(row)
        shown = row.get("error") or f"{row['seconds'] * 1e3:8.2f} ms  {100 * row['share_of_hbm']:5.1f} % of HBM"
        print(f"{grid.name} batch {batch:4d}  {name:36s} {shown}", flush=True)
    return rows_out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--batches", default="31,412")
    args = parser.parse_args()
    comm = Communicator()
    grid = OctahedralGrid(args.grid)
    hbm = hbm_copy_gbps(comm)
    rows_out = [row for batch in args.batches.split(",") for row in measure(grid, int(batch), hbm)]
    config = {"grid": args.grid, "batches": args.batches, "hbm_copy_GBps": hbm}
    path = write_results(args.out, "tune-fft", machine_info(1, gpus_used=1), config, rows_out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
