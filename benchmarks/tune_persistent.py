"""Tune the stencil2d persistent kernel (jacobi2d_nvshmem.cu) on every rank: its block shape and which of its two
builds runs (1: one resident block per SM, tiles in a fixed order; 2: two, tiles from a counter), timed beside the
step with no exchange and the nvshmem mode, each checked bitwise against the serial reference.

    mpiexec -n 4 python benchmarks/tune_persistent.py --sizes 4096,8192 --blocks 32x32,128x8 --builds 1,2 --out DIR

`--profile` builds the kernel with GRIDCOMM_PERSISTENT_PROFILE and prints, per case, where a step's time goes on
each block (edge points, inner tiles, the grid-wide sync; every phase ends at a block barrier, so a profiled
step is not the library's step). Needs NVSHMEM (gridcomm[nvshmem]) and one GPU per rank.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from gridcomm import shmem
from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.lab.apps.stencil2d import Stencil2D, compare, reference_run, shmem_kernel
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.bench.stencil2d import time_steps
from gridcomm.lab.measure.machine import machine_info

CHECK_STEPS = 6  # steps of the bitwise check: both parities, and runs of several steps per launch
PROFILE_STEPS = 20  # steps of the profiled launch
PROFILE_SLOTS = ("edges_ns", "tiles_ns", "sync_ns", "polls", "late_points")  # jacobi2d_nvshmem.cu's ProfileSlot


def use_case(build: int, block: tuple[int, int]) -> None:
    """Set what the next Stencil2D's persistent kernel runs: its build (1 or 2 blocks per SM) and block shape."""
    shmem_kernel.TWO_BLOCKS = build == 2
    shmem_kernel.PERSISTENT_BLOCK = block


def profile(comm: Communicator, sim: Stencil2D) -> dict[str, float]:
    """Where a step of ``sim``'s profiled persistent kernel goes, per step: each phase's mean and largest time over
    the blocks (s), and the polls and late edge points of all blocks (collective; rank 0 prints every rank's)."""
    import cupy

    module = shmem.load_module(shmem_kernel.SOURCE, comm, shmem_kernel.OPTIONS)
    blocks = sim._shmem.persistent_blocks
    shape = (1024, len(PROFILE_SLOTS))  # jacobi2d_nvshmem.cu's PROFILE_BLOCKS x PROFILE_SLOTS
    address = module.get_global_var("gridcomm_persistent_profile")
    memory = cupy.cuda.UnownedMemory(address, 8 * shape[0] * shape[1], module)
    table = cupy.ndarray(shape, cupy.uint64, cupy.cuda.MemoryPointer(memory, 0))
    cupy.cuda.Device().synchronize()
    table.fill(0)
    sim.step(PROFILE_STEPS)
    cupy.cuda.Device().synchronize()
    per_step = cupy.asnumpy(table[:blocks]).astype(np.float64) / PROFILE_STEPS
    found = {}
    for k, name in enumerate(PROFILE_SLOTS):
        column = per_step[:, k] * (1e-9 if name.endswith("_ns") else 1)
        key = name.removesuffix("_ns")
        if name.endswith("_ns"):
            found[f"{key}_mean_s"], found[f"{key}_max_s"] = float(column.mean()), float(column.max())
            found[f"{key}_slowest_block"] = int(column.argmax())
        else:
            found[key] = float(column.sum())
    every = comm.mpi.gather(found, root=0)
    if comm.rank == 0:
        for rank, f in enumerate(every):
            phases = ", ".join(
                f"{key} {f[key + '_mean_s'] * 1e6:.1f} mean / {f[key + '_max_s'] * 1e6:.1f} max "
                f"(block {f[key + '_slowest_block']})"
                for key in ("edges", "tiles", "sync")
            )
            print(f"  rank {rank} per step: {phases} us; polls {f['polls']:.0f}, late points {f['late_points']:.0f}")
    return found


def checked(comm: Communicator, n: int) -> bool:
    """A persistent run of CHECK_STEPS steps (two launches) bitwise equal to the serial reference (collective)."""
    with Stencil2D(comm, n, np.float64, "cupy", "persistent") as sim:
        sim.step(CHECK_STEPS - 1)
        sim.step(1)
        field = sim.field()
        equal = compare(field, reference_run(sim.global_shape, CHECK_STEPS))[0] if comm.rank == 0 else None
    return bool(comm.mpi.bcast(equal, root=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="4096,8192", help="points per rank side")
    parser.add_argument("--blocks", default="32x32,64x16,128x8,256x4", help="persistent blocks, COLSxROWS")
    parser.add_argument("--builds", default="1,2", help="the kernel's builds: resident blocks per SM")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="time each phase of a step per block")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    comm = Communicator()
    use_local_gpu(comm)
    sizes = [int(x) for x in args.sizes.split(",")]
    blocks = [tuple(int(x) for x in b.split("x")) for b in args.blocks.split(",")]
    kept = shmem_kernel.OPTIONS, shmem_kernel.TWO_BLOCKS, shmem_kernel.PERSISTENT_BLOCK
    if args.profile:
        shmem_kernel.OPTIONS = (*shmem_kernel.OPTIONS, "-DGRIDCOMM_PERSISTENT_PROFILE")
    builds = [int(x) for x in args.builds.split(",")]
    rows = []
    for n in sizes:
        references = {}
        for mode in ("traditional", "nvshmem"):  # the step with no exchange, and the nvshmem mode's
            with Stencil2D(comm, n, np.float64, "cupy", mode, exchange=mode != "traditional") as sim:
                references[mode] = time_steps(sim, args.samples)["median_s"]
        for build, block in itertools.product(builds, blocks):
            use_case(build, block)
            with Stencil2D(comm, n, np.float64, "cupy", "persistent") as sim:
                timing = time_steps(sim, args.samples)
                grid = sim._shmem.persistent_blocks
                phases = profile(comm, sim) if args.profile else {}
            t, ceiling = timing["median_s"], references["traditional"]
            row = {"n": n, "build": build, "block": list(block), "grid": grid, "time_per_step_s": t,
                   "min_s": timing["min_s"], "no_exchange_s": ceiling, "nvshmem_s": references["nvshmem"],
                   "over_no_exchange": t / ceiling, "bitwise_equal": checked(comm, min(n, 256)),
                   "profile": phases}  # fmt: skip
            rows.append(row)
            if comm.rank == 0:
                print(
                    f"n={n} build {build} block {block[0]}x{block[1]} grid {grid}: {t * 1e6:.1f} us, "
                    f"{row['over_no_exchange']:.3f}x no exchange ({ceiling * 1e6:.1f} us), "
                    f"nvshmem {references['nvshmem'] * 1e6:.1f} us, bitwise {row['bitwise_equal']}",
                    flush=True,
                )
    shmem_kernel.OPTIONS, shmem_kernel.TWO_BLOCKS, shmem_kernel.PERSISTENT_BLOCK = kept
    if comm.rank == 0:
        config = {"sizes": sizes, "blocks": [list(b) for b in blocks], "builds": builds,
                  "samples": args.samples, "dtype": "float64", "profile": args.profile}  # fmt: skip
        path = write_results(args.out, "tune-persistent", machine_info(comm.size, gpus_used=comm.size), config, rows)
        print(f"results: {path}")


if __name__ == "__main__":
    main()
