"""Choose how many buckets the spectral transform's Legendre half cuts its wavenumbers into on this GPU: both
Legendre halves (inverse and direct) of O640 for each bucket limit and batch, timed with CUDA events on one
GPU (eager: CuPy refuses cuBLAS inside a graph capture), beside the FP64 matrix-product rate of the same run.

    python3 benchmarks/tune_buckets.py --out DIR [--grid O640] [--batches 31,412] [--buckets 2,4,8,16]

Writes DIR/tune-buckets-gpu-1r-<time>.json and prints one line per case. MAX_BUCKETS_GPU in
apps/spectral/transform.py comes from this run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from gridcomm.apps.spectral import transform as spectral
from gridcomm.apps.spectral.dwarf import random_coefficients
from gridcomm.bench.machine import machine_info
from gridcomm.bench.results import write_results
from gridcomm.bench.spectral import legendre_flops, matmul_gflops
from gridcomm.comm import Communicator
from gridcomm.grids.octahedral import OctahedralGrid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--batches", default="31,412")
    parser.add_argument("--buckets", default="2,4,8,16")
    args = parser.parse_args()
    import cupy

    comm = Communicator()
    grid = OctahedralGrid(args.grid)
    t = grid.N - 1
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        ceiling = matmul_gflops(comm, grid, t, batch, xp=cupy, stack=2 * ((t + 1) // 4))
        a = cupy.asarray(random_coefficients(t, np.arange(t + 1), batch))
        for buckets in (int(b) for b in args.buckets.split(",")):
            spectral.MAX_BUCKETS_GPU = buckets
            transform = spectral.SpectralTransform(grid, xp=cupy)
            fourier = transform.legendre_inverse(a)
            transform.legendre_direct(fourier)
            times = []
            for _ in range(5):
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                transform.legendre_direct(transform.legendre_inverse(a, out=fourier))
                stop.record()
                stop.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
            seconds = float(np.median(times))
            rate = legendre_flops(grid, t, batch) / seconds / 1e9
            row = {"batch": batch, "buckets": buckets, "seconds": seconds, "GFLOPs": rate, "matmul_GFLOPs": ceiling}
            rows.append(row)
            print(f"{grid.name} batch {batch:4d} buckets {buckets:3d}: {seconds * 1e3:8.2f} ms  "
                  f"{rate:8.0f} GFLOP/s ({100 * rate / ceiling:4.1f} % of {ceiling:.0f})", flush=True)  # fmt: skip
            del transform, fourier
            cupy.get_default_memory_pool().free_all_blocks()
    config = {"grid": args.grid, "batches": args.batches, "buckets": args.buckets}
    print(f"wrote {write_results(args.out, 'tune-buckets', machine_info(1, gpus_used=1), config, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
