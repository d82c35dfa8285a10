"""Which points of a rank's block a step updates, and how they split into the interior and boundary strips.

Rectangles are in local indices of the rank's array (interior plus a halo of ``h`` points on each side: the
block's points are rows and columns ``h .. h + n - 1``). The outermost ring of the global grid is a fixed
(Dirichlet) boundary: its points are never updated.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The parts of the update region a kernel can be asked to update.
WHOLE, INNER, STRIPS = "whole", "inner", "strips"


@dataclass(frozen=True)
class Rect:
    """Rows ``row0 <= i < row1`` and columns ``col0 <= j < col1`` of a local array."""

    row0: int
    row1: int
    col0: int
    col1: int

    @property
    def rows(self) -> int:
        return max(0, self.row1 - self.row0)

    @property
    def cols(self) -> int:
        return max(0, self.col1 - self.col0)

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.cols == 0

    @property
    def points(self) -> int:
        return self.rows * self.cols

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        """(row0, row1, col0, col1), the order of the CUDA kernel's bounds arguments."""
        return self.row0, self.row1, self.col0, self.col1


def update_region(global_shape: tuple[int, int], start: tuple[int, int], shape: tuple[int, int], halo: int) -> Rect:
    """The points of a block that a step updates: those not on the global grid's outermost ring.

    Args:
        global_shape: points of the whole grid per dimension.
        start: global index of the block's first point per dimension.
        shape: points of the block per dimension.
        halo: ghost width of the local array (its block starts at local index ``halo``).
    """
    bounds = []
    for total, first, size in zip(global_shape, start, shape, strict=True):
        lo = max(first, 1)  # global index of the first updated point
        hi = min(first + size, total - 1)  # one past the last
        bounds += [lo - first + halo, max(hi, lo) - first + halo]
    return Rect(*bounds)


def split_region(region: Rect, shape: tuple[int, int], halo: int) -> dict[str, list[Rect]]:
    """The update region as one rectangle (WHOLE), the part that reads no halo point (INNER: at least one point
    from every edge of the block) and what is left of it (STRIPS: up to four boundary strips, top, bottom, left,
    right). Empty rectangles are left out, so a part may be an empty list."""
    n0, n1 = shape
    inner = Rect(
        max(region.row0, halo + 1),
        min(region.row1, halo + n0 - 1),
        max(region.col0, halo + 1),
        min(region.col1, halo + n1 - 1),
    )
    if region.empty:
        return {WHOLE: [], INNER: [], STRIPS: []}
    if inner.empty:
        return {WHOLE: [region], INNER: [], STRIPS: [region]}
    strips = [
        Rect(region.row0, inner.row0, region.col0, region.col1),
        Rect(inner.row1, region.row1, region.col0, region.col1),
        Rect(inner.row0, inner.row1, region.col0, inner.col0),
        Rect(inner.row0, inner.row1, inner.col1, region.col1),
    ]
    return {WHOLE: [region], INNER: [inner], STRIPS: [s for s in strips if not s.empty]}
