"""Choosing a process grid: the factorisation of the rank count that moves the fewest halo bytes."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from ..errors import DecompositionError


def factorisations(n: int, ndim: int) -> Iterator[tuple[int, ...]]:
    """Every ordered tuple of ``ndim`` positive integers whose product is ``n``."""
    if ndim == 1:
        yield (n,)
        return
    for first in range(1, n + 1):
        if n % first == 0:
            for rest in factorisations(n // first, ndim - 1):
                yield (first, *rest)


def block_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``parts`` contiguous blocks of ``n`` points, the remainder spread over the first blocks."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def halo_volume(
    grid: Sequence[int], global_shape: Sequence[int], halo: Sequence[tuple[int, int]], periodic: Sequence[bool]
) -> int:
    """Halo points the largest subdomain receives (faces only) for process grid ``grid``."""
    largest = [math.ceil(n / p) for n, p in zip(global_shape, grid, strict=True)]
    volume = 0
    for k, (p, (lo, hi), wraps) in enumerate(zip(grid, halo, periodic, strict=True)):
        if p > 1 or wraps:
            face = math.prod(largest[:k] + largest[k + 1 :])
            volume += (lo + hi) * face
    return volume


def halo_fits(
    grid: Sequence[int], global_shape: Sequence[int], halo: Sequence[tuple[int, int]], periodic: Sequence[bool]
) -> bool:
    """Whether every block of ``grid`` is at least as wide as the halo in each dimension that is exchanged."""
    return all(
        not (p > 1 or wraps) or max(lo, hi) <= n // p
        for p, n, (lo, hi), wraps in zip(grid, global_shape, halo, periodic, strict=True)
    )


def choose_proc_grid(
    nranks: int,
    global_shape: Sequence[int],
    halo: Sequence[tuple[int, int]],
    periodic: Sequence[bool],
    fixed: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The process grid for ``nranks`` ranks that minimises the halo volume of the largest subdomain.

    Like MPI_Dims_create, but weighing each dimension by its halo width and extent rather than only
    balancing the factors; ties go to the most balanced grid, larger factors first (MPI's order).
    Grids whose blocks are all at least as wide as the halo come first, so that a grid that fits is chosen
    whenever one exists. Entries of ``fixed`` that are non-zero are kept as given.
    """
    ndim = len(global_shape)
    fixed = tuple(fixed) if fixed is not None else (0,) * ndim
    weights = halo if any(lo + hi for lo, hi in halo) else [(1, 1)] * ndim
    best: tuple[tuple[bool, int, int, tuple[int, ...]], tuple[int, ...]] | None = None
    for grid in factorisations(nranks, ndim):
        if any(f and f != p for f, p in zip(fixed, grid, strict=True)):
            continue
        if any(p > n for p, n in zip(grid, global_shape, strict=True)):
            continue
        key = (
            not halo_fits(grid, global_shape, halo, periodic),
            halo_volume(grid, global_shape, weights, periodic),
            max(grid) - min(grid),
            tuple(-p for p in grid),
        )
        if best is None or key < best[0]:
            best = (key, grid)
    if best is None:
        raise DecompositionError(
            f"cannot split global_shape={tuple(global_shape)} over {nranks} ranks"
            + (f" with proc_grid={tuple(fixed)}" if any(fixed) else "")
            + ": every process grid would leave some rank with no points; use fewer ranks or a larger grid"
        )
    return best[1]
