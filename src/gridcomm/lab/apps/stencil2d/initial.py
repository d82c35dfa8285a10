"""The initial field: a smooth function plus a seeded perturbation, a function of the global point alone.

Every value is made from the point's global indices with integer arithmetic and IEEE +, -, *, / (each correctly
rounded, no transcendental function whose vector and scalar paths might round differently), so a rank's block
holds bitwise the values of the same points in a one-rank run, whatever the decomposition.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_SEED = 2024
#: Amplitude of the perturbation (the smooth part is of order 1).
NOISE = 0.1

_MASK = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser of uint64 array ``z`` (wrapping arithmetic), in place."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _rows(global_shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, seed: int) -> np.ndarray:
    """float64 values at global rows ``rows`` (column vector) and columns ``cols`` (row vector)."""
    nx, ny = global_shape
    x = rows / max(nx - 1, 1)  # in [0, 1] along the first axis
    y = cols / max(ny - 1, 1)
    smooth = 1.0 + 2.0 * x * (1.0 - x) - y * y + 0.5 * x * y
    offset = np.uint64((seed * _GOLDEN + _GOLDEN) & _MASK)
    z = (rows * ny + cols).astype(np.uint64) + offset
    unit = (_splitmix64(z) >> np.uint64(11)).astype(np.float64) * 2.0**-53  # uniform in [0, 1)
    return smooth + NOISE * (unit - 0.5)


def initial_block(
    global_shape: Sequence[int],
    slices: Sequence[slice] | None = None,
    dtype: np.dtype | type = np.float64,
    seed: int = DEFAULT_SEED,
) -> np.ndarray:
    """The initial field on the points ``slices`` of the global grid (all of it when None), as ``dtype``.

    Values are dimensionless, of order 1: ``1 + 2x(1-x) - y^2 + xy/2`` with x, y the global indices scaled to
    [0, 1], plus a perturbation uniform in [-0.05, 0.05) hashed from the global point index and ``seed``.
    Computed in float64 and rounded once to ``dtype``, in chunks of rows so that memory stays small.
    """
    nx, ny = (int(s) for s in global_shape)
    rows_slice, cols_slice = slices if slices is not None else (slice(0, nx), slice(0, ny))
    rows = np.arange(rows_slice.start, rows_slice.stop, dtype=np.int64)
    cols = np.arange(cols_slice.start, cols_slice.stop, dtype=np.int64)[None, :]
    out = np.empty((rows.size, cols.size), dtype=dtype)
    chunk = max(1, 2**20 // max(cols.size, 1))
    for start in range(0, rows.size, chunk):
        block = rows[start : start + chunk, None]
        out[start : start + chunk] = _rows((nx, ny), block, cols, seed)
    return out
