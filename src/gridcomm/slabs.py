"""Slabs and pencils: which block of a global array each rank holds when some of its axes are split over the
ranks, and the plan of boxes that moves an array from one such split to another (the redistribution between
the passes of a distributed FFT), for ``Transposer.slabs`` and ``Transposer.pencils``.

An axis of ``n`` points split over ``p`` ranks is cut as ``CartesianDecomposition`` cuts it: contiguous blocks,
the first ``n % p`` of them one point longer (mpi4py-fft's rule too), so a block may be empty where ``n < p``.
With several split axes the ranks form a process grid in C order (rank = coords[0] * p1 + coords[1], as
MPI_Cart_create without reordering). Unlike mpi4py-fft's ``Pencil``, which names the axis a pencil is aligned
with (whole on every rank), these functions name the axes that are split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .arguments import entries, whole_number
from .decomp.procgrid import block_sizes, factorisations
from .errors import DecompositionError
from .pattern import Box


def _shape(global_shape: Any) -> tuple[int, ...]:
    given = entries(global_shape, "global_shape", "give points per axis, e.g. global_shape=(64, 48, 32)")
    shape = tuple(whole_number(n, "global_shape", least=1) for n in given)
    if not shape:
        raise DecompositionError("global_shape=() has no axis; give points per axis, e.g. (64, 48, 32)")
    return shape


def _axes(axes: Any, ndim: int, what: str) -> tuple[int, ...]:
    """``axes`` as distinct axis numbers in [0, ndim) (negative ones count from the end, as NumPy's do)."""
    given = entries(axes, what, "give one axis number per split axis, e.g. (0, 1)")
    out = []
    for a in given:
        a = whole_number(a, what, least=-ndim, most=ndim - 1, meaning=f"an axis of a {ndim}-D array")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise DecompositionError(f"{what}={tuple(given)} names an axis twice; each split axis once")
    return tuple(out)


def balanced_grid(size: int, ndim: int) -> tuple[int, ...]:
    """The process grid of ``ndim`` dimensions over ``size`` ranks whose largest dimension is smallest (as
    MPI_Dims_create: dimensions in non-increasing order), e.g. (4, 3) for 12 ranks in 2 dimensions."""
    size = whole_number(size, "size", least=1, meaning="ranks")
    return min(factorisations(size, ndim), key=lambda grid: (max(grid), [-p for p in grid]))


def _grid(proc_grid: Any, size: int, ndim: int) -> tuple[int, ...]:
    if proc_grid is None:
        return balanced_grid(size, ndim)
    grid = tuple(
        whole_number(p, "proc_grid", least=1)
        for p in entries(proc_grid, "proc_grid", "give ranks per split axis, e.g. (2, 3)")
    )
    if len(grid) != ndim or math.prod(grid) != size:
        raise DecompositionError(
            f"proc_grid={grid} must give ranks for each of the {ndim} split axes, {size} in all (their product); "
            "or leave it None for a balanced grid"
        )
    return grid


def _block(shape: tuple[int, ...], axes: tuple[int, ...], grid: tuple[int, ...], rank: int) -> Box:
    """The global box of ``rank`` (checked arguments)."""
    coords = np.unravel_index(rank, grid) if grid else ()
    start, stop = [0] * len(shape), list(shape)
    for axis, parts, c in zip(axes, grid, coords, strict=True):
        sizes = block_sizes(shape[axis], parts)
        start[axis] = sum(sizes[: int(c)])
        stop[axis] = start[axis] + sizes[int(c)]
    return Box(tuple(start), tuple(stop))


def pencil(
    global_shape: Sequence[int], axes: Sequence[int], rank: int, size: int, proc_grid: Sequence[int] | None = None
) -> Box:
    """The block of a global array of ``global_shape`` that ``rank`` of ``size`` ranks holds when the axes
    ``axes`` are split over the process grid ``proc_grid`` (ranks per split axis, product ``size``; None: as
    ``balanced_grid``). A Box of global indices: ``box.shape`` is the shape of the rank's local array,
    ``global_array[box.slices]`` its values. Every other axis is whole on every rank."""
    return _checked_block(global_shape, axes, rank, size, proc_grid, "axes")


def slab(global_shape: Sequence[int], axis: int, rank: int, size: int) -> Box:
    """The slab of a global array of ``global_shape`` that ``rank`` of ``size`` ranks holds when ``axis`` is
    split over the ranks (see ``pencil``): e.g. ``slab((10, 8), 0, 3, 4)`` is ``Box((8, 0), (10, 8))``, rows
    8 and 9 (10 rows over 4 ranks: 3, 3, 2, 2)."""
    return _checked_block(global_shape, [axis], rank, size, None, "axis")


def _checked_block(global_shape: Any, axes: Any, rank: Any, size: Any, proc_grid: Any, what: str) -> Box:
    """``pencil``'s block, its arguments checked (``what``: the name of the axes argument, for errors)."""
    shape = _shape(global_shape)
    split = _axes(axes, len(shape), what)
    size = whole_number(size, "size", least=1, meaning="ranks")
    rank = whole_number(rank, "rank", least=0, most=size - 1)
    return _block(shape, split, _grid(proc_grid, size, len(split)), rank)


class Redistribution(NamedTuple):
    """One rank's part in moving a global array from one split to another (see ``redistribution``)."""

    send: dict[int, Box]  # {peer: the box of the local source array that peer receives}
    recv: dict[int, Box]  # {peer: the box of the local destination array where that peer's block lands}
    source: Box  # the rank's block before, in global indices
    destination: Box  # and after
    signature: tuple[Any, ...]  # the checked arguments, which every rank must pass alike


def redistribution(
    global_shape: Sequence[int],
    from_axes: Sequence[int],
    to_axes: Sequence[int],
    rank: int,
    size: int,
    proc_grid: Sequence[int] | None = None,
    names: tuple[str, str] = ("from_axes", "to_axes"),
) -> Redistribution:
    """What ``rank`` of ``size`` sends and receives to move a global array of ``global_shape`` split along
    ``from_axes`` to the split along ``to_axes``, both over ``proc_grid`` (dimension k splits from_axes[k],
    then to_axes[k]; None: ``balanced_grid``). ``send`` and ``recv`` are as Transposer takes them: to each peer
    the part of the rank's source block that the peer's destination block holds, from each peer the part of
    its source block that lands in the rank's destination block, in indices of the local arrays; peers that
    share nothing are left out. ``names``: what errors call the two axis arguments."""
    shape = _shape(global_shape)
    src_axes, dst_axes = (_axes(a, len(shape), name) for a, name in zip((from_axes, to_axes), names, strict=True))
    if len(src_axes) != len(dst_axes):
        raise DecompositionError(
            f"from_axes={src_axes} and to_axes={dst_axes} split a different number of axes; give one axis per "
            "process-grid dimension in each"
        )
    size = whole_number(size, "size", least=1, meaning="ranks")
    rank = whole_number(rank, "rank", least=0, most=size - 1)
    grid = _grid(proc_grid, size, len(src_axes))
    sources = [_block(shape, src_axes, grid, r) for r in range(size)]
    destinations = [_block(shape, dst_axes, grid, r) for r in range(size)]
    mine_src, mine_dst = sources[rank], destinations[rank]
    send = {q: _shifted(common, mine_src) for q in range(size) if (common := _overlap(mine_src, destinations[q]))}
    recv = {q: _shifted(common, mine_dst) for q in range(size) if (common := _overlap(sources[q], mine_dst))}
    return Redistribution(send, recv, mine_src, mine_dst, (shape, src_axes, dst_axes, grid))


def _overlap(a: Box, b: Box) -> Box | None:
    """The elements two global boxes share, or None when they share none."""
    start = tuple(max(x, y) for x, y in zip(a.start, b.start, strict=True))
    stop = tuple(min(x, y) for x, y in zip(a.stop, b.stop, strict=True))
    return Box(start, stop) if all(s < e for s, e in zip(start, stop, strict=True)) else None


def _shifted(box: Box, block: Box) -> Box:
    """Global ``box`` in indices of the local array that holds ``block``."""
    return Box(
        tuple(s - o for s, o in zip(box.start, block.start, strict=True)),
        tuple(e - o for e, o in zip(box.stop, block.start, strict=True)),
    )


__all__ = ["Redistribution", "balanced_grid", "pencil", "redistribution", "slab"]
