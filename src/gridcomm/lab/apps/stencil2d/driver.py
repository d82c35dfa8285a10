"""Run the 2-D Jacobi dwarf on the ranks of a communicator, time it, and check it against the serial run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ....transports import Transport
from .config import check_steps
from .reference import compare, reference_run
from .solver import Stencil2D


def run_stencil2d(
    comm: Any = None,
    n: int = 512,
    steps: int = 100,
    mode: str = "traditional",
    xp: Any = np,
    *,
    dtype: Any = np.float64,
    transport: str | Transport = "auto",
    halo: int = 1,
    check: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` Jacobi steps on n x n points per rank (collective over ``comm``) and report them.

    Args:
        comm: a gridcomm Communicator, an mpi4py communicator, or None (COMM_WORLD).
        n: points per side of each rank's block (the global grid is n px x n py points).
        steps: time steps to run.
        mode: ``"traditional"``, ``"overlapped"`` or ``"graph"`` (GPU only), as for ``Stencil2D``.
        xp: the array module, ``numpy`` (CPU) or ``cupy`` (GPU), or its name.
        dtype: float64 or float32.
        transport: ``"auto"``, a transport name or a configured Transport.
        halo: ghost width exchanged every step, in points (1 to n; the stencil reads 1).
        check: gather the result on rank 0 and compare it with the serial NumPy run of the same global grid
            (reference_run); a correct run is bitwise equal.
        progress: called as ``progress(done, steps)`` on every rank after each batch of steps.

    Returns (the same dict on every rank): n, ranks, proc_grid, global_shape, halo, steps, mode, device ("cpu" or
    "gpu"), dtype, transport (the one used), bytes_per_step (sent by the busiest rank), time_per_step_s (wall
    time of the whole loop, device synchronised, slowest rank, divided by steps), point_updates_per_s (global
    points updated per second), checked (whether the check ran), bitwise_equal (None unless checked) and
    max_abs_diff (largest |result - reference|, None unless checked).
    """
    from mpi4py import MPI

    steps = check_steps(steps)
    with Stencil2D(comm, n, dtype, xp, mode, transport, halo=halo) as sim:
        mpi = sim.comm.mpi
        batch = max(1, steps // 20) if progress is not None else max(steps, 1)
        mpi.Barrier()
        start = time.perf_counter()
        done = 0
        while done < steps:
            now = min(batch, steps - done)
            sim.step(now)
            done += now
            if progress is not None:
                progress(done, steps)
        sim.synchronize()
        elapsed = mpi.allreduce(time.perf_counter() - start, op=MPI.MAX)
        bytes_per_step = mpi.allreduce(sim.bytes_per_step, op=MPI.MAX)
        result = sim.field() if check else None
        equal, diff = None, None
        if check and sim.comm.rank == 0:
            assert result is not None
            equal, diff = compare(result, reference_run(sim.global_shape, steps, sim.dtype))
        equal, diff = mpi.bcast((equal, diff), root=0)
        per_step = elapsed / steps if steps else 0.0
        return {
            "n": sim.n,
            "ranks": sim.comm.size,
            "proc_grid": list(sim.proc_grid),
            "global_shape": list(sim.global_shape),
            "halo": sim.halo,
            "steps": steps,
            "mode": sim.mode,
            "device": "gpu" if sim.on_gpu else "cpu",
            "dtype": str(sim.dtype),
            "transport": sim.transport,
            "bytes_per_step": int(bytes_per_step),
            "time_per_step_s": per_step,
            "point_updates_per_s": sim.points_per_step / per_step if per_step > 0 else None,
            "checked": bool(check),
            "bitwise_equal": equal,
            "max_abs_diff": diff,
        }
