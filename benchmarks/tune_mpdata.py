"""Tune MPDATA's CUDA kernels on one GPU: each kernel alone in every shape asked for (levels per thread, the
blocks per SM that its register allocation must allow, items per thread: see cuda_kernels.KernelShape), beside
the HBM copy bandwidth, then the whole step (graph replay, energy) with each kernel in its fastest shape and
with the shapes of cuda_kernels.KERNEL_SHAPES, all in one run.

    python benchmarks/tune_mpdata.py --grid O1280 --levels 32 --per-thread 2,4 --min-blocks 2,3,4,5 \
        --items-per-thread 1,4 --out DIR

Fields hold the values of a few steps of the dwarf's test case while the kernels are timed (every kernel reads
only what others write, so repeating one leaves its inputs as they are).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from dataclasses import astuple
from pathlib import Path

from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.grids.mesh import MedianDualMesh
from gridcomm.lab.apps.mpdata import cuda_kernels
from gridcomm.lab.apps.mpdata.cuda_kernels import PHASES, KernelShape
from gridcomm.lab.apps.mpdata.driver import setup_mpdata
from gridcomm.lab.bench.ceilings import hbm_copy_gbps, time_gpu
from gridcomm.lab.bench.mpdata import benchmark_case, kernel_bytes, phase_positions, step_launches
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info


def numbers(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def time_shapes(comm: Communicator, mesh: MedianDualMesh, levels: int, hbm: float, shapes: list[KernelShape],
                kernels: list[str]) -> list[dict]:  # fmt: skip
    """Every kernel in ``kernels`` alone in every shape: seconds (all its launches), bytes, share of HBM."""
    import cupy

    s = setup_mpdata(comm, mesh, levels=levels, alpha=math.pi / 4, xp=cupy, transport="none")
    solver, rows = s.solver, []
    try:
        solver.run(5)
        k, t = solver.kernels, solver.tables
        for phase in kernels:
            keys = step_launches(k, phase, solver.fct)
            nbytes = sum(kernel_bytes(t, phase, phase_positions(t, key), solver.fct) for key in keys)
            for shape in shapes:
                if levels % shape.levels_per_thread:
                    continue
                k.set_shape(phase, shape)
                timing = time_gpu(comm, lambda keys=keys: [k.run_launch(key) for key in keys], samples=5)
                rate = nbytes / timing.median / 1e9
                rows.append({"kernel": phase, "shape": astuple(shape), "time_s": timing.median, "bytes": nbytes,
                             "GBps": rate, "share_of_hbm": rate / hbm})  # fmt: skip
                print(f"{phase:10s} lpt={shape.levels_per_thread} blocks/SM={shape.blocks_per_sm} "
                      f"items={shape.items_per_thread}: {timing.median * 1e3:.3f} ms, "
                      f"{100 * rate / hbm:.0f}% of HBM",
                      flush=True)  # fmt: skip
    finally:
        solver.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grid", default="O1280")
    parser.add_argument("--levels", type=int, default=32)
    parser.add_argument("--per-thread", default="2,4")
    parser.add_argument("--min-blocks", default="2,3,4,5", help="blocks per SM for __launch_bounds__")
    parser.add_argument("--items-per-thread", default="1,4")
    parser.add_argument("--kernels", default=",".join(PHASES))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    comm = Communicator()
    use_local_gpu(comm)
    hbm = hbm_copy_gbps(comm)
    mesh = MedianDualMesh(args.grid)
    shapes = [KernelShape(*v) for v in itertools.product(*map(numbers, (args.per_thread, args.min_blocks,
                                                                          args.items_per_thread)))]  # fmt: skip
    rows = time_shapes(comm, mesh, args.levels, hbm, shapes, args.kernels.split(","))
    fastest = {}
    for phase in args.kernels.split(","):
        best = min((r for r in rows if r["kernel"] == phase), key=lambda r: r["time_s"])
        fastest[phase] = KernelShape(*best["shape"])
        print(f"fastest {phase}: {best['shape']} {best['time_s'] * 1e3:.3f} ms, {100 * best['share_of_hbm']:.0f}%")
    tuned = dict(cuda_kernels.KERNEL_SHAPES)
    steps = []
    for name, table in (("table", tuned), ("fastest", {**tuned, **fastest})):
        cuda_kernels.KERNEL_SHAPES = table  # read when the solver's kernels are built
        row = benchmark_case(comm, mesh, "none", levels=args.levels, hbm=hbm, gpus=1, kernels=True)
        steps.append({"shapes": name, **row})
        kernels = ", ".join(f"{k['kernel']} {100 * k['share_of_hbm']:.0f}%" for k in row["kernels"])
        print(f"step with the {name} shapes: {row['time_per_step_s'] * 1e3:.3f} ms, "
              f"{100 * row['step_share_of_hbm']:.1f}% of HBM {hbm:.0f} GB/s, {row['joules_per_step']:.2f} J; {kernels}",
              flush=True)  # fmt: skip
    cuda_kernels.KERNEL_SHAPES = tuned
    config = {"grid": args.grid, "levels": args.levels, "per_thread": args.per_thread, "min_blocks": args.min_blocks,
              "items_per_thread": args.items_per_thread, "hbm_GBps": hbm}  # fmt: skip
    path = write_results(args.out, "tune-mpdata", machine_info(comm.size, gpus_used=1), config, rows + steps)
    print(json.dumps({"results": str(path)}))


if __name__ == "__main__":
    main()
