"""Run and benchmark the MPDATA dwarf on one rank or many: set-up, time loop, results."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....arguments import flag, real_number, whole_number
from ....arrays import resolve_array_module
from ....errors import ArgumentError, ArgumentTypeError
from ....grids.local import LocalMesh
from ....grids.mesh import MedianDualMesh
from ....grids.octahedral import OctahedralGrid
from ....grids.partition import equal_regions, validate_owner
from ....transports import requested
from .cfl import check_cfl, dt_for_courant
from .scheme import Mpdata, solver_options
from .testcase import CosineBell, error_norms, total_mass

DEFAULT_COURANT = 0.5


@dataclass
class Setup:
    """Everything a rank holds for a run: the global mesh, its part, the solver and the test case."""

    mesh: MedianDualMesh
    case: CosineBell
    owner: np.ndarray
    local: LocalMesh
    solver: Mpdata
    decomposition: Any  # gridcomm.UnstructuredDecomposition, or None on one rank without a communicator
    dt: float
    courant: float  # the largest Courant number of dt


def setup_mpdata(
    comm: Any = None,
    grid: str | int | OctahedralGrid | MedianDualMesh = "O48",
    *,
    levels: int = 1,
    alpha: float = 0.0,
    courant: float | None = DEFAULT_COURANT,
    dt: float | None = None,
    period_s: float | None = None,
    fct: bool = True,
    iterations: int = 1,
    owner: np.ndarray | None = None,
    xp: Any = np,
    transport: Any = "auto",
    graphs: bool = False,
    levels_per_thread: int | None = None,
) -> Setup:
    """Build the mesh, partition it over ``comm`` (equal regions unless ``owner`` is given), and make this
    rank's solver, its tracer set to the cosine bell on every level (collective when ``comm`` is given).

    ``dt`` (s) if given, else the time step of Courant number ``courant``; ``check_cfl`` raises ValueError
    when it exceeds the limit. ``period_s`` overrides the 12-day revolution (for tests).

    On the GPU (``xp=cupy``; one rank per GPU, chosen from the local rank) ``transport`` picks the halo
    exchange: ``"auto"`` or a gridcomm transport name (ipc, nccl, staged, mpi), ``"host"`` for the baseline
    of whole fields copied through the host (:class:`~gridcomm.lab.apps.mpdata.baseline.HostRoundTrip`), or
    ``"none"`` for no exchanger at all (one rank only: a benchmark's compute-only figure). ``graphs`` and
    ``levels_per_thread``: see :class:`~gridcomm.lab.apps.mpdata.scheme.Mpdata`.
    """
    levels, fct, iterations, graphs, levels_per_thread = solver_options(
        levels, fct, iterations, graphs, levels_per_thread
    )
    alpha, courant, dt, period_s = _case_options(alpha, courant, dt, period_s)
    if transport not in ("host", "none"):
        requested(transport)
    comm = _communicator(comm)
    xp = resolve_array_module(xp, ArgumentError)
    if xp.__name__ == "cupy" and comm is not None:
        from ....gpu import use_local_gpu

        use_local_gpu(comm)  # before anything is allocated on the GPU
    mesh = grid if isinstance(grid, MedianDualMesh) else MedianDualMesh(grid)
    case = CosineBell(alpha=float(alpha), radius=mesh.radius, **({} if period_s is None else {"period_s": period_s}))
    fluxes = case.edge_fluxes(mesh)
    if dt is None:
        if courant is None:
            raise ArgumentError("give a time step: dt (s) or courant")
        dt = dt_for_courant(mesh.edges, fluxes, mesh.dual_volumes, courant)
    achieved = check_cfl(mesh.edges, fluxes, mesh.dual_volumes, dt)
    size, rank = (1, 0) if comm is None else (comm.size, comm.rank)
    owner = equal_regions(mesh.grid, size) if owner is None else validate_owner(owner, mesh.grid.size)
    if comm is None and (np.asarray(owner) != 0).any():
        raise ArgumentError("owner assigns nodes to several parts but no communicator was given")
    local = LocalMesh.build(mesh, owner, rank, layers=2)
    decomposition = None
    make = None
    if transport == "none" and size > 1:
        raise ArgumentError(f"transport 'none' leaves the halos of {size} ranks unfilled: it is for one rank only")
    if comm is not None and transport != "none":
        from ....decomp import UnstructuredDecomposition
        from ....exchange import HaloExchanger
        from .baseline import HostRoundTrip

        decomposition = UnstructuredDecomposition(comm, local.owned_ids, local.halo_ids)

        def make(fields: list[Any]) -> Any:
            if transport == "host":
                return HostRoundTrip(decomposition, fields)
            return HaloExchanger(decomposition, fields, transport)

    velocities = case.edge_velocities(mesh)
    solver = Mpdata(
        local,
        fluxes[local.edge_ids],
        velocities[local.edge_ids],
        dt,
        levels=levels,
        fct=fct,
        iterations=iterations,
        make_exchanger=make,
        xp=xp,
        graphs=graphs,
        levels_per_thread=levels_per_thread,
    )
    # The bell is evaluated on the global grid and sliced: transcendental functions may round differently
    # in a vector loop's body and tail, and every rank must hold bitwise the serial values.
    solver.set_tracer(np.broadcast_to(case.height(mesh.xyz)[local.global_ids, None], (local.n_local, levels)))
    return Setup(mesh, case, np.asarray(owner), local, solver, decomposition, float(dt), achieved)


def _case_options(
    alpha: Any, courant: Any, dt: Any, period_s: Any
) -> tuple[float, float | None, float | None, float | None]:
    """The test case's and the time step's arguments checked (their ranges: dt_for_courant and check_cfl)."""
    return (
        real_number(alpha, "alpha"),
        None if courant is None else real_number(courant, "courant"),
        None if dt is None else real_number(dt, "dt"),
        None if period_s is None else real_number(period_s, "period_s", positive=True),
    )


def _communicator(comm: Any) -> Any:
    """None stays None (one rank, no MPI); an mpi4py communicator is wrapped in a gridcomm Communicator."""
    if comm is None:
        return None
    from ....comm import Communicator

    return Communicator.wrap(comm)


def _gather(setup: Setup, comm: Any, field: Any) -> np.ndarray | None:
    """The owned values of ``field`` by global id on rank 0, a host array (None elsewhere)."""
    setup.solver.synchronize()
    host = field.get() if setup.solver.on_gpu else field
    if comm is None or setup.decomposition is None:  # one part: every node is owned, in the part's order
        result = np.empty_like(host[: setup.local.n_owned])
        result[setup.local.owned_ids] = host[: setup.local.n_owned]
        return result
    return setup.decomposition.gather(host, root=0)


def run_mpdata(
    comm: Any = None,
    grid: str | int | OctahedralGrid | MedianDualMesh = "O48",
    *,
    levels: int = 1,
    alpha: float = 0.0,
    revolutions: float = 1.0,
    courant: float | None = DEFAULT_COURANT,
    dt: float | None = None,
    fct: bool = True,
    iterations: int = 1,
    steps: int | None = None,
    period_s: float | None = None,
    progress: Callable[[int, int], Any] | None = None,
    return_fields: bool = False,
    xp: Any = np,
    transport: Any = "auto",
    graphs: bool = False,
) -> dict[str, Any]:
    """Advect the cosine bell (Williamson case 1) with MPDATA and report how well it went.

    One rank when ``comm`` is None, else every rank of the gridcomm Communicator ``comm`` (collective;
    equal-regions parts, two halo layers). The time step is the largest that fits ``revolutions`` x 12 days
    in whole steps at Courant number at most ``courant`` (or ``dt`` s, checked against the CFL limit);
    ``steps`` runs only that many steps (the errors are then against the exact solution at that time).

    Returns (on every rank): grid, nodes, edges, ranks, levels, alpha, fct, iterations, steps, dt (s),
    simulated_s, courant (largest Courant number), l1, l2, linf (Williamson's normalised errors, dual-volume
    weights, all levels), min/max (final) and min0/max0 (initial), mass0, mass, mass_rel_change,
    time_per_step_s (slowest rank), exchange_fraction (share of step time in halo exchanges, mean over
    ranks; None on the GPU, where the exchanges overlap the kernels), exchanges_per_step, device. With
    ``return_fields``, rank 0's dict also holds ``initial``, ``final`` and ``exact`` (V, levels) arrays by
    global id. ``xp``, ``transport``, ``graphs``: as for :func:`setup_mpdata`.
    """
    revolutions = real_number(revolutions, "revolutions", positive=True)
    steps = None if steps is None else whole_number(steps, "steps", least=0)
    if progress is not None and not callable(progress):
        raise ArgumentTypeError(f"progress={progress!r}: give a function progress(done, total), or None")
    return_fields = flag(return_fields, "return_fields")
    solver_options(levels, fct, iterations, graphs, None)  # before the mesh is built (setup_mpdata checks again)
    alpha, courant, dt, period_s = _case_options(alpha, courant, dt, period_s)
    comm = _communicator(comm)
    mesh = grid if isinstance(grid, MedianDualMesh) else MedianDualMesh(grid)
    case = CosineBell(alpha=float(alpha), radius=mesh.radius, **({} if period_s is None else {"period_s": period_s}))
    total_s = revolutions * case.period_s
    if dt is None:
        if courant is None:
            raise ArgumentError("give a time step: dt (s) or courant")
        dt_max = dt_for_courant(mesh.edges, case.edge_fluxes(mesh), mesh.dual_volumes, courant)
        nsteps = max(1, math.ceil(total_s / dt_max * (1.0 - 1e-12)))  # whole steps, none above dt_max
        dt = total_s / nsteps
    else:
        nsteps = max(1, round(total_s / dt))
    if steps is not None:
        nsteps = int(steps)
    s = setup_mpdata(
        comm, mesh, levels=levels, alpha=alpha, dt=dt, period_s=period_s, fct=fct, iterations=iterations, xp=xp,
        transport=transport, graphs=graphs,
    )  # fmt: skip
    area = mesh.dual_volumes
    initial = _gather(s, comm, s.solver.psi)
    if comm is not None:
        comm.mpi.Barrier()
    s.solver.run(nsteps, progress)
    final = _gather(s, comm, s.solver.psi)
    s.solver.close()
    step_s = s.solver.step_s
    # On the GPU the exchanges overlap the kernels and the host never sees them end: no share to report.
    exchange_fraction = None if s.solver.on_gpu else s.solver.exchange_s / max(step_s, 1e-300)
    if comm is not None:
        from mpi4py import MPI

        step_s = comm.mpi.allreduce(step_s, op=MPI.MAX)
        if exchange_fraction is not None:  # the same on every rank: all on the GPU or all on the CPU
            exchange_fraction = comm.mpi.allreduce(exchange_fraction, op=MPI.SUM) / comm.size
    result: dict[str, Any] | None = None
    if comm is None or comm.rank == 0:
        exact = np.repeat(case.height(mesh.xyz, nsteps * dt)[:, None], levels, axis=1)
        mass0, mass = total_mass(initial, area), total_mass(final, area)
        result = {
            "grid": mesh.grid.name,
            "nodes": mesh.n_nodes,
            "edges": mesh.n_edges,
            "ranks": 1 if comm is None else comm.size,
            "levels": levels,
            "alpha": float(alpha),
            "fct": bool(fct),
            "iterations": iterations,
            "steps": nsteps,
            "dt": float(dt),
            "simulated_s": nsteps * float(dt),
            "courant": s.courant,
            **error_norms(final, exact, area),
            "min": float(final.min()),
            "max": float(final.max()),
            "min0": float(initial.min()),
            "max0": float(initial.max()),
            "mass0": mass0,
            "mass": mass,
            "mass_rel_change": (mass - mass0) / mass0,
            "time_per_step_s": step_s / max(nsteps, 1),
            "exchange_fraction": exchange_fraction,
            "exchanges_per_step": s.solver.exchanges_per_step if s.decomposition is not None else 0,
            "device": "gpu" if s.solver.on_gpu else "cpu",
        }
        if return_fields:
            result.update(initial=initial, final=final, exact=exact)
    if comm is not None:
        public = None if result is None else {k: v for k, v in result.items() if not isinstance(v, np.ndarray)}
        public = comm.mpi.bcast(public, root=0)
        result = result if comm.rank == 0 else public
    assert result is not None
    return result


def benchmark_mpdata(
    comm: Any = None,
    grid: str | int = "O48",
    *,
    levels: int = 1,
    steps: int = 20,
    warmup: int = 3,
    alpha: float = math.pi / 4,
    fct: bool = True,
) -> dict[str, Any]:
    """Time MPDATA steps (diagonal flow, Courant number 0.5): per step, the slowest rank's time; the
    median and minimum over ``steps`` steps after ``warmup``, the share in halo exchanges, part sizes.
    Collective when ``comm`` is given; the same dict on every rank."""
    comm = _communicator(comm)
    s = setup_mpdata(comm, grid, levels=levels, alpha=alpha, fct=fct)
    s.solver.run(warmup)
    per_step, per_exchange = np.empty(steps), np.empty(steps)
    for k in range(steps):
        if comm is not None:
            comm.mpi.Barrier()
        before_ex = s.solver.exchange_s
        start = time.perf_counter()
        s.solver.step()
        per_step[k] = time.perf_counter() - start
        per_exchange[k] = s.solver.exchange_s - before_ex
    owned, halo = s.local.n_owned, s.local.n_halo
    if comm is not None:
        from mpi4py import MPI

        comm.mpi.Allreduce(MPI.IN_PLACE, per_step, op=MPI.MAX)
        comm.mpi.Allreduce(MPI.IN_PLACE, per_exchange, op=MPI.MAX)
        sizes = comm.mpi.allgather((owned, halo))
    else:
        sizes = [(owned, halo)]
    return {
        "grid": s.mesh.grid.name,
        "nodes": s.mesh.n_nodes,
        "ranks": 1 if comm is None else comm.size,
        "levels": levels,
        "fct": fct,
        "dt": s.dt,
        "steps": steps,
        "median_s": float(np.median(per_step)),
        "min_s": float(per_step.min()),
        "exchange_median_s": float(np.median(per_exchange)),
        "exchange_fraction": float(np.median(per_exchange) / np.median(per_step)),
        "owned_per_rank": [o for o, _ in sizes],
        "halo_per_rank": [h for _, h in sizes],
        "node_updates_per_s": float(s.mesh.n_nodes * levels / np.median(per_step)),
    }
