"""Process-grid choice and block sizes: pure functions, tested in-process against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from harness import examples, stand_in_comm
from hypothesis import given, settings
from hypothesis import strategies as st

from gridcomm import CartesianDecomposition, DecompositionError
from gridcomm.decomp.procgrid import block_sizes, choose_proc_grid, factorisations


def brute_factorisations(n: int, ndim: int) -> set[tuple[int, ...]]:
    return {g for g in itertools.product(range(1, n + 1), repeat=ndim) if math.prod(g) == n}


@given(st.integers(1, 64), st.integers(1, 3))
def test_factorisations_are_every_ordered_factorisation_once(n, ndim):
    found = list(factorisations(n, ndim))
    assert len(found) == len(set(found))
    assert set(found) == brute_factorisations(n, ndim)


@given(st.integers(0, 500), st.integers(1, 40))
def test_block_sizes_first_remainder_blocks_get_one_more(n, parts):
    sizes = block_sizes(n, parts)
    assert len(sizes) == parts
    assert sum(sizes) == n
    base, extra = divmod(n, parts)
    assert sizes == [base + 1] * extra + [base] * (parts - extra)


def test_block_sizes_examples():
    assert block_sizes(10, 3) == [4, 3, 3]
    assert block_sizes(11, 4) == [3, 3, 3, 2]
    assert block_sizes(8, 4) == [2, 2, 2, 2]


def largest_subdomain_halo_volume(grid, shape, halo, periodic) -> int:
    """Halo points (faces) that the largest block receives; dimensions neither split nor periodic send none.
    With no halo at all every dimension counts with width 1 on each side (a plain balanced split)."""
    if not any(lo + hi for lo, hi in halo):
        halo = [(1, 1)] * len(shape)
    largest = [-(-n // p) for n, p in zip(shape, grid, strict=True)]
    total = 0
    for k, (p, (lo, hi), wraps) in enumerate(zip(grid, halo, periodic, strict=True)):
        if p > 1 or wraps:
            total += (lo + hi) * math.prod(largest[:k] + largest[k + 1 :])
    return total


def halo_fits(grid, shape, halo, periodic) -> bool:
    """Every block is at least as wide as the halo in each dimension that is exchanged."""
    return all(
        not (p > 1 or wraps) or max(lo, hi) <= n // p
        for p, n, (lo, hi), wraps in zip(grid, shape, halo, periodic, strict=True)
    )


def candidate_grids(nranks, shape, fixed):
    """Factorisations that keep the fixed entries and give every rank at least one point."""
    return [
        g
        for g in brute_factorisations(nranks, len(shape))
        if all(f in (0, p) for f, p in zip(fixed, g, strict=True))
        and all(p <= n for p, n in zip(g, shape, strict=True))
    ]


def best_grid(candidates, shape, halo, periodic):
    """The least halo volume, then the most balanced, then larger factors first (None if no candidates)."""
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda g: (largest_subdomain_halo_volume(g, shape, halo, periodic), max(g) - min(g), [-p for p in g]),
    )


@st.composite
def grid_problems(draw):
    ndim = draw(st.integers(1, 3))
    nranks = draw(st.integers(1, 24))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(ndim))
    halo = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    periodic = tuple(draw(st.booleans()) for _ in range(ndim))
    fixed = tuple(draw(st.sampled_from([0, 0, 0, 1, 2, 3, 4])) for _ in range(ndim))
    return nranks, shape, halo, periodic, fixed


@settings(max_examples=examples(400))
@given(grid_problems())
def test_choose_proc_grid_matches_brute_force(problem):
    """The documented choice: least halo volume of the largest subdomain, ties to the most balanced grid,
    larger factors first. (Where that grid is too narrow for the halo, the best grid that fits is accepted
    too: see test_unconstrained_decomposition_finds_a_grid_that_fits.)"""
    nranks, shape, halo, periodic, fixed = problem
    candidates = candidate_grids(nranks, shape, fixed)
    if not candidates:
        with pytest.raises(DecompositionError, match="cannot split"):
            choose_proc_grid(nranks, shape, halo, periodic, fixed)
        return
    got = choose_proc_grid(nranks, shape, halo, periodic, fixed)
    assert math.prod(got) == nranks
    assert all(f in (0, p) for f, p in zip(fixed, got, strict=True))
    assert all(p <= n for p, n in zip(got, shape, strict=True))
    best = best_grid(candidates, shape, halo, periodic)
    acceptable = {best}
    if not halo_fits(best, shape, halo, periodic):
        fitting = [g for g in candidates if halo_fits(g, shape, halo, periodic)]
        acceptable.add(best_grid(fitting, shape, halo, periodic) or best)
    assert got in acceptable, (
        f"chose {got} (volume {largest_subdomain_halo_volume(got, shape, halo, periodic)}), brute force "
        f"{best} (volume {largest_subdomain_halo_volume(best, shape, halo, periodic)})"
    )


@settings(max_examples=examples(300))
@given(grid_problems())
def test_unconstrained_decomposition_finds_a_grid_that_fits(problem):
    """With proc_grid=None (or 0 entries) gridcomm chooses the grid: where some grid of the rank count gives
    every rank a block at least as wide as the halo, the decomposition must be built, not refused."""
    nranks, shape, halo, periodic, fixed = problem
    fitting = [g for g in candidate_grids(nranks, shape, fixed) if halo_fits(g, shape, halo, periodic)]
    if not fitting:
        return
    try:
        d = CartesianDecomposition(stand_in_comm(0, nranks), shape, halo=halo, periodic=periodic, proc_grid=fixed)
    except DecompositionError as exc:
        pytest.fail(f"{exc}\n... but proc_grid={fitting[0]} fits (of {fitting})")
    assert halo_fits(d.proc_grid, shape, halo, periodic)


def test_unconstrained_decomposition_example():
    """6 ranks, (16, 8), halo 3: (3, 2) fits (blocks of 5-6 by 4), yet the grid gridcomm picks does not."""
    d = CartesianDecomposition(stand_in_comm(0, 6), (16, 8), halo=3)
    assert d.proc_grid == (3, 2)


def test_choose_proc_grid_examples():
    no_halo, one = ((0, 0),) * 2, ((1, 1),) * 2
    # Balanced, larger factors first (like MPI_Dims_create) when nothing else decides.
    assert choose_proc_grid(4, (16, 16), one, (True, True)) == (2, 2)
    assert choose_proc_grid(6, (12, 12), one, (True, True)) == (3, 2)
    assert choose_proc_grid(2, (8, 8), no_halo, (False, False)) == (2, 1)
    assert choose_proc_grid(8, (12, 12, 12), ((1, 1),) * 3, (True,) * 3) == (2, 2, 2)
    # Splitting a dimension without halo costs nothing.
    assert choose_proc_grid(4, (8, 8), ((1, 1), (0, 0)), (False, False)) == (1, 4)
    # A long dimension is split before a short one.
    assert choose_proc_grid(4, (400, 10), one, (False, False)) == (4, 1)
    # Fixed entries are kept.
    assert choose_proc_grid(8, (16, 16, 16), ((1, 1),) * 3, (True,) * 3, fixed=(0, 8, 0)) == (1, 8, 1)
    assert choose_proc_grid(1, (5, 5), one, (True, True)) == (1, 1)


def test_choose_proc_grid_impossible():
    with pytest.raises(DecompositionError, match=r"cannot split global_shape=\(2, 2\) over 3 ranks"):
        choose_proc_grid(3, (2, 2), ((1, 1),) * 2, (False, False))
    with pytest.raises(DecompositionError, match=r"proc_grid=\(3, 0\)"):
        choose_proc_grid(4, (16, 16), ((1, 1),) * 2, (False, False), fixed=(3, 0))
