"""Choose how the spectral transform's FFT phase runs on this GPU: the transform's Fourier half with its row
FFTs on 1, 2, 4 and 8 CUDA streams, beside cuFFT alone over the same rows, each timed as CUDA graph replays
on one GPU, with the share of the HBM copy bandwidth that the phase's fewest bytes make.

    python3 benchmarks/tune_fft.py --out DIR [--grid O640] [--batches 31,412]

Variants (one direction each: inverse = fold + C2R per row, direct = R2C per row + pick):

- ``transform, k streams``: SpectralTransform.fourier_inverse / fourier_direct (apps/spectral/fourier.py);
- ``fold alone`` (in each of FOLD_SHAPES), ``pick alone``: the transform's two launches besides cuFFT;
- ``cufft alone``: one batched cuFFT plan per row length over both rows of that length, from and to
  contiguous scratch, one stream: what the library's FFT calls alone cost.

Writes DIR/tune-fft-gpu-1r-<time>.json and prints one line per variant and batch. GPU_FFT_STREAMS in
apps/spectral/fourier.py comes from this run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gridcomm.comm import Communicator
from gridcomm.grids.octahedral import OctahedralGrid
from gridcomm.lab.apps.spectral import fourier as fourier_half
from gridcomm.lab.apps.spectral.transform import SpectralTransform
from gridcomm.lab.bench.ceilings import hbm_copy_gbps
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.bench.spectral import fft_bytes
from gridcomm.lab.measure.machine import machine_info

STREAMS = (1, 2, 4, 8)
#: The fold launch's shapes timed alone: (threads per block, shared memory per block [KiB], fields per block).
FOLD_SHAPES = ((512, 48, 1), (1024, 96, 4), (512, 48, 4), (256, 24, 1), (512, 24, 4))


@contextlib.contextmanager
def fold_shape(threads: int, kib: int, fields: int) -> Iterator[None]:
    """The fold launched in this shape while inside (fourier.py's FOLD_* constants)."""
    names = ("FOLD_THREADS", "FOLD_SHARED_BYTES", "FOLD_BATCH_PER_BLOCK")
    kept = [getattr(fourier_half, name) for name in names]
    for name, value in zip(names, (threads, kib * 1024, fields), strict=True):
        setattr(fourier_half, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, kept, strict=True):
            setattr(fourier_half, name, value)


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


def cufft_alone(grid: OctahedralGrid, batch: int) -> dict[str, Any]:
    """inverse / direct: cuFFT over every row length, both rows of a length in one plan, contiguous scratch."""
    import cupy
    from cupy.cuda import cufft

    lengths = np.unique(grid.nlon)
    half = {n: cupy.zeros((batch * 2, n // 2 + 1), np.complex128) for n in lengths}
    full = {n: cupy.zeros((batch * 2, n), np.float64) for n in lengths}
    plans = {}
    for n in lengths:
        bins = n // 2 + 1
        plans[n, "inverse"] = cufft.PlanNd([n], [bins], 1, bins, [n], 1, n, cufft.CUFFT_Z2D, 2 * batch, "C", -1, None)
        plans[n, "direct"] = cufft.PlanNd([n], [n], 1, n, [bins], 1, bins, cufft.CUFFT_D2Z, 2 * batch, "C", -1, None)

    def inverse() -> None:
        for n in lengths:
            plans[n, "inverse"].fft(half[n], full[n], cufft.CUFFT_INVERSE)

    def direct() -> None:
        for n in lengths:
            plans[n, "direct"].fft(full[n], half[n], cufft.CUFFT_FORWARD)

    return {"inverse": inverse, "direct": direct}


def measure(grid: OctahedralGrid, batch: int, hbm: float) -> list[dict[str, Any]]:
    """One row per variant for ``batch`` fields on ``grid``."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    t = grid.N - 1
    values = cupy.random.random((batch, grid.size))
    fourier = cupy.asarray(np.random.default_rng(0).random((batch, t + 1, 2 * grid.N)) * (1 + 1j))
    least = fft_bytes(grid, t, batch) / 2  # one direction
    rows = []

    def timed(name: str, work: Any) -> None:
        try:
            pool = cupy.cuda.MemoryPool()
            with cupy.cuda.using_allocator(pool.malloc):
                seconds = graph_seconds(work, stream)
            row = {"batch": batch, "variant": name, "seconds": seconds, "share_of_hbm": least / seconds / 1e9 / hbm}
        except Exception as error:  # a failing variant is reported; the others still run
            row = {"batch": batch, "variant": name, "error": f"{type(error).__name__}: {error}"}
        rows.append(row)
        shown = row.get("error") or f"{row['seconds'] * 1e3:8.2f} ms  {100 * row['share_of_hbm']:5.1f} % of HBM"
        print(f"{grid.name} batch {batch:4d}  {name:36s} {shown}", flush=True)

    for k in STREAMS:  # one transform at a time: each holds its plans and work arrays
        transform = SpectralTransform(grid, xp=cupy, fft_streams=k)
        timed(f"transform, {k} streams, inverse", lambda tr=transform: tr.fourier_inverse(fourier))
        timed(f"transform, {k} streams, direct", lambda tr=transform: tr.fourier_direct(values))
        if k == 1:  # the fold and the pick launches alone (one each per direction)
            ffts, plan = transform._row_ffts, transform._fourier_plan(np.arange(t + 1))
            spectra = cupy.empty((batch, ffts.rows.bins), np.complex128)
            out = cupy.empty(fourier.shape, np.complex128)
            for threads, kib, fields in FOLD_SHAPES:
                with fold_shape(threads, kib, fields):
                    shape = f"{threads} threads, {kib} KiB, {fields} field(s) per block"
                    timed(f"fold alone, {shape}", functools.partial(ffts._fold, fourier, plan, spectra))
            timed("pick alone", functools.partial(ffts._pick, spectra, plan, out))
        del transform
        cupy.get_default_memory_pool().free_all_blocks()
    alone = cufft_alone(grid, batch)
    timed("cufft alone, inverse", alone["inverse"])
    timed("cufft alone, direct", alone["direct"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--batches", default="31,412")
    args = parser.parse_args()
    comm = Communicator()
    grid = OctahedralGrid(args.grid)
    hbm = hbm_copy_gbps(comm)
    rows = [row for batch in args.batches.split(",") for row in measure(grid, int(batch), hbm)]
    config = {"grid": args.grid, "batches": args.batches, "hbm_copy_GBps": hbm}
    print(f"wrote {write_results(args.out, 'tune-fft', machine_info(1, gpus_used=1), config, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
