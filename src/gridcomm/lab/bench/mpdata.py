"""``gridcomm bench mpdata --gpu``: the MPDATA dwarf's step on GPUs, per transport, with energy, and each kernel's
bandwidth beside the HBM copy bandwidth measured in the same run.

A kernel's bandwidth counts the fewest bytes it must move: every field value it reads or writes once (8 bytes
per node and level; the nodes it reads are its own and their neighbours), and its tables and edge
coefficients once. Neighbour values that the caches serve again are not counted again, so a kernel at 100 %
would run at the speed of a plain copy of the same bytes. The step's figure is the sum of its kernels' bytes
over its time.
"""

from __future__ import annotations

import math
from dataclasses import astuple
from typing import Any

import numpy as np

from ...comm import Communicator
from ...grids.mesh import MedianDualMesh
from ...transports import kind
from ..apps.mpdata.cuda_kernels import PHASES, run_start
from ..apps.mpdata.driver import setup_mpdata
from ..apps.mpdata.tables import INNER, OUTER, MeshTables
from ..measure.energy import energy_of_steps
from .ceilings import time_gpu

#: Cases of ``bench mpdata --gpu`` beside the GPU transports: no exchange (one rank), and the seed's baseline
#: (whole fields through the host).
NO_EXCHANGE, HOST_ROUND_TRIP = "none", "host"
CHECK_STEPS = 5  # steps before the checksum that every configuration of a grid must agree on
INDEX_BYTES, VALUE_BYTES = 4, 8


def _count(indices: np.ndarray, size: int) -> int:
    """Distinct values among ``indices`` (all in 0..size-1)."""
    seen = np.zeros(size, bool)
    seen[indices.ravel()] = True
    return int(seen.sum())


def _neighbourhood(t: MeshTables, positions: np.ndarray) -> int:
    """Local nodes a phase over update ``positions`` reads: the nodes themselves and their neighbours."""
    if not len(positions):
        return 0
    return _count(np.concatenate([t.update_nodes[positions], t.other_tab[:, positions].ravel()]), t.n_local)


def _edges(t: MeshTables, positions: np.ndarray) -> int:
    """Local edges of update ``positions``."""
    return _count(t.edge_tab[:, positions], len(t.edge_i)) if len(positions) else 0


def kernel_bytes(t: MeshTables, phase: str, positions: np.ndarray, limit: bool = True) -> int:
    """The fewest bytes that ``phase`` over ``positions`` (update positions; local edges for ``fluxes``) must
    move (see the module's docstring), with the tables as mpdata.cu reads them: a list entry only where the
    positions are not one run, a slot's edge (its sign folded in) and other node, per-edge data once."""
    n, value, index = len(positions), VALUE_BYTES, INDEX_BYTES
    if not n:
        return 0
    levels, degree = t.levels, t.degree
    listed = 0 if run_start(positions) >= 0 else n * index
    if phase == "fluxes":  # psi1 and grad (3) at the edges' ends; one flux per edge out; ends, |V|, dt V, wind (3)
        ends = _count(np.concatenate([t.edge_i[positions], t.edge_j[positions]]), t.n_local)
        return value * (4 * ends + n) * levels + listed + n * (2 * index + 5 * value)
    near, edges = _neighbourhood(t, positions), _edges(t, positions)
    halo_positions = int(np.count_nonzero(positions >= t.n_owned))
    per_node_table = degree * 2 * index  # each slot's edge and other node
    node_data = n * value + halo_positions * index  # dt/A; the local node of a halo position
    if phase == "upwind":  # psi around; psi1 out; V per edge
        fields, edge_data = (near + n) * levels, edges * value
    elif phase == "gradient":  # psi1 around; 3 gradient components out; face normals per edge; area, radial
        fields, edge_data = (near + 3 * n) * levels, edges * 3 * value
        node_data = n * 4 * value
    elif phase == "bounds":  # psi, psi1 around, the fluxes of the node's edges; beta up and down out
        fields, edge_data = (2 * near + edges + 2 * n) * levels, 0
    elif phase == "corrective":  # psi1, the fluxes and, limited, both betas around; psi out
        fields, edge_data = ((2 * near if limit else 0) + edges + 2 * n) * levels, 0
    else:
        raise ValueError(f"unknown phase {phase!r}")
    return value * fields + listed + n * per_node_table + node_data + edge_data


def phase_positions(t: MeshTables, key: tuple[str, str]) -> np.ndarray:
    """What a kernel launch key of CudaMpdata (phase, part) runs over: update positions, or local edges."""
    phase, part = key
    if phase == "fluxes":
        return t.inner_edges if part == INNER else t.outer_edges
    if part == INNER:
        return t.inner
    if part == OUTER:
        return t.outer
    return np.arange(t.n_owned)  # gradient and corrective: the owned nodes


