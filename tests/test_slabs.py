"""gridcomm.slab / gridcomm.pencil and the redistribution plan behind Transposer.slabs / .pencils, in one process
(no MPI): the blocks tile the global array, they are CartesianDecomposition's blocks, every box a rank sends has
the shape of the box its peer receives it in, and bad arguments get errors that say what to give. The
redistributions themselves run under MPI in tests/mpi_programs/checks_transpose.py (1-4 ranks, hypothesis,
bitwise against the serial transpose)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from harness import stand_in_comm
from hypothesis import given, settings
from hypothesis import strategies as st

import gridcomm
from gridcomm import Box, CartesianDecomposition, DecompositionError, GridcommError
from gridcomm.slabs import balanced_grid, redistribution


@st.composite
def splits(draw):
    """(global shape, split axes, another split of as many axes, ranks, process grid)."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(ndim))
    k = draw(st.integers(1, ndim))
    axes = tuple(draw(st.permutations(range(ndim)))[:k])
    other = tuple(draw(st.permutations(range(ndim)))[:k])
    grid = tuple(draw(st.integers(1, 3)) for _ in range(k))
    return shape, axes, other, math.prod(grid), grid


@settings(max_examples=150, deadline=None)
@given(splits())
def test_the_blocks_of_all_ranks_cover_the_global_array_once(split):
    shape, axes, _, size, grid = split
    count = np.zeros(shape, dtype=int)
    for rank in range(size):
        block = gridcomm.pencil(shape, axes, rank, size, grid)
        count[block.slices] += 1
        assert all(block.shape[a] == shape[a] for a in range(len(shape)) if a not in axes)  # whole where unsplit
    assert (count == 1).all()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_blocks_are_those_of_the_cartesian_decomposition(data):
    """The same split rule as CartesianDecomposition (remainder to the first blocks, ranks in C order)."""
    ndim = data.draw(st.integers(1, 3))
    grid = tuple(data.draw(st.integers(1, 3)) for _ in range(ndim))
    shape = tuple(data.draw(st.integers(p, p + 5)) for p in grid)  # a block of at least one point each
    size = math.prod(grid)
    for rank in range(size):
        cartesian = CartesianDecomposition(stand_in_comm(rank, size), shape, halo=0, proc_grid=grid)
        assert gridcomm.pencil(shape, range(ndim), rank, size, grid).slices == cartesian.global_slices


@settings(max_examples=150, deadline=None)
@given(splits())
def test_every_block_sent_is_received_in_a_box_of_its_shape(split):
    shape, axes, other, size, grid = split
    plans = [redistribution(shape, axes, other, rank, size, grid) for rank in range(size)]
    for rank, plan in enumerate(plans):
        landed = np.zeros(plan.destination.shape, dtype=int)
        for peer, box in plan.recv.items():
            assert plans[peer].send[rank].shape == box.shape
            landed[box.slices] += 1
        assert (landed == 1).all()  # the destination filled exactly once
        assert set(plan.send) == {q for q in range(size) if rank in plans[q].recv}


def test_a_slab_is_the_block_of_one_split_axis():
    assert gridcomm.slab((10, 8), 0, 3, 4) == Box((8, 0), (10, 8))  # 10 rows over 4 ranks: 3, 3, 2, 2
    assert gridcomm.slab((10, 8), -1, 1, 4) == Box((0, 2), (10, 4))
    assert gridcomm.slab((2, 8), 0, 3, 4).shape == (0, 8)  # fewer rows than ranks: an empty slab
    assert gridcomm.pencil((6, 5, 7), (0, 2), 3, 4) == Box((3, 0, 4), (6, 5, 7))  # grid (2, 2)


def test_the_balanced_grid_is_as_square_as_the_rank_count_allows():
    assert balanced_grid(12, 2) == (4, 3)
    assert balanced_grid(8, 3) == (2, 2, 2)
    assert balanced_grid(7, 2) == (7, 1)
    assert balanced_grid(1, 2) == (1, 1)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: gridcomm.slab((4, 4), 2, 0, 2), ["axis=2", "between -2 and 1", "2-D"]),
        (lambda: gridcomm.pencil((4, 4, 4), (1, 1), 0, 4), ["names an axis twice"]),
        (lambda: gridcomm.pencil((4, 4, 4), (0, 1), 0, 4, (3, 2)), ["proc_grid=(3, 2)", "4 in all"]),
        (lambda: gridcomm.slab((4, 0), 0, 0, 2), ["global_shape=0", "at least 1"]),
        (lambda: gridcomm.slab((4, 4), 0, 2, 2), ["rank=2", "between 0 and 1"]),
        (lambda: redistribution((4, 4, 4), (0,), (1, 2), 0, 2), ["split a different number of axes"]),
    ],
)
def test_bad_arguments_say_what_to_give(call, words):
    with pytest.raises(GridcommError) as error:
        call()
    assert all(w in str(error.value) for w in words), str(error.value)


def test_a_repeated_axis_is_a_decomposition_error():
    with pytest.raises(DecompositionError):
        gridcomm.pencil((4, 4), (0, -2), 0, 1)  # -2 is axis 0 of a 2-D array
