"""Does splitting the spectral dwarf's batch into pipelines that run side by side pay on this GPU? One rank,
one GPU: the fields are cut into P equal parts, each a DistributedTransform of its own (own stream, own CUDA
graphs) driven by its own host thread, so that one part's cuBLAS products can fill the SMs that another part's
small row FFTs leave idle. Each P is timed twice: parts one after another on one thread (what the smaller
batch alone costs), and parts side by side on P threads.

    python3 benchmarks/tune_pipeline.py --out DIR [--grid O640] [--levels 137] [--fields 3] [--pipelines 1,2,4]

Writes DIR/tune-pipeline-gpu-1r-<time>.json and prints one line per case.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path

import numpy as np

from gridcomm.comm import Communicator
from gridcomm.grids.octahedral import OctahedralGrid
from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info

STEPS = 10


def run_steps(transform: DistributedTransform, a: object, steps: int) -> None:
    """``steps`` of inverse then direct transforms of ``a`` (on this thread, made current on GPU 0)."""
    import cupy

    cupy.cuda.Device(0).use()
    for _ in range(steps):
        transform.direct(transform.inverse(a))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--levels", type=int, default=137)
    parser.add_argument("--fields", type=int, default=3)
    parser.add_argument("--pipelines", default="1,2,4")
    args = parser.parse_args()
    import cupy

    comm = Communicator()
    grid = OctahedralGrid(args.grid)
    batch = args.fields * args.levels + 1
    rows = []
    for parts in (int(p) for p in args.pipelines.split(",")):
        sizes = [len(s) for s in np.array_split(np.arange(batch), parts)]
        transforms = [DistributedTransform(comm, grid, batch=b, xp=cupy, graphs=True) for b in sizes]
        inputs = [cupy.asarray(random_coefficients(t.truncation, t.wavenumbers, t.batch)) for t in transforms]

        for t, a in zip(transforms, inputs, strict=True):
            run_steps(t, a, 1)  # warm-up: plans, captures, work arrays
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for t, a in zip(transforms, inputs, strict=True):
            run_steps(t, a, STEPS)
        cupy.cuda.Device().synchronize()
        serial = (time.perf_counter() - start) / STEPS
        with concurrent.futures.ThreadPoolExecutor(parts) as pool:
            start = time.perf_counter()
            list(pool.map(run_steps, transforms, inputs, [STEPS] * parts))
            cupy.cuda.Device().synchronize()
            side_by_side = (time.perf_counter() - start) / STEPS
        row = {"pipelines": parts, "batches": sizes, "serial_s": serial, "side_by_side_s": side_by_side}
        rows.append(row)
        print(f"{grid.name} batch {batch} in {parts} parts: one after another {serial * 1e3:7.2f} ms per step, "
              f"side by side {side_by_side * 1e3:7.2f} ms", flush=True)  # fmt: skip
        for t in transforms:
            t.close()
        del transforms, inputs
        cupy.get_default_memory_pool().free_all_blocks()
    config = {"grid": args.grid, "levels": args.levels, "fields": args.fields, "steps": STEPS}
    print(f"wrote {write_results(args.out, 'tune-pipeline', machine_info(1, gpus_used=1), config, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