def field_checksum(comm: Communicator, setup: Any) -> str:
    """A checksum of the tracer's bits on every owned node, independent of the partition: per node the sum
    of its levels' 64-bit patterns, weighted by a hash of the node's global id (collective)."""
    solver = setup.solver
    solver.synchronize()
    owned = solver.owned
    bits = owned.view(np.uint64).sum(axis=1, dtype=np.uint64)
    bits = bits.get() if solver.on_gpu else np.asarray(bits)
    parts = comm.mpi.gather((setup.local.owned_ids, bits), root=0)
    total = None
    if comm.rank == 0:
        ids = np.concatenate([p[0] for p in parts]).astype(np.uint64)
        values = np.concatenate([p[1] for p in parts])
        with np.errstate(over="ignore"):
            weights = ids * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
            total = f"{int((values * weights).sum(dtype=np.uint64)):016x}"
    return comm.mpi.bcast(total, root=0)


def step_launches(kernels: Any, phase: str, fct: bool) -> list[tuple[str, str]]:
    """The launch keys of ``phase`` that a step runs (``kernels``: a CudaMpdata): the bounds only with FCT, and of
    the corrective pass's two launches the one with its limiter as ``fct`` says."""
    if phase == "bounds" and not fct:
        return []
    return [key for key in kernels.launches(phase) if phase != "corrective" or key[1] == str(int(fct))]


def time_kernels(comm: Communicator, solver: Any, step_s: float, hbm: float) -> list[dict[str, Any]]:
    """Each kernel launch of a step timed alone (repeated: every kernel reads only what others write), its
    fewest bytes, bandwidth, share of the HBM copy bandwidth and share of the step."""
    t, kernels = solver.tables, solver.kernels
    rows = []
    phases = PHASES if solver.iterations else ("upwind",)
    for phase in phases:
        for key in step_launches(kernels, phase, solver.fct):
            timing = time_gpu(comm, lambda key=key: kernels.run_launch(key), samples=5)
            nbytes = kernel_bytes(t, phase, phase_positions(t, key), solver.fct)
            rate = nbytes / timing.median / 1e9
            rows.append(
                {
                    "kernel": f"{phase}/{key[1]}" if key[1] in (INNER, OUTER) else phase,
                    "time_s": timing.median,
                    "bytes": nbytes,
                    "GBps": rate,
                    "share_of_hbm": rate / hbm,
                    "share_of_step": timing.median / step_s,
                }
            )
    return rows


def benchmark_case(
    comm: Communicator,
    mesh: MedianDualMesh,
    transport: str,
    *,
    levels: int,
    hbm: float,
    gpus: int,
    kernels: bool,
    fct: bool = True,
    levels_per_thread: int | None = None,
) -> dict[str, Any]:
    """One result row: ``transport``'s step (graphs where it can be captured), timed as the median of batches
    (slowest rank), energy over a region of at least ENERGY_REGION_S, the checksum after CHECK_STEPS steps and,
    with ``kernels``, every kernel alone."""
    import cupy

    graphs = transport == NO_EXCHANGE or (transport != HOST_ROUND_TRIP and kind(transport).graph_capturable)
    s = setup_mpdata(
        comm, mesh, levels=levels, alpha=math.pi / 4, fct=fct, xp=cupy, transport=transport, graphs=graphs,
        levels_per_thread=levels_per_thread,
    )  # fmt: skip
    solver = s.solver
    try:
        solver.run(CHECK_STEPS)
        checksum = field_checksum(comm, s)
        timing = time_gpu(comm, solver.step, samples=5, min_sample_s=0.05)
        solver.synchronize()
        step_s = timing.median
        energy, region_steps = energy_of_steps(comm, solver.run, step_s, least=5)
        kernel_rows = time_kernels(comm, solver, step_s, hbm) if kernels else []
    finally:
        solver.close()
    step_bytes = sum(k["bytes"] for k in kernel_rows) if kernel_rows else None
    return {
        "grid": mesh.grid.name,
        "nodes": mesh.n_nodes,
        "edges": mesh.n_edges,
        "levels": levels,
        "ranks": comm.size,
        "gpus": gpus,
        "transport": transport,
        "transport_used": solver.transport,
        "graphs": graphs,
        "fct": fct,
        "kernel_shapes": {name: astuple(shape) for name, shape in solver.kernels.shapes.items()},
        "owned_per_rank": comm.mpi.allgather(s.local.n_owned),
        "halo_per_rank": comm.mpi.allgather(s.local.n_halo),
        "time_per_step_s": step_s,
        "min_step_s": timing.minimum,
        "energy_steps": region_steps,
        "joules_per_step": energy.per(region_steps),
        "watts": energy.watts,
        "energy_why": energy.why,
        "hbm_GBps": hbm,
        "step_bytes": step_bytes,
        "step_share_of_hbm": None if step_bytes is None else step_bytes / step_s / 1e9 / hbm,
        "checksum": checksum,
        "kernels": kernel_rows,
    }


def mark_overheads(rows: list[dict[str, Any]]) -> None:
    """Each row's step time over the same grid's no-exchange step of this run (None where there is none), and
    whether the rows of a grid agree on the checksum."""
    for row in rows:
        base = next((r for r in rows if r["grid"] == row["grid"] and r["transport"] == "none"), None)
        row["over_no_exchange"] = None if base is None else row["time_per_step_s"] / base["time_per_step_s"]
        row["checksums_agree"] = len({r["checksum"] for r in rows if r["grid"] == row["grid"]}) == 1
