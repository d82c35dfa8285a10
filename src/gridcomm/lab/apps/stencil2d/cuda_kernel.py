"""The Jacobi update on the GPU: jacobi2d.cu compiled at run time by NVRTC (cupy.RawModule), once per GPU.

One kernel updates any rectangle of the block; a part of the update region (the whole of it, the interior, the
boundary strips) is one launch per rectangle, with the launch geometry and arguments worked out once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .... import kernels
from .numpy_kernel import fifth_of
from .regions import Rect

SOURCE = Path(__file__).with_name("jacobi2d.cu")
#: NVRTC options: --fmad=false keeps every add and multiply separately rounded, as NumPy does them; the include
#: path finds jacobi2d.cuh beside the source.
OPTIONS = ("-std=c++17", "--fmad=false", f"-I{resources.files(__package__)}")
KERNELS = {np.dtype(np.float64): "gridcomm_jacobi2d_f64", np.dtype(np.float32): "gridcomm_jacobi2d_f32"}
THREADS = 256  # per block
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y; the kernel strides over rows beyond it


def jacobi_function(dtype: np.dtype) -> Any:
    """The kernel for ``dtype`` (float64 or float32) on the current GPU."""
    return kernels.function(SOURCE, KERNELS[np.dtype(dtype)], OPTIONS)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def block_shape(rows: int, cols: int) -> tuple[int, int]:
    """Threads per block (x along columns, the contiguous axis; y along rows) for a rows x cols rectangle.

    32 x 8 for a large rectangle (a warp along each row: coalesced); a thin strip gets its threads along its long
    side instead (256 x 1 for one row, 1 x 256 for one column), so no thread of a block idles for lack of points.
    """
    bx = min(32, _pow2_at_least(cols))
    by = min(THREADS // bx, _pow2_at_least(rows))
    if by < THREADS // bx:  # too few rows to fill the block: give the threads to the columns
        bx = min(THREADS // by, max(bx, _pow2_at_least(cols)))
    return bx, by


def launch_geometry(r: Rect) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) that cover rectangle ``r``: one thread per point, the grid's y extent capped at 65535."""
    bx, by = block_shape(r.rows, r.cols)
    return (math.ceil(r.cols / bx), min(math.ceil(r.rows / by), MAX_GRID_Y)), (bx, by)


class CudaJacobi:
    """Updates named parts of the update region for either direction of the two fields, on a given stream.

    Args:
        fields: the two local CuPy arrays (C order, interior plus halo); parity p reads ``fields[p]`` and
            writes ``fields[1 - p]``.
        parts: rectangles per part name (regions.WHOLE, INNER, STRIPS).
    """

    def __init__(self, fields: Sequence[Any], parts: Mapping[str, Sequence[Rect]]) -> None:
        u = fields[0]
        if not all(f.flags.c_contiguous and f.shape == u.shape and f.dtype == u.dtype for f in fields):
            raise ValueError("both fields must be C-contiguous arrays of one shape and dtype")
        self._function = jacobi_function(u.dtype)
        fifth, pitch = fifth_of(u.dtype), np.int64(u.shape[1])
        self._launches = {
            (parity, name): [
                (
                    *launch_geometry(r),
                    (fields[parity], fields[1 - parity], pitch, *(np.int32(b) for b in r.bounds), fifth),
                )
                for r in rects
            ]
            for parity in (0, 1)
            for name, rects in parts.items()
        }

    def run(self, parity: int, part: str, stream: Any) -> None:
        """Enqueue the update of ``part`` of ``fields[1 - parity]`` from ``fields[parity]`` on ``stream``."""
        for grid, block, args in self._launches[(parity, part)]:
            self._function(grid, block, args, stream=stream)
