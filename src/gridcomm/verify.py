"""Serial references: what a rank's local array must hold after an exchange, computed from the global array."""

from __future__ import annotations

from typing import Any

import numpy as np


def expected_after_exchange(decomposition: Any, global_array: np.ndarray, fill: Any) -> np.ndarray:
    """The local array (interior plus halo) that rank ``decomposition.comm.rank`` must hold after a halo
    exchange of ``global_array``'s owned parts.

    Halo points map to global points, wrapped in periodic dimensions. Points that no exchange writes keep
    ``fill``: those beyond a non-periodic boundary and, for a star stencil, those outside the interior in
    more than one dimension.
    """
    indices, valid, outside = [], [], []
    for k, (owned, (lo, hi), n) in enumerate(
        zip(decomposition.global_slices, decomposition.halo, decomposition.global_shape, strict=True)
    ):
        g = np.arange(owned.start - lo, owned.stop + hi)
        inside_grid = (g >= 0) & (g < n)
        valid.append(inside_grid | decomposition.periodic[k])
        outside.append((g < owned.start) | (g >= owned.stop))
        indices.append(g % n)
    result = np.array(global_array[np.ix_(*indices)])
    written = np.ones(result.shape, dtype=bool)
    halo_dims = np.zeros(result.shape, dtype=np.int8)
    for k in range(decomposition.ndim):
        shape = [1] * decomposition.ndim
        shape[k] = -1
        written &= valid[k].reshape(shape)
        halo_dims += outside[k].reshape(shape)
    if decomposition.stencil == "star":
        written &= halo_dims <= 1
    result[~written] = fill
    return result
