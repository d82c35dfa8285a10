"""Tune MPDATA's CUDA kernels on one GPU: levels per thread (1, 2, 4), the blocks per SM that the register
allocation must allow (__launch_bounds__; 1 leaves it to the compiler) and the items per thread (more than 1:
each thread fetches its next item's table row ahead) at several level counts, the step with no exchange (graph
replay) and every kernel alone beside the HBM copy bandwidth, all in one run.

    python benchmarks/tune_mpdata.py --grid O1280 --levels 32 --per-thread 1,2 --min-blocks 0,1,5,6 \
        --items-per-thread 0,1,4 --out DIR

--min-blocks 0 and --items-per-thread 0 keep each kernel's entry in gridcomm.apps.mpdata.cuda_kernels
(KERNEL_SHAPES); any other value is used for every kernel.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gridcomm.apps.mpdata import cuda_kernels
from gridcomm.bench.ceilings import hbm_copy_gbps
from gridcomm.bench.machine import machine_info
from gridcomm.bench.mpdata import benchmark_case
from gridcomm.bench.results import write_results
from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.grids.mesh import MedianDualMesh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grid", default="O1280")
    parser.add_argument("--levels", default="32,128")
    parser.add_argument("--per-thread", default="1,2,4")
    parser.add_argument("--min-blocks", default="0", help="blocks per SM for __launch_bounds__ (0: the table)")
    parser.add_argument("--items-per-thread", default="0", help="items each thread computes (0: the default)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    comm = Communicator()
    use_local_gpu(comm)
    hbm = hbm_copy_gbps(comm)
    mesh = MedianDualMesh(args.grid)
    rows = []
    variants = [
        (int(levels), int(lpt), int(blocks), int(items))
        for levels in args.levels.split(",")
        for lpt in args.per_thread.split(",")
        for blocks in args.min_blocks.split(",")
        for items in args.items_per_thread.split(",")
        if int(levels) % int(lpt) == 0
    ]
    tuned = dict(cuda_kernels.KERNEL_SHAPES)
    for levels, lpt, blocks, items in variants:
        # read when the kernels are compiled (each option set is compiled and cached once) and launched
        cuda_kernels.KERNEL_SHAPES = tuned
        shapes = {(lpt, p): cuda_kernels.kernel_shape(lpt, p) for p in cuda_kernels.PHASES}
        cuda_kernels.KERNEL_SHAPES = {key: (blocks or b, items or i) for key, (b, i) in shapes.items()}
        options = {"levels": levels, "hbm": hbm, "gpus": 1, "kernels": True, "levels_per_thread": lpt}
        row = {**benchmark_case(comm, mesh, "none", **options), "min_blocks_per_sm": blocks, "items_per_thread": items}
        rows.append(row)
        kernels = ", ".join(f"{k['kernel']} {100 * k['share_of_hbm']:.0f}%" for k in row["kernels"])
        print(
            f"{args.grid} L={levels} lpt={lpt} min_blocks={blocks} items={items}: "
            f"step {row['time_per_step_s'] * 1e3:.3f} ms, "
            f"{100 * row['step_share_of_hbm']:.1f}% of HBM {hbm:.0f} GB/s, {row['joules_per_step']} J; {kernels}",
            flush=True,
        )
    config = {"grid": args.grid, "levels": args.levels, "per_thread": args.per_thread, "min_blocks": args.min_blocks,
              "items_per_thread": args.items_per_thread}  # fmt: skip
    path = write_results(args.out, "tune-mpdata", machine_info(comm.size, gpus_used=1), config, rows)
    print(json.dumps({"results": str(path)}))


if __name__ == "__main__":
    main()
