"""Where a selection lies in memory: equally long contiguous runs on a 2-level grid of byte offsets.

Every selection gridcomm moves (a box of a 1- to 3-D array, or rows of an array with trailing axes, in
C or Fortran order) is a set of contiguous runs of ``run_bytes`` each; run ``(i0, i1)`` starts at byte

    start + i0 * stride0 + j * stride1,   j = index[i1] for rows, else i1,

and the runs follow each other in the message in (i0, i1) order, i1 fastest: the order in which the copy
packer lays out the selection. The direct and CUDA packers both work from this description.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..pattern import Box, Rows, Selection
from .layout import FieldSpec


@dataclass(frozen=True)
class RunGrid:
    """A selection as ``n0 * n1`` runs of ``run_bytes`` bytes (see the module docstring)."""

    start: int
    n0: int
    n1: int
    stride0: int
    stride1: int
    run_bytes: int
    index: np.ndarray | None = None

    def offsets(self) -> np.ndarray:
        """Byte offset of every run, in message order."""
        inner = self.index if self.index is not None else np.arange(self.n1, dtype=np.int64)
        outer = np.arange(self.n0, dtype=np.int64)
        return (self.start + outer[:, None] * self.stride0 + inner[None, :] * self.stride1).ravel()


def _c_view(shape: Sequence[int], order: str, box: Box) -> tuple[list[int], list[int], list[int]]:
    """(shape, start, extent) of ``box`` with the axes in C order (a Fortran array is the C array of the
    reversed axes)."""
    shape, start, extent = list(shape), list(box.start), list(box.shape)
    if order == "F":
        shape, start, extent = shape[::-1], start[::-1], extent[::-1]
    return shape, start, extent


def _natural_inner(shape: Sequence[int], extent: Sequence[int]) -> int:
    """The outermost axis of the longest run: runs grow outward from the last axis while the axes inside
    them span the whole array."""
    inner = len(shape) - 1
    while inner > 0 and extent[inner] == shape[inner]:
        inner -= 1
    return inner


def _box_grid(shape: Sequence[int], itemsize: int, order: str, box: Box, inner: int | None = None) -> RunGrid:
    """The runs of ``box``; ``inner`` (at least the natural one) cuts them at a finer axis, so that two
    arrays of different shapes can describe the same box with runs of the same length."""
    shape, start, extent = _c_view(shape, order, box)
    natural = _natural_inner(shape, extent)
    inner = natural if inner is None else inner
    if inner < natural:
        raise ValueError(f"runs cut at axis {inner} are not contiguous (axis {natural} is the outermost)")
    if inner > 2:
        raise ValueError(f"a box of a {len(shape)}-D array leaves more than 2 outer axes")
    strides = [math.prod(shape[k + 1 :]) * itemsize for k in range(len(shape))]
    run_bytes = math.prod(extent[inner:]) * itemsize
    offset = sum(a * s for a, s in zip(start, strides, strict=True))
    outer = [(extent[k], strides[k]) for k in range(inner)]  # at most two axes outside the run
    while len(outer) < 2:
        outer.insert(0, (1, 0))
    (n0, s0), (n1, s1) = outer
    return RunGrid(offset, n0, n1, s0, s1, run_bytes)


def _rows_grid(rows: int, spec: FieldSpec, sel: Rows) -> RunGrid:
    items, itemsize = spec.row_items, spec.dtype.itemsize
    if spec.order == "C":  # each selected row is one run of all its items
        return RunGrid(0, 1, sel.size, 0, items * itemsize, items * itemsize, sel.index)
    # Fortran: item t of row i sits at i + rows * t, so the message holds the selected rows item by item.
    return RunGrid(0, items, sel.size, rows * itemsize, itemsize, itemsize, sel.index)


def run_grid(shape: Sequence[int], spec: FieldSpec, sel: Selection) -> RunGrid:
    """The runs of selection ``sel`` in an array of ``shape`` packed in the agreed order ``spec.order``."""
    if isinstance(sel, Rows):
        return _rows_grid(shape[0], spec, sel)
    return _box_grid(shape, spec.dtype.itemsize, spec.order, sel)


def message_grid(like: RunGrid, offset: int) -> RunGrid:
    """The runs of ``like`` as they lie one after the other in a message, from byte ``offset``."""
    return RunGrid(offset, like.n0, like.n1, like.n1 * like.run_bytes, like.run_bytes, like.run_bytes)


def paired_grids(
    src_shape: Sequence[int], src: Selection, dst_shape: Sequence[int], dst: Selection, spec: FieldSpec
) -> tuple[RunGrid, RunGrid]:
    """Run grids of the same selection in two arrays of possibly different shapes (sender and receiver),
    cut into runs of the same length so that run (i0, i1) of one is copied to run (i0, i1) of the other.

    Boxes of the same extents pair run by run. A selection that is one contiguous range (a box whose runs are
    one run, e.g. a block of a 1-D array) pairs with any selection of as many bytes: it takes the other's runs,
    laid out one after the other (``message_grid``), as a message would carry them. Other pairs raise
    ValueError (selections of different kinds or extents)."""
    if isinstance(src, Box) or isinstance(dst, Box):
        paired = _paired_with_range(src_shape, src, dst_shape, dst, spec)
        if paired is not None:
            return paired
    if isinstance(src, Rows) != isinstance(dst, Rows) or src.size != dst.size:
        raise ValueError(f"selections of different kinds or extents cannot be paired: {src} and {dst}")
    if isinstance(src, Rows):
        return _rows_grid(src_shape[0], spec, src), _rows_grid(dst_shape[0], spec, dst)
    if src.shape != dst.shape:
        raise ValueError(f"boxes of different extents cannot be paired: {src.shape} and {dst.shape}")
    inner = max(
        _natural_inner(*_c_view(src_shape, spec.order, src)[::2]),
        _natural_inner(*_c_view(dst_shape, spec.order, dst)[::2]),
    )
    itemsize = spec.dtype.itemsize
    return (
        _box_grid(src_shape, itemsize, spec.order, src, inner),
        _box_grid(dst_shape, itemsize, spec.order, dst, inner),
    )


def _paired_with_range(
    src_shape: Sequence[int], src: Selection, dst_shape: Sequence[int], dst: Selection, spec: FieldSpec
) -> tuple[RunGrid, RunGrid] | None:
    """The pair where one side is a box lying as one contiguous range and both hold as many bytes (that side
    takes the other's runs, one after the other), else None. Such a range copies into any layout of its bytes:
    e.g. a per-peer block of a 1-D buffer into a box of a 3-D array."""
    try:
        grids = run_grid(src_shape, spec, src), run_grid(dst_shape, spec, dst)
    except ValueError:  # not describable as runs: the general rules say why
        return None
    a, b = grids
    if a.n0 * a.n1 * a.run_bytes != b.n0 * b.n1 * b.run_bytes:
        return None
    for one, other in ((0, 1), (1, 0)):
        if isinstance((src, dst)[one], Box) and _one_range(grids[one]):
            paired = [grids[0], grids[1]]
            paired[one] = message_grid(grids[other], grids[one].start)
            return paired[0], paired[1]
    return None


def _one_range(grid: RunGrid) -> bool:
    """Whether ``grid`` is a single contiguous run (its outer axes are of length 1)."""
    return grid.n0 * grid.n1 == 1 and grid.index is None
