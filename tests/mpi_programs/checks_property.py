"""Property test: halo exchanges of random decompositions equal a serial reference, bit for bit.

Launched on 8 ranks. Rank 0 runs a hypothesis test; each example draws a case (rank count 1..8, half of the
draws 1..3: harness.rank_counts; 1-3 dimensions, shape, halo widths per side, periodicity, process grid,
stencil, 1-3 fields with their dtypes and orders, transport, ...), broadcasts it, and the first n ranks split
off a communicator and run it while the others sit the example out. Results are gathered to rank 0, which
asserts, so that hypothesis can shrink a failure to a small case (harness.run_property). The other ranks wait
politely (8 ranks share few cores).

Cases that must fail (a grid too small for its process grid or halo) check that every rank raises
DecompositionError instead.

Environment: GRIDCOMM_PROPERTY_EXAMPLES (default 1800) sets max_examples; GRIDCOMM_PROPERTY_SCALE and
GRIDCOMM_PROPERTY_SEED (harness.py) scale it and pick the examples.
"""

from __future__ import annotations

import math
import os
import traceback
from dataclasses import dataclass

import numpy as np
from harness import (
    DTYPES,
    TRANSPORT_CHOICES,
    HaloExchanger,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    gather_problems,
    local_with_sentinel,
    owned_slices,
    random_global,
    rank_counts,
    run_property,
    shared_copy,
)
from hypothesis import strategies as st
from mpi4py import MPI

import gridcomm
from gridcomm import CartesianDecomposition, DecompositionError
from gridcomm.decomp.procgrid import choose_proc_grid, factorisations

MAX_EXAMPLES = int(os.environ.get("GRIDCOMM_PROPERTY_EXAMPLES", "1800"))


@dataclass(frozen=True)
class Case:
    nranks: int
    shape: tuple[int, ...]
    halo_arg: object  # as passed to CartesianDecomposition (int, per-dim ints or per-dim pairs)
    halo: tuple[tuple[int, int], ...]  # normalised
    periodic_arg: object
    periodic: tuple[bool, ...]
    proc_grid: tuple[int, ...] | None
    stencil: str
    fields: tuple[tuple[str, str], ...]  # (dtype, order) per field
    as_list: bool
    transport: str
    comm_kind: str
    seed: int
    root: int
    rounds: int
    shared: bool = False  # the fields in memory the node's ranks share (gridcomm.shared_zeros)


def predicted_grid(case: Case) -> tuple[int, ...] | None:
    """The process grid the decomposition must use, or None when construction must raise DecompositionError."""
    grid = case.proc_grid
    if grid is not None and all(grid):
        if any(p > n for p, n in zip(grid, case.shape, strict=True)):
            return None
    else:
        if math.prod(case.shape) < case.nranks:
            return None
        try:  # choose_proc_grid is checked against a brute force in tests/test_procgrid.py
            grid = choose_proc_grid(case.nranks, case.shape, case.halo, case.periodic, grid)
        except DecompositionError:
            return None
    for p, n, (lo, hi), wraps in zip(grid, case.shape, case.halo, case.periodic, strict=True):
        exchanged = p > 1 or wraps
        if exchanged and max(lo, hi) > n // p:
            return None
    return grid


