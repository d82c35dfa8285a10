"""Fields of their own halos and staggering in one exchange, against a serial reference, and bad input.

tests/test_mpi.py launches the property on 8 ranks and the other checks on 2 and 3 (bad input) or 4 ranks;
tests/test_gpu.py runs the module with GRIDCOMM_CHECK_DEVICE=gpu (harness.HaloExchanger then exchanges GPU copies
of the fields), so every check here works on any world size.

Property (harness.run_property): each example draws a Cartesian decomposition (1..8 ranks, 1-3 dimensions, halo
widths per side, periodicity, process grid, stencil) and 1-3 fields, each with its own halo (at most the
decomposition's, per side, in any form ``field()`` takes, or the decomposition itself), its own staggering (any
subset of the axes, as letters or numbers), dtype and memory order; one exchanger moves them all over a drawn
transport, in one or two rounds, sometimes in validation mode. Every field must then hold, bit for bit, what a
serial reference computes from the global staggered array (tests/mpi_programs/harness.py: face i is the low face
of cell i; a non-periodic staggered axis has N + 1 faces), and gather and scatter of each field must round-trip.

Environment: GRIDCOMM_PROPERTY_STAGGERED_EXAMPLES (default 300: about 40 s on 8 ranks sharing 2 busy cores) sets
the examples (times GRIDCOMM_PROPERTY_SCALE); GRIDCOMM_PROPERTY_SEED picks them (harness.run_property).
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
from harness import (
    BOX_TRANSPORTS,
    DTYPES,
    TRANSPORT_CHOICES,
    TRANSPORTS,
    HaloExchanger,
    assert_everywhere,
    assert_raises_everywhere,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    gather_problems,
    local_with_halo,
    random_global,
    rank_counts,
    ranks,
    run_property,
    staggered_owned_slices,
    staggered_shape,
)
from hypothesis import strategies as st

import gridcomm
from gridcomm import (
    ArgumentError,
    CartesianDecomposition,
    DecompositionError,
    FieldError,
    PatternError,
    UnstructuredDecomposition,
)
from gridcomm.decomp.procgrid import factorisations

MAX_EXAMPLES = int(os.environ.get("GRIDCOMM_PROPERTY_STAGGERED_EXAMPLES", "300"))


@dataclass(frozen=True)
class Field:
    halo_arg: object  # as passed to field(); None: the decomposition's
    halo: tuple[tuple[int, int], ...]  # normalised
    stagger_arg: object  # as passed to field()
    stagger: tuple[int, ...]  # axes, ascending
    dtype: str
    order: str
    itself: bool  # pass the decomposition itself (its own halo, cell centres) instead of a field of it


@dataclass(frozen=True)
class Case:
    nranks: int
    shape: tuple[int, ...]
    halo: tuple[tuple[int, int], ...]
    periodic: tuple[bool, ...]
    proc_grid: tuple[int, ...]
    stencil: str
    fields: tuple[Field, ...]
    one_descriptor: bool  # every field of one descriptor (they share one pattern)
    transport: str
    validate: bool
    seed: int
    root: int
    rounds: int


@st.composite
def halo_forms(draw, widest: tuple[tuple[int, int], ...]) -> tuple[object, tuple[tuple[int, int], ...]]:
    """A field halo at most ``widest`` per side: (as passed, normalised)."""
    if draw(st.booleans()):
        return None, widest
    pairs = tuple((draw(st.integers(0, lo)), draw(st.integers(0, hi))) for lo, hi in widest)
    form = draw(st.sampled_from(["pairs", "per-dim", "int"]))
    narrowest = min(min(pair) for pair in widest)
    if form == "int":
        w = draw(st.integers(0, narrowest))
        return w, ((w, w),) * len(widest)
    if form == "per-dim":
        widths = [min(pair) for pair in pairs]
        return widths, tuple((w, w) for w in widths)
    return [tuple(pair) for pair in pairs], pairs


@st.composite
def stagger_forms(draw, ndim: int) -> tuple[object, tuple[int, ...]]:
    axes = tuple(k for k in range(ndim) if draw(st.booleans()))
    form = draw(st.sampled_from(["letters", "numbers", "none"] if not axes else ["letters", "numbers"]))
    if form == "none":
        return draw(st.sampled_from([None, ""])), ()
    if form == "letters":
        return "".join("xyz"[k] for k in reversed(axes)), axes
    return (axes[0] if len(axes) == 1 and draw(st.booleans()) else list(axes)), axes


@st.composite
def cases(draw, world_size: int) -> Case:
    n = draw(rank_counts(world_size))
    ndim = draw(st.integers(1, 3))
    grid = draw(st.sampled_from(list(factorisations(n, ndim))))
    halo = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    least = [max(p, p * max(h)) for p, h in zip(grid, halo, strict=True)]
    shape = tuple(draw(st.integers(m, max(m + 6, 8))) for m in least)
    fields = []
    for _ in range(draw(st.integers(1, 3))):
        halo_arg, field_halo = draw(halo_forms(halo))
        stagger_arg, stagger = draw(stagger_forms(ndim))
        itself = field_halo == halo and not stagger and draw(st.booleans())
        dtype, order = draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF"))
        fields.append(Field(halo_arg, field_halo, stagger_arg, stagger, dtype, order, itself))
    one = draw(st.booleans())
    if one:  # every field takes the first one's halo and staggering
        fields = [Field(fields[0].halo_arg, fields[0].halo, fields[0].stagger_arg, fields[0].stagger, f.dtype, f.order,
                        fields[0].itself) for f in fields]  # fmt: skip
    return Case(
        nranks=n,
        shape=shape,
        halo=halo,
        periodic=tuple(draw(st.booleans()) for _ in range(ndim)),
        proc_grid=grid,
        stencil=draw(st.sampled_from(["box", "star"])),
        fields=tuple(fields),
        one_descriptor=one,
        transport=draw(st.sampled_from(sorted(TRANSPORT_CHOICES))),
        validate=draw(st.sampled_from([False, False, True])),
        seed=draw(st.integers(0, 2**32 - 1)),
        root=draw(st.integers(0, n - 1)),
        rounds=draw(st.integers(1, 2)),
    )


# -- what every rank of an example does -------------------------------------------------------------------


def run_case(sub, case: Case) -> list[str]:
    """Problems seen by this rank (empty if none). Collective over ``sub`` (the example's ranks)."""
    d = None
    try:
        d = CartesianDecomposition(
            sub, case.shape, halo=case.halo, periodic=case.periodic, proc_grid=case.proc_grid, stencil=case.stencil
        )
        return verify_fields(sub, d, case)
    except Exception:
        return [f"unexpected error:\n{traceback.format_exc()}"]
    finally:
        if d is not None:
            d.comm.close()


def descriptor(d: CartesianDecomposition, field: Field) -> Any:
    return d if field.itself else d.field(halo=field.halo_arg, stagger=field.stagger_arg)


def verify_fields(sub, d: CartesianDecomposition, case: Case) -> list[str]:
    rank = sub.Get_rank()
    kinds = [descriptor(d, f) for f in case.fields[: 1 if case.one_descriptor else None]]
    problems = []
    owned, globals_ = [], []
    for i, f in enumerate(case.fields):
        kind = kinds[0 if case.one_descriptor else i]
        mine = staggered_owned_slices(case.shape, case.proc_grid, d.coords, case.periodic, f.stagger)
        owned.append(mine)
        globals_.append(random_global(staggered_shape(case.shape, case.periodic, f.stagger), f.dtype, case.seed + i))
        local = local_with_halo(mine, f.halo, globals_[i]).shape
        if (kind.global_slices, kind.local_shape, kind.halo) != (mine, local, f.halo):
            problems.append(
                f"field {i}: global_slices {kind.global_slices}, local_shape {kind.local_shape}, halo {kind.halo}; "
                f"expected {mine}, {local}, {f.halo}"
            )
    if not sub.allreduce(not problems):
        return problems or ["another rank's fields have the wrong shapes"]
    arrays = [local_with_halo(o, f.halo, g, f.order) for o, f, g in zip(owned, case.fields, globals_, strict=True)]
    given = kinds[0] if case.one_descriptor else kinds
    with HaloExchanger(given, arrays, TRANSPORT_CHOICES[case.transport], validate=case.validate) as ex:
        for round_ in range(case.rounds):
            if round_:  # new data in place, same exchanger
                for i, (a, f, mine) in enumerate(zip(arrays, case.fields, owned, strict=True)):
                    globals_[i] = random_global(globals_[i].shape, f.dtype, case.seed + 100 + i)
                    inside = tuple(slice(lo, lo + s.stop - s.start) for s, (lo, _) in zip(mine, f.halo, strict=True))
                    cell_bytes(a)[inside] = cell_bytes(globals_[i])[mine]
            ex.exchange()
            for i, (a, f, g, mine) in enumerate(zip(arrays, case.fields, globals_, owned, strict=True)):
                if p := describe_mismatch(a, expected_cells(g, mine, f.halo, case.periodic, case.stencil)):
                    problems.append(f"round {round_}, field {i} (halo {f.halo}, stagger {f.stagger}): {p}")
    for i, (a, f, g) in enumerate(zip(arrays, case.fields, globals_, strict=True)):
        kind = kinds[0 if case.one_descriptor else i]
        problems += [f"field {i}: {p}" for p in gather_problems(kind.gather(a, root=case.root), g, case.root, rank)]
        back = kind.scatter(g if rank == case.root else None, root=case.root, order=f.order)
        want = cell_bytes(np.zeros(kind.local_shape, dtype=g.dtype)).copy()
        want[kind.interior_slices] = cell_bytes(g)[kind.global_slices]
        if back.shape != kind.local_shape or not np.array_equal(cell_bytes(back), want):
            problems.append(f"field {i}: scatter from {case.root}: interior or zero halo wrong")
    return problems


def check_mixed_fields_match_serial_reference(comm):
    """The property, through harness.run_property: rank 0 draws, the first case.nranks ranks run, rank 0 asserts."""
    run_property(
        comm,
        cases(comm.Get_size()),
        run_case,
        MAX_EXAMPLES,
        tally={
            "staggered": lambda c: any(f.stagger for f in c.fields),
            "of several halos": lambda c: len({f.halo for f in c.fields}) > 1,
        },
    )


# -- a C-grid's three fields over every transport ----------------------------------------------------------


def check_c_grid_fields_every_transport(comm):
    """u on x faces and v on y faces with a halo of 1, h on cell centres with 2, over a channel periodic in x:
    one exchanger per transport, start() and wait() with the interiors rewritten in between, bit for bit."""
    d = CartesianDecomposition(comm, (11, 9), halo=2, periodic=(True, False))
    kinds = [d.field(halo=1, stagger="x"), d.field(halo=1, stagger="y"), d]
    owned = [staggered_owned_slices(d.global_shape, d.proc_grid, d.coords, d.periodic, s) for s in ((0,), (1,), ())]
    shapes = [staggered_shape(d.global_shape, d.periodic, s) for s in ((0,), (1,), ())]
    problems = []
    for t, (name, transport) in enumerate({**TRANSPORTS, **BOX_TRANSPORTS}.items()):
        globals_ = [random_global(shape, dtype, 7 * t + i) for i, (shape, dtype) in
                    enumerate(zip(shapes, ("float64", "float32", "int16"), strict=True))]  # fmt: skip
        fields = [
            local_with_halo(o, k.halo, g, order) for o, k, g, order in zip(owned, kinds, globals_, "CFC", strict=True)
        ]
        with HaloExchanger(kinds, fields, transport) as ex:
            handle = ex.start()
            handle.wait()
            for i, (k, f, g, mine) in enumerate(zip(kinds, fields, globals_, owned, strict=True)):
                if p := describe_mismatch(f, expected_cells(g, mine, k.halo, d.periodic, d.stencil)):
                    problems.append(f"{name}, field {i}: {p}")
    assert_everywhere(comm, "\n".join(problems) or None)
    d.comm.close()


# -- an unstructured mesh's fields on different row sets ---------------------------------------------------


def _ring(comm, layers: int, per: int = 4) -> UnstructuredDecomposition:
    """A ring of ``per`` nodes per rank, each rank keeping copies of ``layers`` nodes on each side."""
    n, r = per * comm.Get_size(), comm.Get_rank()
    owned = np.arange(r * per, (r + 1) * per)
    halo = np.array(
        [(owned[0] - k) % n for k in range(1, layers + 1)] + [(owned[-1] + k) % n for k in range(1, layers + 1)]
    )
    halo = np.unique(halo[~np.isin(halo, owned)])
    return UnstructuredDecomposition(comm, owned, halo)


@ranks(minimum=2)
def check_unstructured_fields_of_different_row_sets(comm):
    """Two meshes of the same owned nodes, one and two halo layers deep, each with its field (one with levels):
    one exchanger fills both halos with their owners' ids."""
    one, two = _ring(comm, 1), _ring(comm, 2)
    problems = []
    for name, transport in TRANSPORTS.items():
        a, b = one.zeros(np.int64), two.zeros(np.float32, levels=3)
        one.owned(a)[...] = np.arange(comm.Get_rank() * 4, comm.Get_rank() * 4 + 4)
        two.owned(b)[...] = one.owned(a)[:, None]
        with HaloExchanger([one, two], [a, b], transport) as ex:
            ex.exchange()
        ids_one = np.concatenate([one.owned_global_ids, one.halo_global_ids])
        ids_two = np.concatenate([two.owned_global_ids, two.halo_global_ids])
        if not (np.array_equal(a, ids_one) and np.array_equal(b, np.repeat(ids_two[:, None], 3, axis=1))):
            problems.append(f"{name}: {a} / {b[:, 0]}, expected {ids_one} / {ids_two}")
    assert_everywhere(comm, "\n".join(problems) or None)
    one.comm.close()


# -- bad input: the same error on every rank ---------------------------------------------------------------


def _grid(comm) -> CartesianDecomposition:
    return CartesianDecomposition(comm, (4 * comm.Get_size(), 6), halo=((2, 1), (1, 1)), periodic=(False, True))


def check_bad_field_halo_wider_than_the_decompositions(comm):
    d = _grid(comm)
    assert_raises_everywhere(
        comm, lambda: d.field(halo=2), DecompositionError, "wider than the decomposition's halo", "high side of "
        "dimension 0", "(2 > 1)", "widest halo of its fields",
    )  # fmt: skip
    assert_raises_everywhere(comm, lambda: d.field(halo=((0, 0), (0, 2))), DecompositionError, "dimension 1")
    d.comm.close()


@ranks(minimum=2)
def check_bad_field_halo_on_one_rank(comm):
    d = _grid(comm)
    halo = 2 if comm.Get_rank() == 1 else 1
    words = ["wider"] if comm.Get_rank() == 1 else ["rank 1", "wider"]
    assert_raises_everywhere(comm, lambda: d.field(halo=halo), DecompositionError, *words)
    d.comm.close()


def check_bad_stagger(comm):
    d = _grid(comm)
    assert_raises_everywhere(comm, lambda: d.field(stagger="z"), DecompositionError, "stagger", "axes")
    assert_raises_everywhere(comm, lambda: d.field(stagger="w"), gridcomm.ArgumentTypeError, "stagger", "letters")
    d.comm.close()


@ranks(minimum=2)
def check_bad_choices_differ_between_ranks(comm):
    """field() with another stagger on one rank, and exchangers of fields in another order on one rank."""
    d = _grid(comm)
    stagger = "y" if comm.Get_rank() == 1 else "x"
    assert_raises_everywhere(
        comm, lambda: d.field(stagger=stagger), PatternError, "different arguments to field()", "stagger"
    )
    u, cells = d.field(halo=1, stagger="y"), d.field(halo=1)  # the same local shapes: only the signatures differ
    kinds = [cells, u] if comm.Get_rank() == 1 else [u, cells]
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm,
            lambda t=transport: HaloExchanger(kinds, [k.zeros() for k in kinds], t),
            PatternError,
            "different decompositions of field 0",
            "stagger='y'",
        )
    d.comm.close()


