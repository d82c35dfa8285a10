"""Choose how the spectral transform's Legendre half cuts its wavenumbers on this GPU: both Legendre halves
(inverse and direct) of O640 for each bucket limit (padding) and product size per call (chunks), at each batch,
timed with CUDA events on one GPU (eager: CuPy refuses cuBLAS inside a graph capture), beside the FP64
matrix-product rate of the same run; and, per case, the products alone (the moves around them skipped), which
says how much of the phase the moves cost. ``--ranks``: also the share of one rank of a distributed transform
over that many ranks (its wavenumbers, ``wavenumber_sets``), each on this one GPU: what a rank of a multi-GPU run
does in its Legendre phase, whose products are smaller; ``--blocked``: such a share also with its Fourier
coefficients in the blocked layout the dwarf keeps (a block of rows per rank, ``operands.RowLayout``) beside the
plain (batch, m, 2N) array. Launched on several ranks (one per GPU), every rank times the same cases on its
own GPU at the same time, each round trip started together: what four GPUs' Legendre phases cost when they run at
once (power, clocks, the host), against one GPU alone; the results give the slowest rank's and the fastest's.

    python3 benchmarks/tune_buckets.py --out DIR [--grid O640] [--batches 31,412] [--buckets 4,16,64]
                                       [--product-mib 16,64,256,4096] [--ranks 1,4] [--blocked]

Writes DIR/tune-buckets-gpu-1r-<time>.json and prints one line per case. MAX_BUCKETS_GPU and GPU_PRODUCT_BYTES in
apps/spectral/transform.py come from this run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.grids.octahedral import OctahedralGrid
from gridcomm.lab.apps.spectral import operands
from gridcomm.lab.apps.spectral import transform as spectral
from gridcomm.lab.apps.spectral.distribution import row_shares, wavenumber_sets
from gridcomm.lab.apps.spectral.dwarf import random_coefficients
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.bench.spectral import legendre_flops, matmul_gflops
from gridcomm.lab.measure.machine import machine_info

MOVES = ("gather", "scatter", "unfold", "fold")


@contextlib.contextmanager
def products_only() -> Iterator[None]:
    """The transform's moves replaced by nothing while inside (its results are then meaningless)."""
    kept = {name: getattr(operands, name) for name in MOVES}
    for name in MOVES:
        setattr(operands, name, lambda *args: None)
    try:
        yield
    finally:
        for name, move in kept.items():
            setattr(operands, name, move)


def seconds_per_round_trip(
    comm: Communicator,
    transform: spectral.SpectralTransform,
    a: object,
    cupy: object,
    layout: operands.RowLayout | None = None,
) -> list[float]:
    """Median of 5 timed Legendre round trips (inverse then direct) after one untimed, the Fourier coefficients
    in ``layout`` (None: the plain array), on every rank: each round trip starts on all ranks together (a
    barrier after the device is idle). Returns every rank's median [s], by rank."""
    fourier = transform.legendre_inverse(a, layout=layout)
    transform.legendre_direct(fourier, layout=layout)
    times = []
    for _ in range(5):
        cupy.cuda.get_current_stream().synchronize()
        comm.mpi.Barrier()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        transform.legendre_direct(transform.legendre_inverse(a, out=fourier, layout=layout), layout=layout)
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return [float(t) for t in comm.mpi.allgather(float(np.median(times)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--batches", default="31,412")
    parser.add_argument("--buckets", default="4,16,64")
    parser.add_argument("--product-mib", default="16,64,256,4096")
    parser.add_argument("--ranks", default="1", help="ranks whose first rank's share is timed, comma-separated")
    parser.add_argument("--blocked", action="store_true", help="also the dwarf's layout, a block of rows per rank")
    args = parser.parse_args()
    import cupy

    comm = Communicator()
    if comm.size > 1:
        use_local_gpu(comm)
    grid = OctahedralGrid(args.grid)
    t = grid.N - 1
    rows = []
    batches = [int(b) for b in args.batches.split(",")]
    ceilings = {
        b: matmul_gflops(comm, grid, t, b, xp=cupy, stack=2 * ((t + 1) // spectral.MAX_BUCKETS_GPU)) for b in batches
    }
    cases = [(int(r), int(b)) for r in args.ranks.split(",") for b in args.buckets.split(",")]
    for ranks, buckets in cases:
        spectral.MAX_BUCKETS_GPU = buckets
        ms = wavenumber_sets(t, ranks)[0]
        transform = spectral.SpectralTransform(grid, wavenumbers=ms, xp=cupy)
        blocks = None
        if args.blocked and ranks > 1:  # the dwarf's blocks: per rank
            blocks = row_shares(grid.nlon, ranks)
        for batch in batches:
            a = cupy.asarray(random_coefficients(t, ms, batch))
            layouts = {"plain": None}
            if blocks is not None:
                layouts["blocked"] = operands.RowLayout.blocked(batch, len(ms), blocks)
            for mib, (kind, layout) in ((int(m), k) for m in args.product_mib.split(",") for k in layouts.items()):
                spectral.GPU_PRODUCT_BYTES = mib * 2**20
                each = seconds_per_round_trip(comm, transform, a, cupy, layout)
                with products_only():
                    products_each = seconds_per_round_trip(comm, transform, a, cupy, layout)
                seconds, products = max(each), max(products_each)  # the slowest GPU's
                rate, ceiling = legendre_flops(grid, t, batch) / ranks / seconds / 1e9, ceilings[batch]
                row = {
                    "ranks": ranks, "layout": kind, "batch": batch, "buckets": buckets, "product_MiB": mib,
                    "seconds": seconds, "products_only_s": products, "GFLOPs": rate, "matmul_GFLOPs": ceiling,
                    "gpus_at_once": comm.size, "seconds_each": each, "products_only_s_each": products_each,
                }  # fmt: skip
                rows.append(row)
                if comm.rank == 0:
                    print(f"{grid.name} 1/{ranks} ({kind}) batch {batch:4d} buckets {buckets:3d} product {mib:5d} "
                          f"MiB, {comm.size} GPU(s) at once: {seconds * 1e3:8.2f} ms (fastest {min(each) * 1e3:.2f})"
                          f" (products alone {products * 1e3:7.2f} ms)  {rate:8.0f} GFLOP/s "
                          f"({100 * rate / ceiling:4.1f} % of {ceiling:.0f})", flush=True)  # fmt: skip
            del a
            transform._scratch_arrays.clear()
            cupy.get_default_memory_pool().free_all_blocks()
        del transform
    config = {"grid": args.grid, "batches": args.batches, "buckets": args.buckets, "product_mib": args.product_mib,
              "ranks": args.ranks, "blocked": args.blocked}  # fmt: skip
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=comm.size)
        print(f"wrote {write_results(args.out, 'tune-buckets', machine, config, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
