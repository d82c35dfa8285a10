"""The Jacobi update on the CPU: NumPy slicing, in a fixed summation order, writing into the target in place.

``v = ((((u + u_up) + u_down) + u_left) + u_right) * 0.2`` as five in-place ufunc calls on views made once,
so a step allocates nothing. The CUDA kernel (jacobi2d.cu) adds in the same order, so both give bitwise the
same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .regions import Rect


class JacobiViews(NamedTuple):
    """The five source views and the target view of one rectangle."""

    centre: np.ndarray
    up: np.ndarray
    down: np.ndarray
    left: np.ndarray
    right: np.ndarray
    out: np.ndarray

    @classmethod
    def of(cls, u: np.ndarray, v: np.ndarray, r: Rect) -> JacobiViews:
        """Views of ``u`` around rectangle ``r`` and of ``v`` on it (``r`` must not touch the array's edge)."""
        rows, cols = slice(r.row0, r.row1), slice(r.col0, r.col1)
        return cls(
            u[rows, cols],
            u[r.row0 - 1 : r.row1 - 1, cols],
            u[r.row0 + 1 : r.row1 + 1, cols],
            u[rows, r.col0 - 1 : r.col1 - 1],
            u[rows, r.col0 + 1 : r.col1 + 1],
            v[rows, cols],
        )


def jacobi_update(views: JacobiViews, fifth: np.generic) -> None:
    """``out = ((((centre + up) + down) + left) + right) * fifth``, in place in ``out``."""
    out = views.out
    np.add(views.centre, views.up, out=out)
    np.add(out, views.down, out=out)
    np.add(out, views.left, out=out)
    np.add(out, views.right, out=out)
    np.multiply(out, fifth, out=out)


def fifth_of(dtype: np.dtype) -> np.generic:
    """The stencil weight 0.2 rounded to ``dtype`` (the same scalar is handed to the CUDA kernel)."""
    return np.dtype(dtype).type(0.2)


class NumpyJacobi:
    """Updates named parts of the update region for either direction of the two fields.

    Args:
        fields: the two local arrays (interior plus halo); parity p reads ``fields[p]`` and writes
            ``fields[1 - p]``.
        parts: rectangles per part name (regions.WHOLE, INNER, STRIPS).
    """

    def __init__(self, fields: Sequence[np.ndarray], parts: Mapping[str, Sequence[Rect]]) -> None:
        self._fifth = fifth_of(fields[0].dtype)
        self._views = {
            (parity, name): [JacobiViews.of(fields[parity], fields[1 - parity], r) for r in rects]
            for parity in (0, 1)
            for name, rects in parts.items()
        }

    def run(self, parity: int, part: str, stream: Any = None) -> None:
        """Update ``part`` of ``fields[1 - parity]`` from ``fields[parity]`` (``stream`` is ignored)."""
        for views in self._views[(parity, part)]:
            jacobi_update(views, self._fifth)