def check_bad_staggered_shape(comm):
    """A cell-shaped array for a field staggered along the bounded axis: the last rank along it finds it one
    face short, every rank raises."""
    d = _grid(comm)
    v = d.field(stagger="x")
    last = d.coords[0] == d.proc_grid[0] - 1
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm,
            lambda t=transport: HaloExchanger([d, v], [d.zeros(), d.zeros()], t),
            FieldError,
            "field 1",
            ("faces along x",) if last else ("rejected its fields",),
        )
    assert_raises_everywhere(comm, lambda: v.gather(d.zeros()), FieldError, ("faces along x", "rejected"))
    assert_raises_everywhere(comm, lambda: v.scatter(np.zeros(d.global_shape)), FieldError, "faces along x")
    d.comm.close()


def check_bad_descriptor_lists(comm):
    d = _grid(comm)
    u = d.field(stagger="x", halo=1)
    assert_raises_everywhere(
        comm, lambda: gridcomm.HaloExchanger([d, u], [d.zeros(), u.zeros(), d.zeros()]), ArgumentError,
        "2 decompositions for 3 fields", "one per field",
    )  # fmt: skip
    assert_raises_everywhere(comm, lambda: gridcomm.HaloExchanger([], [d.zeros()]), ArgumentError, "empty")
    other = CartesianDecomposition(gridcomm.Communicator(comm), d.global_shape, halo=1)
    assert_raises_everywhere(
        comm, lambda: gridcomm.HaloExchanger([d, other], [d.zeros(), other.zeros()]), ArgumentError,
        "different communicators",
    )  # fmt: skip
    assert_raises_everywhere(
        comm, lambda: gridcomm.HaloExchanger([d, "u"], [d.zeros(), u.zeros()]), gridcomm.ArgumentTypeError, "str"
    )
    other.comm.close()
    d.comm.close()
