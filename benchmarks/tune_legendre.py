"""Time the spectral transform's Legendre half on this GPU: both directions in each shape of the tensor-core
kernels (``apps/spectral/products.py``), beside the transform's own Legendre half and the FP64 matrix-product
rate of the same run, and check every shape's results against the transform's.

    python3 benchmarks/tune_legendre.py --out DIR [--grid O640] [--batch 412] [--shapes 64x3,128x3,64x3s]

A shape is BMxSTAGES[xMIN_BLOCKS], with a trailing "s" for the m16n8k16 products split into m8n8k4 ones. Writes
DIR/tune-legendre-gpu-1r-<time>.json and prints one line per case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from gridcomm.apps.spectral.dwarf import random_coefficients
from gridcomm.apps.spectral.legendre import legendre_functions
from gridcomm.apps.spectral.products import Shape, TensorCoreLegendre
from gridcomm.apps.spectral.transform import SpectralTransform, max_buckets
from gridcomm.bench.machine import machine_info
from gridcomm.bench.results import write_results
from gridcomm.bench.spectral import legendre_flops, matmul_gflops
from gridcomm.comm import Communicator
from gridcomm.grids.octahedral import OctahedralGrid


def parse_shape(text: str) -> Shape:
    split = text.endswith("s")
    bm, stages, min_blocks = [*text.rstrip("s").split("x"), "1"][:3]
    return Shape(bm=int(bm), stages=int(stages), min_blocks=int(min_blocks), split_mma=split)


def seconds(run, cupy, repeats: int = 7) -> float:
    """Median of ``repeats`` timed calls of ``run`` after one untimed, CUDA events on the current stream."""
    run()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def main() -> None:
    import cupy

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--batch", type=int, default=412)
    parser.add_argument("--shapes", default="64x3,64x3x2,64x2x2,128x3")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    comm = Communicator()
    grid = OctahedralGrid(args.grid)
    transform = SpectralTransform(grid, xp=cupy)
    t, n, batch = transform.truncation, grid.N, args.batch
    flops = legendre_flops(grid, t, batch)  # both directions
    ceiling = matmul_gflops(comm, grid, t, batch, xp=cupy, stack=2 * -(-(t + 1) // max_buckets(cupy)))
    a = cupy.asarray(random_coefficients(t, np.arange(t + 1), batch))
    fourier = transform.legendre_inverse(a)
    coefficients = transform.legendre_direct(fourier)
    reference = seconds(lambda: transform.legendre_direct(transform.legendre_inverse(a, out=fourier)), cupy)
    rows = [{"case": "transform (cuBLAS and moves)", "time_s": reference, "share_of_matmul":
             flops / reference / 1e9 / ceiling}]  # fmt: skip
    print(f"FP64 matrix products: {ceiling:.0f} GFLOP/s; {rows[0]['case']}: {reference * 1e3:.2f} ms, "
          f"{100 * rows[0]['share_of_matmul']:.0f} %", flush=True)  # fmt: skip

    x, sin_theta = np.sin(grid.latitudes[:n]), np.cos(grid.latitudes[:n])
    tables = [legendre_functions(m, t, x, sin_theta=sin_theta) for m in range(t + 1)]
    weights = 2.0 * np.pi * grid.weights[:n]
    offsets = np.concatenate([[0], np.cumsum(t - np.arange(t + 1) + 1)[:-1]])
    for text in args.shapes.split(","):
        shape = parse_shape(text)
        legendre = TensorCoreLegendre(tables, weights, offsets, transform.ncoef, shape)
        out_f = cupy.empty_like(fourier)
        out_a = cupy.empty_like(coefficients)
        legendre.inverse(a, out_f)
        legendre.direct(fourier, out_a)
        error_f = float(cupy.abs(out_f - fourier).max() / cupy.abs(fourier).max())
        error_a = float(cupy.abs(out_a - coefficients).max() / cupy.abs(coefficients).max())
        inverse = seconds(lambda f=legendre.inverse, out=out_f: f(a, out), cupy)
        direct = seconds(lambda f=legendre.direct, out=out_a: f(fourier, out), cupy)
        total = inverse + direct
        row = {"case": text, "shape": vars(shape), "inverse_s": inverse, "direct_s": direct, "time_s": total,
               "share_of_matmul": flops / total / 1e9 / ceiling, "error_inverse": error_f,
               "error_direct": error_a}  # fmt: skip
        rows.append(row)
        print(f"{text:8s}: inverse {inverse * 1e3:.2f} ms, direct {direct * 1e3:.2f} ms, both {total * 1e3:.2f} ms, "
              f"{100 * row['share_of_matmul']:.0f} % of the products' rate; errors {error_f:.1e} / {error_a:.1e}",
              flush=True)  # fmt: skip
        del legendre
    config = {"grid": args.grid, "truncation": t, "batch": batch, "matmul_GFLOPs": ceiling,
              "legendre_GFLOP": flops / 1e9}  # fmt: skip
    print(write_results(args.out, "tune-legendre", machine_info(comm.size, gpus_used=1), config, rows),
          file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
