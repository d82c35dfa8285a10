"""Which shape of ipc's copy kernel hides TCo639's transpositions best? One rank per GPU: the pipelined spectral
dwarf (``run_spectral``, whose transpositions overlap its compute) in every combination given, all in one run: ipc's
copy kernel compiled and launched in each shape (threads per block, units each thread keeps in flight (UNROLL),
blocks, and blocks per SM the registers are budgeted for (MIN_BLOCKS)), and each pipeline (stages of wavenumbers,
or stages x groups of rows: ``8x2``). Until 2026-11-27 the pipelined default held the kernel to 64 blocks of 256
threads (dwarf.PIPELINE_IPC_BLOCKS, now 264) so that the FFTs kept SMs; each of its blocks moved about 3 GB/s on
4 x H100 (2026-11-27), where NCCL's channels move several times that: more bytes in flight per block might reach
the links' rate with fewer SMs. It did not
(``tune-transposition-kernel-gpu-4r-20261127T075325Z``: the transposition's rate followed the blocks, not the
bytes in flight; docs/spectral.md).

    gridcomm run --np 4 -- python3 benchmarks/tune_transposition_kernel.py --out DIR [--shapes 256:1:64:6,...]
        [--pipelines 1x4,8x2] [--grid O640] [--levels 137] [--fields 3] [--steps 3]

Writes DIR/tune-transposition-kernel-gpu-<ranks>r-<time>.json; rank 0 prints one line per shape: the step
overlapped, its split timed phase by phase (Legendre, FFT, transposition) and the transposition's rate out of
each rank (bytes it sends per step over the transposition's time).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.lab.apps.spectral.dwarf import run_spectral
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info

DEFAULT_SHAPES = "256:1:64:6,512:4:32:1,1024:4:32:1,1024:4:16:1,512:8:32:1,512:8:16:1"


def set_shape(threads: int, unroll: int, min_blocks: int) -> None:
    """Compile and launch ipc's copy kernels in this shape from now on (the modules' constants; each shape is
    compiled once, by its options)."""
    from gridcomm.packing import cuda
    from gridcomm.transports import ipc

    cuda.THREADS = ipc.THREADS = threads
    cuda.UNROLL, cuda.BLOCKS_PER_SM = unroll, min_blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="threads:unroll:blocks:min_blocks, comma-separated")
    parser.add_argument("--pipelines", default="8x2", help="pipelines (stages, or stages x groups), comma-separated")
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--levels", type=int, default=137)
    parser.add_argument("--fields", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    from gridcomm.transports import IpcTransport

    comm = Communicator()
    use_local_gpu(comm)
    rows: list[dict[str, Any]] = []
    cases = [
        ([int(v) for v in shape.split(":")], g) for shape in args.shapes.split(",") for g in args.pipelines.split(",")
    ]
    for (threads, unroll, blocks, min_blocks), pipeline in cases:
        set_shape(threads, unroll, min_blocks)
        r = run_spectral(
            comm, args.grid, levels=args.levels, fields=args.fields, steps=args.steps, gpu=True,
            transport=IpcTransport(blocks=blocks), pipeline=pipeline,
        )  # fmt: skip
        split = r["split_s"]
        row = {
            "threads": threads, "unroll": unroll, "blocks": blocks, "min_blocks": min_blocks,
            "pipeline": r["pipeline_shape"],
            "step_s": r["time_per_step_s"], "sequential_step_s": r["sequential_step_s"], "split_s": split,
            "exposed_transposition_s": r["exposed_transposition_s"], "round_trip_error": r["round_trip_error"],
            "joules_per_step": r["joules_per_step"],
        }  # fmt: skip
        rows.append(row)
        if comm.rank == 0:
            print(
                f"threads {threads:5d} unroll {unroll} blocks {blocks:4d} (budget {min_blocks}/SM), "
                f"pipeline {r['pipeline_shape'][0]}x{r['pipeline_shape'][1]}: step "
                f"{1e3 * r['time_per_step_s']:.1f} ms (phase by phase {1e3 * r['sequential_step_s']:.1f}: Legendre "
                f"{1e3 * split['legendre']:.1f}, FFT {1e3 * split['fft']:.1f}, transposition "
                f"{1e3 * split['transposition']:.1f}), exposed {1e3 * r['exposed_transposition_s']:.1f} ms, "
                f"round trip {r['round_trip_error']:.1e}",
                flush=True,
            )
    if comm.rank == 0:
        config = vars(args) | {"out": str(args.out)}
        path = write_results(args.out, "tune-transposition-kernel", machine_info(comm.size, gpus_used=comm.size),
                             config, rows)  # fmt: skip
        print(f"results: {path}")
    comm.close()


if __name__ == "__main__":
    main()
