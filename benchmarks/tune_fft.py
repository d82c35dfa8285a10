"""Choose how the spectral transform's FFT phase runs on this GPU: the transform's Fourier half with its row
FFTs on 1, 2, 4 and 8 CUDA streams, beside cuFFT alone over the same rows, each timed as CUDA graph replays
on one GPU, with the share of the HBM copy bandwidth that the phase's fewest bytes make.

    python3 benchmarks/tune_fft.py --out DIR [--grid O640] [--batches 31,412] [--per-length]
    python3 benchmarks/tune_fft.py --plot RESULT.json     # a --per-length file drawn again, beside it

Variants (one direction each: inverse = fold + C2R per row, direct = R2C per row + pick):

- ``transform, k streams``: SpectralTransform.fourier_inverse / fourier_direct (apps/spectral/fourier.py);
- ``fold alone`` (in each of FOLD_SHAPES), ``pick alone``: the transform's two launches besides cuFFT;
- ``cufft alone``: one batched cuFFT plan per row length over both rows of that length, from and to
  contiguous scratch, one stream, real transforms of the whole length: what the library's FFT calls alone cost
  in the design before 2026-11-27 (the transform now calls complex transforms of half the length, which
  ``--per-length`` times beside these).

With ``--per-length``: instead, each row length alone (both rows of the length in one call, batch 2 x fields),
by cuFFT (graph replays), by cuFFT's complex transform of half the length over the same bytes (``half_*``: a real
row of even length n is n / 2 complex points, whose complex FFT and one pass of twiddles give the row's half
spectrum; what the transform's fold and pick leave to cuFFT since 2026-11-27) and by a DFT as one matrix product
(cuBLAS, (2 batch, n) x (n, n + 2) and back; calls enqueued from Python, which CuPy cannot capture), with the
length's largest prime factor: which lengths bound the phase, and where a matrix product would beat cuFFT.

Writes DIR/tune-fft-gpu-1r-<time>.json and prints one line per variant and batch. GPU_FFT_STREAMS in
apps/spectral/fourier.py comes from this run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
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
FOLD_SHAPES = ((256, 24, 1), (512, 48, 1), (1024, 96, 4), (512, 48, 4), (512, 24, 4))


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
    with stream:
        work()
        stream.synchronize()
        stream.begin_capture()
        try:
            work()
        finally:  # a failing work must not leave the stream capturing (every later CUDA call would fail)
            graph = stream.end_capture()
    return stream_seconds(lambda: graph.launch(stream), stream, replays)


def stream_seconds(work: Any, stream: Any, replays: int = 5) -> float:
    """Median seconds per call of ``work()`` enqueued on ``stream`` (one run first), by events around each call:
    for work that cannot be captured in a graph (CuPy refuses cuBLAS calls during a capture) it includes the
    launch's host time where that exceeds the GPU's."""
    import cupy

    with stream:
        work()
        stream.synchronize()
        times = []
        for _ in range(replays):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            work()
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


def largest_prime_factor(n: int) -> int:
    """The largest prime dividing ``n`` (n >= 2)."""
    largest, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            largest, n = p, n // p
        p += 1
    return max(largest, n)


def dft_matrices(n: int) -> tuple[Any, Any]:
    """(direct, inverse) real matrices of the length-n DFT: points (n) -> interleaved (re, im) bins (n // 2 + 1)
    and back, unnormalised like cuFFT (the inverse counts each bin but 0 and n / 2 twice, as C2R does)."""
    import cupy

    bins = n // 2 + 1
    angle = 2 * np.pi * (cupy.arange(n)[:, None] * cupy.arange(bins)[None, :] % n) / n  # (n, bins)
    direct = cupy.empty((n, 2 * bins))
    direct[:, 0::2], direct[:, 1::2] = cupy.cos(angle), -cupy.sin(angle)
    weight = cupy.full(bins, 2.0)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0
    inverse = cupy.empty((2 * bins, n))
    inverse[0::2], inverse[1::2] = (weight[:, None] * cupy.cos(angle.T)), -(weight[:, None] * cupy.sin(angle.T))
    return direct, inverse


def per_length(grid: OctahedralGrid, batch: int) -> list[dict[str, Any]]:
    """One row per row length of ``grid`` (``time_length``), then their sums printed."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    rows = [time_length(n, batch, stream) for n in np.unique(grid.nlon).tolist()]
    summarise_lengths(rows)
    return rows


def time_length(n: int, batch: int, stream: Any) -> dict[str, Any]:
    """Seconds of cuFFT and of the DFT as a matrix product, each direction, for both rows of length ``n``
    together (batch 2 x ``batch``), as CUDA graph replays on ``stream``."""
    import cupy
    from cupy.cuda import cufft

    bins, fields = n // 2 + 1, 2 * batch
    points, half = cupy.random.random((fields, n)), cupy.zeros((fields, bins), np.complex128)
    halves, back = half.view(np.float64), cupy.empty((fields, n))  # (fields, 2 bins), (fields, n)

    def cufft_plan(kind: int) -> Any:
        if kind == cufft.CUFFT_D2Z:
            return cufft.PlanNd([n], [n], 1, n, [bins], 1, bins, kind, fields, "C", -1, None)
        return cufft.PlanNd([n], [bins], 1, bins, [n], 1, n, kind, fields, "C", -1, None)

    def prepared(name: str) -> Callable[[], Any]:
        """The work of variant ``name``, its plan or matrix made here (a failure is reported per variant)."""
        if name == "cufft_direct":
            plan = cufft_plan(cufft.CUFFT_D2Z)
            return lambda: plan.fft(points, half, cufft.CUFFT_FORWARD)
        if name == "cufft_inverse":
            plan = cufft_plan(cufft.CUFFT_Z2D)
            return lambda: plan.fft(half, back, cufft.CUFFT_INVERSE)
        if name.startswith("half_"):  # the n real points as n / 2 complex ones, out of place
            pairs = n // 2
            plan = cufft.PlanNd([pairs], [pairs], 1, pairs, [pairs], 1, pairs, cufft.CUFFT_Z2Z, fields, "C", -1, None)
            source, target = points.view(np.complex128), back.view(np.complex128)
            sign = cufft.CUFFT_FORWARD if name == "half_direct" else cufft.CUFFT_INVERSE
            return lambda: plan.fft(source, target, sign)
        direct, inverse = dft_matrices(n)
        if name == "gemm_direct":
            return lambda: cupy.matmul(points, direct, out=halves)
        return lambda: cupy.matmul(halves, inverse, out=back)

    row: dict[str, Any] = {"length": n, "batch": batch, "largest_prime_factor": largest_prime_factor(n)}
    for name in ("cufft_direct", "cufft_inverse", "half_direct", "half_inverse", "gemm_direct", "gemm_inverse"):
        try:
            # cuBLAS cannot be captured through CuPy: the matrix products are timed as enqueued calls
            timer = stream_seconds if name.startswith("gemm") else graph_seconds
            row[name] = timer(prepared(name), stream)
        except Exception as error:  # reported, the other variants still run
            row[name] = None
            row[f"{name}_error"] = f"{type(error).__name__}: {error}"
            print(f"length {n}, {name}: {row[f'{name}_error']}", flush=True)
    return row


def summarise_lengths(rows: list[dict[str, Any]]) -> None:
    """Print the per-length times summed by the lengths' largest prime factor and by length."""

    def total(chosen: list[dict[str, Any]], key: str) -> float:
        return sum(r[key] or 0.0 for r in chosen) * 1e3

    def best(chosen: list[dict[str, Any]], direction: str) -> float:
        pairs = [(r[f"cufft_{direction}"], r[f"gemm_{direction}"]) for r in chosen]
        times = [min((t for t in pair if t is not None), default=0.0) for pair in pairs]
        return sum(times) * 1e3

    groups = {
        "largest prime <= 7": [r for r in rows if r["largest_prime_factor"] <= 7],
        "largest prime 11-127": [r for r in rows if 7 < r["largest_prime_factor"] <= 127],
        "largest prime > 127": [r for r in rows if r["largest_prime_factor"] > 127],
        "length < 256": [r for r in rows if r["length"] < 256],
        "length 256-1023": [r for r in rows if 256 <= r["length"] < 1024],
        "length >= 1024": [r for r in rows if r["length"] >= 1024],
        "every length": rows,
    }
    print(
        f"{'lengths':24s} {'count':>5s}  cuFFT dir/inv (ms)  half-length complex dir/inv (ms)  GEMM dir/inv (ms)"
        "  best of cuFFT and GEMM dir/inv (ms)"
    )
    for name, chosen in groups.items():
        print(
            f"{name:24s} {len(chosen):5d}  {total(chosen, 'cufft_direct'):8.2f} {total(chosen, 'cufft_inverse'):8.2f}"
            f"  {total(chosen, 'half_direct'):8.2f} {total(chosen, 'half_inverse'):8.2f}"
            f"  {total(chosen, 'gemm_direct'):8.2f} {total(chosen, 'gemm_inverse'):8.2f}"
            f"  {best(chosen, 'direct'):8.2f} {best(chosen, 'inverse'):8.2f}",
            flush=True,
        )
    crossover = [
        r["length"] for r in rows if r["gemm_direct"] and r["cufft_direct"] and r["gemm_direct"] < r["cufft_direct"]
    ]
    print(f"lengths where the matrix product beats cuFFT (direct): {len(crossover)}, up to {max(crossover, default=0)}")


def length_gbps(row: dict[str, Any], variant: str) -> float:
    """GB/s of ``variant`` on one row length: its real points and half spectra (both rows, every field) read
    and written once each, over its time."""
    n = row["length"]
    return 2 * row["batch"] * (8 * n + 16 * (n // 2 + 1)) / row[variant] / 1e9


def plot_lengths(rows: list[dict[str, Any]], png: Path, device: str) -> Path:
    """Each row length's cuFFT rate (``length_gbps``) against its length, by its largest prime factor; the
    matrix products' beside them where they were timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = (("largest prime <= 7", 0, 7), ("largest prime 11-127", 8, 127), ("largest prime > 127", 128, 1 << 62))
    fig, ax = plt.subplots(figsize=(9, 5))
    for label, low, high in classes:
        chosen = [r for r in rows if low <= r["largest_prime_factor"] <= high and r.get("cufft_direct")]
        gbps = [length_gbps(r, "cufft_direct") for r in chosen]
        ax.scatter([r["length"] for r in chosen], gbps, s=8, label=f"cuFFT, {label} ({len(chosen)} lengths)")
    timed = [r for r in rows if r.get("gemm_direct")]
    if timed:
        gbps = [length_gbps(r, "gemm_direct") for r in timed]
        ax.scatter([r["length"] for r in timed], gbps, s=4, marker="x", color="grey", label="matrix product")
    ax.set_xlabel("row length [points]")
    ax.set_ylabel("GB/s (points and half spectra, once each)")
    ax.set_title(f"real FFTs of each row length, direct, batch 2 x {rows[0]['batch']}: {device}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def measure(grid: OctahedralGrid, batch: int, hbm: float) -> list[dict[str, Any]]:
    """One row per variant for ``batch`` fields on ``grid``."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    t = grid.N - 1
    values = cupy.random.random((batch, grid.size))
    fourier = cupy.asarray(np.random.default_rng(0).random((batch, t + 1, 2 * grid.N)) * (1 + 1j))
    least = fft_bytes(grid, t, batch) / 2  # one direction
    rows = []
    pools: list[Any] = []  # each variant's, emptied once its transform is gone (batch 412 fills the GPU otherwise)

    def timed(name: str, work: Any) -> None:
        try:
            pool = cupy.cuda.MemoryPool()
            pools.append(pool)
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
        for pool in pools:
            pool.free_all_blocks()
        pools.clear()
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
    parser.add_argument("--per-length", action="store_true", help="each row length alone: cuFFT and a matrix DFT")
    parser.add_argument("--plot", type=Path, help="draw a --per-length result file again (no GPU needed)")
    args = parser.parse_args()
    if args.plot is not None:
        payload = json.loads(args.plot.read_text())
        print(f"plot: {plot_lengths(payload['results'], args.plot.with_suffix('.png'), payload['machine']['device'])}")
        return 0
    comm = Communicator()
    grid = OctahedralGrid(args.grid)
    if args.per_length:
        rows = [row for batch in args.batches.split(",") for row in per_length(grid, int(batch))]
        config = {"grid": args.grid, "batches": args.batches, "per_length": True}
        machine = machine_info(1, gpus_used=1)
        path = write_results(args.out, "tune-fft", machine, config, rows)
        print(f"wrote {path}\nplot: {plot_lengths(rows, path.with_suffix('.png'), machine['device'])}")
        return 0
    hbm = hbm_copy_gbps(comm)
    rows = [row for batch in args.batches.split(",") for row in measure(grid, int(batch), hbm)]
    config = {"grid": args.grid, "batches": args.batches, "hbm_copy_GBps": hbm}
    print(f"wrote {write_results(args.out, 'tune-fft', machine_info(1, gpus_used=1), config, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
