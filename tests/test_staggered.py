"""Fields of their own halos and staggering (``decomposition.field``), checked serially for every rank.

As in test_pattern_layout.py, each rank's decomposition is built in one process on a stand-in communicator: each
field's pattern is simulated box by box against a serial reference that builds the global staggered array, and
the pieces of the exchange that bind fields of different patterns (layouts, own copies, validation plans) are
checked without MPI. The exchanges themselves run under MPI in tests/mpi_programs/checks_staggered.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from harness import (
    DTYPES,
    cell_bytes,
    describe_mismatch,
    every_rank,
    expected_cells,
    local_with_halo,
    staggered_owned_slices,
    staggered_shape,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gridcomm import ArgumentTypeError, DecompositionError, FieldError
from gridcomm.decomp.field import normalise_stagger
from gridcomm.decomp.procgrid import factorisations
from gridcomm.packing import FieldSpec, Layout, local_copies
from gridcomm.pattern import FieldPatterns


def staggered_owned(d, stagger) -> tuple[slice, ...]:
    return staggered_owned_slices(d.global_shape, d.proc_grid, d.coords, d.periodic, stagger)


@st.composite
def staggered_cases(draw, max_ranks=8):
    n = draw(st.integers(1, max_ranks))
    ndim = draw(st.integers(1, 3))
    grid = draw(st.sampled_from(list(factorisations(n, ndim))))
    halo = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    least = [max(p, p * max(h)) for p, h in zip(grid, halo, strict=True)]
    shape = tuple(draw(st.integers(m, m + 7)) for m in least)
    periodic = tuple(draw(st.booleans()) for _ in range(ndim))
    stencil = draw(st.sampled_from(["box", "star"]))
    ranks = every_rank(n, shape, halo=halo, periodic=periodic, proc_grid=grid, stencil=stencil)
    fields = []
    for _ in range(draw(st.integers(1, 3))):
        field_halo = tuple((draw(st.integers(0, lo)), draw(st.integers(0, hi))) for lo, hi in halo)
        stagger = tuple(k for k in range(ndim) if draw(st.booleans()))
        fields.append((field_halo, stagger, draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF"))))
    return ranks, fields, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=400, deadline=None)
@given(staggered_cases())
def test_staggered_patterns_simulated_serially_match_reference(case):
    """Each field's shapes are the reference's, and copying every sender's boxes into its receiver's, field by
    field, gives every rank exactly its part of the global staggered array and the halo around it."""
    ranks, fields, seed = case
    d0 = ranks[0]
    for i, (halo, stagger, dtype, order) in enumerate(fields):
        per_rank = [d.field(halo=halo, stagger=stagger) for d in ranks]
        g = np.random.default_rng(seed + i).integers(
            0, 256, staggered_shape(d0.global_shape, d0.periodic, stagger), np.uint8
        )
        g = g.astype(dtype) if dtype != "bool" else (g & 1).astype(bool)
        owned = [staggered_owned(d, stagger) for d in ranks]
        for f, mine in zip(per_rank, owned, strict=True):
            assert f.global_shape == g.shape and f.global_slices == mine and f.halo == halo and f.stagger == stagger
            assert f.local_shape == local_with_halo(mine, halo, g, order).shape
        arrays = [local_with_halo(mine, halo, g, order) for mine in owned]
        before = [a.copy() for a in arrays]
        plans = [{p.rank: p for p in f.pattern().peers} for f in per_rank]
        for sender, plan in enumerate(plans):
            for receiver, out in plan.items():
                back = plans[receiver][sender]
                for src, dst in zip(out.send, back.recv, strict=True):
                    cell_bytes(arrays[receiver])[dst.slices] = cell_bytes(before[sender])[src.slices]
        for rank, (a, mine) in enumerate(zip(arrays, owned, strict=True)):
            problem = describe_mismatch(a, expected_cells(g, mine, halo, d0.periodic, d0.stencil))
            assert problem is None, f"field {i} (halo {halo}, stagger {stagger}) on rank {rank}: {problem}"


@settings(max_examples=200, deadline=None)
@given(staggered_cases())
def test_the_decompositions_own_field_is_todays_exchange(case):
    """``grid.field()`` (and a field of the decomposition's halo, unstaggered) plans exactly what the decomposition
    plans, and fields sharing one pattern lay out their messages exactly as one pattern for all of them does."""
    ranks, fields, _ = case
    specs = [FieldSpec(np.dtype(dtype), order) for _, _, dtype, order in fields]
    for d in ranks:
        today = d.pattern()
        for same in (d.field(), d.field(halo=d.halo, stagger=None)):
            assert same.pattern() == today and same.local_shape == d.local_shape and same.signature == d.signature
        uniform = Layout.build(today, specs)
        assert Layout.build(FieldPatterns.uniform(today, len(specs)), specs) == uniform
        assert Layout.build(FieldPatterns(tuple(d.field().pattern() for _ in specs)), specs) == uniform


@settings(max_examples=200, deadline=None)
@given(staggered_cases())
def test_mixed_layouts_carry_each_fields_own_selections(case):
    """A message to a peer holds, field after field, exactly that field's boxes for the peer (none where a field
    exchanges nothing with it), and what a rank sends a peer is exactly as long as what the peer expects."""
    ranks, fields, _ = case
    specs = [FieldSpec(np.dtype(dtype), order) for _, _, dtype, order in fields]
    layouts = []
    for d in ranks:
        patterns = FieldPatterns(tuple(d.field(halo=h, stagger=s).pattern() for h, s, _, _ in fields))
        layout = Layout.build(patterns, specs)
        layouts.append(layout)
        for m in layout.sends:
            wanted = [(f, box) for f, plan in enumerate(patterns.plans(m.peer)) for box in plan.send]
            assert [(s.field, s.selection) for s in m.segments] == wanted
    for rank, layout in enumerate(layouts):
        for m in layout.sends:
            (back,) = [r for r in layouts[m.peer].recvs if r.peer == rank]
            assert back.nbytes == m.nbytes
            assert [s.nbytes for s in back.segments] == [s.nbytes for s in m.segments]


def test_own_copies_per_field_on_one_rank():
    """Over one rank, periodic: each field wraps onto itself with its own boxes, box to box."""
    (d,) = every_rank(1, (6, 5), halo=2, periodic=True)
    cells, xfaces = d.field(halo=1), d.field(halo=((0, 1), (2, 0)), stagger="x")
    patterns = FieldPatterns((cells.pattern(), xfaces.pattern()))
    own = patterns.plans(0)
    assert [len(p.send) for p in own] == [8, 3]  # faces, edges and corners of a 2-D box; one side less each
    specs = [FieldSpec(np.dtype("int32"), "C"), FieldSpec(np.dtype("float64"), "F")]
    arrays = [cells.zeros(np.int32), xfaces.zeros(order="F")]
    for a, f in zip(arrays, (cells, xfaces), strict=True):
        f.interior(a)[...] = np.arange(np.prod(f.interior_shape)).reshape(f.interior_shape)
    for dst, src in local_copies(own, specs, arrays, arrays, np):
        np.copyto(dst, src)
    for a, f in zip(arrays, (cells, xfaces), strict=True):
        (lo0, hi0), (lo1, hi1) = f.halo
        whole = np.arange(30).reshape(6, 5)
        expect = np.pad(whole, ((lo0, hi0), (lo1, hi1)), mode="wrap")
        assert np.array_equal(a, expect), f.placement


def test_staggered_shapes_on_periodic_and_bounded_axes():
    """Along a periodic axis faces are as many as cells; along a bounded one the last block owns face N too."""
    ranks = every_rank(4, (10, 8), halo=1, periodic=(True, False), proc_grid=(2, 2))
    for d in ranks:
        u, v, corners = d.field(stagger="x"), d.field(stagger="y"), d.field(stagger="xy")
        assert u.global_shape == (10, 8) and v.global_shape == (10, 9) and corners.global_shape == (10, 9)
        assert u.interior_shape == d.interior_shape
        assert v.interior_shape == (5, 4 + (d.coords[1] == 1))
        x, y = d.coords
        assert v.global_slices == (slice(5 * x, 5 * x + 5), slice(4 * y, 4 * y + 4 + (y == 1)))
        assert v.local_shape == (7, 6 + (d.coords[1] == 1))
        assert "faces along y" in v.placement and "faces along xy" in corners.placement


def test_stagger_forms_are_normalised():
    assert normalise_stagger(None, 3) == () == normalise_stagger("", 2)
    assert normalise_stagger("x", 2) == (0,) == normalise_stagger(0, 2) == normalise_stagger([0], 2)
    assert normalise_stagger("yx", 3) == (0, 1) == normalise_stagger(("y", 0), 3)
    assert normalise_stagger("z", 3) == (2,)
    with pytest.raises(DecompositionError, match="axes"):
        normalise_stagger("z", 2)
    with pytest.raises(DecompositionError, match="at most once"):
        normalise_stagger("xx", 2)
    for bad in ("w", 1.5, [True], {"x": 1}):
        with pytest.raises(ArgumentTypeError, match="stagger"):
            normalise_stagger(bad, 2)


def test_bad_fields_raise_clear_errors():
    """On one rank (the MPI suite checks that every rank raises together): a field halo wider than the
    decomposition's, a stagger the grid does not have, arrays of another field's shape."""
    (d,) = every_rank(1, (6, 5), halo=((2, 1), (1, 1)), periodic=(False, True))
    with pytest.raises(DecompositionError, match=r"high side of dimension 0 \(2 > 1\)"):
        d.field(halo=2)
    with pytest.raises(DecompositionError, match="axes"):
        d.field(stagger=2)
    v = d.field(stagger="x", halo=((1, 0), (1, 1)))
    assert v.local_shape == (8, 7)
    with pytest.raises(FieldError, match=r"\(8, 7\).*faces along x.*this field.empty"):
        v.interior(d.zeros())
    with pytest.raises(FieldError, match=r"expected \(7, 5\).*faces along x"):
        v.scatter(np.zeros(d.global_shape))
    assert d.field().local_shape == d.local_shape
