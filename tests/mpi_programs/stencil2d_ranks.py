"""The 2-D Jacobi dwarf on every rank of COMM_WORLD against the serial NumPy run on rank 0: the gathered result
must be bitwise equal. Prints "STENCIL2D-RANKS OK <ranks>" on rank 0; exits non-zero on any mismatch.

Usage: mpiexec -n N python tests/mpi_programs/stencil2d_ranks.py [--gpu] [--modes MODE,...]

On the CPU: modes traditional and overlapped, float64 and float32, blocks from 1 x 1 to 9 x 9 points, ghost widths 1
and 2. With --gpu (one rank per GPU, CuPy): the three exchanger modes over every GPU transport that fits the mode (graph
mode needs ipc or nccl, and must refuse staged with a clear error), and where gridcomm[nvshmem] is installed the
nvshmem and persistent modes.
"""

from __future__ import annotations

import numpy as np
from harness import run_program

import gridcomm
import gridcomm.shmem
from gridcomm.lab.apps.stencil2d import Stencil2D, StencilError, compare, reference_run, run_stencil2d

CPU_CASES = [  # (mode, n, steps, dtype, halo)
    (mode, n, steps, dtype, halo)
    for mode in ("traditional", "overlapped")
    for n, steps, dtype, halo in (
        (9, 11, "float64", 1),
        (6, 8, "float32", 1),
        (5, 7, "float64", 2),
        (1, 3, "float64", 1),
    )
]
GPU_CASES = [  # (mode, transport, n, steps, dtype, two): two, the persistent kernel built for 2 blocks per SM
    (mode, transport, n, steps, dtype, False)
    for transport in ("auto", "staged", "nccl", "ipc")
    for mode in ("traditional", "overlapped", "graph")
    for n, steps, dtype in ((33, 9, "float64"), (40, 6, "float32"))
]
if gridcomm.shmem.unavailable_reason() is None:  # gridcomm[nvshmem]: the GPU-initiated modes (no transport)
    GPU_CASES += [
        (mode, "auto", n, steps, dtype, two)
        for mode, two in (("nvshmem", False), ("persistent", False), ("persistent", True))
        for n, steps, dtype in ((33, 9, "float64"), (40, 6, "float32"), (1, 3, "float64"), (130, 5, "float64"))
    ]


def control_differs(comm: gridcomm.Communicator) -> bool:
    """Negative control: the same run with halos never exchanged must differ from the serial run."""
    with Stencil2D(comm, 8, "float64", np, "traditional", exchange=False) as sim:
        sim.step(5)
        result = sim.field()
        shape = sim.global_shape
    equal = compare(result, reference_run(shape, 5))[0] if comm.rank == 0 else None
    return not comm.mpi.bcast(equal, root=0)


def main(argv: list[str]) -> int:
    gpu = "--gpu" in argv
    # --modes a,b keeps those modes (e.g. the NVSHMEM ones on ranks sharing a GPU, where NCCL refuses to run).
    kept = argv[argv.index("--modes") + 1].split(",") if "--modes" in argv else None
    comm = gridcomm.Communicator()
    problems = []
    if gpu:
        import cupy

        from gridcomm.lab.apps.stencil2d import shmem_kernel

        for mode, transport, n, steps, dtype, two in GPU_CASES:
            if kept is not None and mode not in kept:
                continue
            shmem_kernel.TWO_BLOCKS = True if two else None  # which build of the kernel runs
            what = f"GPU {mode}{' (2 blocks per SM)' if two else ''}/{transport} n={n} steps={steps} {dtype}"
            if mode == "graph" and transport == "staged":
                try:
                    run_stencil2d(comm, n, steps, mode, cupy, dtype=dtype, transport=transport)
                except StencilError as error:
                    if "ipc" not in str(error) or "nccl" not in str(error):
                        problems.append(f"{what}: unclear error: {error}")
                else:
                    problems.append(f"{what}: graph mode accepted a transport that needs the host")
                continue
            r = run_stencil2d(comm, n, steps, mode, cupy, dtype=dtype, transport=transport, check=True)
            if not r["bitwise_equal"]:
                problems.append(f"{what}: max |diff| {r['max_abs_diff']:.3e}")
    else:
        for mode, n, steps, dtype, halo in CPU_CASES:
            r = run_stencil2d(comm, n, steps, mode, np, dtype=dtype, halo=halo, check=True)
            if not r["bitwise_equal"]:
                problems.append(f"CPU {mode} n={n} steps={steps} {dtype} halo={halo}: max |diff| {r['max_abs_diff']}")
        if comm.size > 1 and not control_differs(comm):
            problems.append("without its halo exchange the run still matched the serial one: the check sees nothing")
    if comm.rank == 0:
        for p in problems:
            print(f"STENCIL2D-RANKS MISMATCH ranks={comm.size} {p}", flush=True)
        if not problems:
            print(f"STENCIL2D-RANKS OK {comm.size}", flush=True)
    failures = comm.mpi.bcast(len(problems), root=0)
    return 1 if failures else 0


if __name__ == "__main__":
    run_program(main)
