"""The serial reference: the same global grid on one process, no halo and no exchange, NumPy, float for float."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .config import check_dtype, check_steps
from .initial import DEFAULT_SEED, initial_block
from .numpy_kernel import JacobiViews, fifth_of, jacobi_update
from .regions import Rect


def reference_run(
    global_shape: Sequence[int], steps: int, dtype: Any = np.float64, seed: int = DEFAULT_SEED
) -> np.ndarray:
    """The global field after ``steps`` Jacobi steps from the initial field, computed on one process.

    The whole grid is one array; its outermost ring is the fixed boundary and every other point is updated
    with the same NumPy update as the distributed run (numpy_kernel.jacobi_update), so a correct distributed
    run is bitwise equal to this.
    """
    steps = check_steps(steps)
    nx, ny = (int(s) for s in global_shape)
    dtype = check_dtype(dtype)
    u = initial_block((nx, ny), None, dtype, seed)
    v = u.copy()
    region = Rect(1, max(1, nx - 1), 1, max(1, ny - 1))
    if region.empty:
        return u
    fifth = fifth_of(dtype)
    views = [JacobiViews.of(u, v, region), JacobiViews.of(v, u, region)]
    for k in range(steps):
        jacobi_update(views[k % 2], fifth)
    return u if steps % 2 == 0 else v


def compare(result: np.ndarray, reference: np.ndarray) -> tuple[bool, float]:
    """(bitwise equal, largest absolute difference) of two arrays of one shape and dtype; NaNs compare by bits."""
    if result.shape != reference.shape or result.dtype != reference.dtype:
        return False, float("inf")
    bits = np.dtype(f"u{result.dtype.itemsize}")
    equal = bool(np.array_equal(result.view(bits), reference.view(bits)))
    diff = np.abs(result.astype(np.float64) - reference.astype(np.float64))
    return equal, float(np.nanmax(diff)) if diff.size else 0.0