@st.composite
def cases(draw, world_size: int) -> Case:
    n = draw(rank_counts(world_size))
    ndim = draw(st.integers(1, 3))
    halo = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    form = draw(st.sampled_from(["pairs", "per-dim", "int"]))
    if form == "int":
        halo = ((halo[0][0], halo[0][0]),) * ndim
        halo_arg: object = halo[0][0]
    elif form == "per-dim":
        halo = tuple((lo, lo) for lo, _ in halo)
        halo_arg = [lo for lo, _ in halo]
    else:
        halo_arg = [tuple(pair) for pair in halo]
    periodic = tuple(draw(st.booleans()) for _ in range(ndim))
    periodic_arg: object = periodic
    if len(set(periodic)) == 1 and draw(st.booleans()):
        periodic_arg = periodic[0]
    grid_mode = draw(st.sampled_from(["choose", "given", "partial"]))
    grid = None
    if grid_mode != "choose":
        grid = draw(st.sampled_from(list(factorisations(n, ndim))))
        if grid_mode == "partial":
            grid = tuple(0 if draw(st.booleans()) else p for p in grid)
    # Mostly shapes that fit the drawn grid and halo; now and then anything (then it must raise).
    anything = draw(st.sampled_from([False, False, False, False, True]))
    shape = []
    for k in range(ndim):
        p = grid[k] if grid is not None and grid[k] else 1
        least = 1 if anything else max(p * max(halo[k]), p)
        shape.append(draw(st.integers(least, max(12, least))))
    nfields = draw(st.integers(1, 3))
    fields = tuple((draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF"))) for _ in range(nfields))
    return Case(
        nranks=n,
        shape=tuple(shape),
        halo_arg=halo_arg,
        halo=halo,
        periodic_arg=periodic_arg,
        periodic=periodic,
        proc_grid=grid,
        stencil=draw(st.sampled_from(["box", "star"])),
        fields=fields,
        as_list=nfields > 1 or draw(st.booleans()),
        transport=draw(st.sampled_from(sorted(TRANSPORT_CHOICES))),
        comm_kind=draw(st.sampled_from(["mpi4py", "Communicator"])),
        seed=draw(st.integers(0, 2**32 - 1)),
        root=draw(st.integers(0, n - 1)),
        rounds=draw(st.integers(1, 2)),
        shared=draw(st.booleans()),
    )


# -- what every rank of an example does -------------------------------------------------------------------


def run_case(sub, case: Case) -> list[str]:
    """Problems seen by this rank (empty if none). Collective over ``sub`` (the example's ranks)."""
    rank = sub.Get_rank()
    grid = predicted_grid(case)
    own = gridcomm.Communicator(sub) if case.comm_kind == "Communicator" else None
    d, problems = None, []
    try:
        d = CartesianDecomposition(
            own if own is not None else sub, case.shape, halo=case.halo_arg, periodic=case.periodic_arg,
            proc_grid=case.proc_grid, stencil=case.stencil,
        )  # fmt: skip
        if grid is None:
            problems.append(f"expected DecompositionError, got a decomposition on proc_grid {d.proc_grid}")
    except DecompositionError as exc:
        if grid is not None:
            problems.append(f"unexpected DecompositionError: {exc}")
        elif not str(exc):
            problems.append("DecompositionError without a message")
    except Exception:
        problems.append(f"unexpected error building the decomposition:\n{traceback.format_exc()}")
    try:
        # Every rank learns whether every rank built its decomposition before anything collective follows.
        if grid is not None and sub.allreduce(d is not None and not problems, op=MPI.LAND):
            problems += verify_decomposition(sub, d, case, grid, rank)
        return problems
    finally:
        if d is not None and own is None:
            d.comm.close()
        if own is not None:
            own.close()


def verify_decomposition(sub, d, case: Case, grid, rank: int) -> list[str]:
    problems = []
    coords = tuple(int(c) for c in np.unravel_index(rank, grid))
    owned = owned_slices(case.shape, grid, coords)
    if d.proc_grid != tuple(grid) or d.coords != coords or tuple(d.global_slices) != owned:
        problems.append(
            f"proc_grid {d.proc_grid} coords {d.coords} slices {d.global_slices}; expected {grid} {coords} {owned}"
        )
    if d.halo != case.halo or d.periodic != case.periodic:
        problems.append(f"normalised halo {d.halo} periodic {d.periodic}; expected {case.halo} {case.periodic}")
    local_shape = tuple(s.stop - s.start + lo + hi for s, (lo, hi) in zip(owned, case.halo, strict=True))
    if d.local_shape != local_shape:
        problems.append(f"local_shape {d.local_shape}, expected {local_shape}")
    # Agree before the collective part, so that a rank that found a problem does not leave others hanging.
    if not sub.allreduce(not problems, op=MPI.LAND):
        return problems or ["another rank's decomposition is wrong"]

    globals_ = [random_global(case.shape, dt, case.seed + i) for i, (dt, _) in enumerate(case.fields)]
    fields = [local_with_sentinel(d, g, order) for g, (_, order) in zip(globals_, case.fields, strict=True)]
    if case.shared:  # cma then copies out of a mapping of the sender's memory
        fields = [shared_copy(f) for f in fields]
    transport = TRANSPORT_CHOICES[case.transport]
    with HaloExchanger(d, fields if case.as_list else fields[0], transport) as ex:
        for round_ in range(case.rounds):
            if round_:  # new data in place, same exchanger
                globals_ = [random_global(case.shape, dt, case.seed + 100 + i) for i, (dt, _) in enumerate(case.fields)]
                for f, g in zip(fields, globals_, strict=True):
                    cell_bytes(f)[d.interior_slices] = cell_bytes(g)[d.global_slices]
            ex.exchange()
            for i, (f, g) in enumerate(zip(fields, globals_, strict=True)):
                expect = expected_cells(g, owned, case.halo, case.periodic, case.stencil)
                if p := describe_mismatch(f, expect):
                    problems.append(f"round {round_}, field {i} {case.fields[i]}: {p}")

    # gather / scatter round trip of the first field.
    g, order = globals_[0], case.fields[0][1]
    problems += gather_problems(d.gather(fields[0], root=case.root), g, case.root, rank)
    back = d.scatter(g if rank == case.root else None, root=case.root, order=order)
    want = cell_bytes(np.zeros(d.local_shape, dtype=g.dtype)).copy()
    want[d.interior_slices] = cell_bytes(g)[d.global_slices]
    if back.dtype != g.dtype or back.shape != d.local_shape or not np.array_equal(cell_bytes(back), want):
        problems.append(f"scatter from {case.root}: interior or zero halo wrong ({back.dtype}, {back.shape})")
    return problems


def check_exchanges_match_serial_reference(comm):
    """The property, through harness.run_property: rank 0 draws, the first case.nranks ranks run, rank 0 asserts."""
    run_property(
        comm,
        cases(comm.Get_size()),
        run_case,
        MAX_EXAMPLES,
        tally={"must raise": lambda case: predicted_grid(case) is None},
    )
