"""How the spectral-transform dwarf shares its work between ranks.

Grid-point space is split by latitude rows: each rank owns a contiguous band of rows, bands balanced by
their number of grid points (rows near the poles are short). Spectral space is split by zonal wavenumber m:
the Legendre work of wavenumber m is proportional to T - m + 1 (its number of degrees l), so m is paired
with T - m (every pair costs T + 2) and the pairs are dealt to the ranks in turn, which balances the cost
to within one pair.
"""

from __future__ import annotations

import itertools

import numpy as np

from ....errors import ArgumentError


def row_bands(points_per_row: np.ndarray, nranks: int) -> list[np.ndarray]:
    """Contiguous bands of rows, one per rank, each as near to an equal share of the points as the rows
    allow (rank r's band ends at the first row boundary at or after (r + 1) / nranks of the points).

    Args:
        points_per_row: grid points in each row, north to south.
        nranks: ranks to share the rows (at most the number of rows).

    Returns:
        For each rank, the row indices it owns (ascending).
    """
    counts = np.asarray(points_per_row, dtype=np.int64)
    nrows = len(counts)
    if not 1 <= nranks <= nrows:
        raise ArgumentError(f"cannot share {nrows} latitude rows between {nranks} ranks: use 1 to {nrows} ranks")
    cumulative = np.cumsum(counts)
    targets = cumulative[-1] * np.arange(1, nranks) / nranks
    # The boundary after row k is the first whose cumulative count reaches the target; at least one row each.
    cuts = np.searchsorted(cumulative, targets, side="left") + 1
    bounds = [0]
    for r, cut in enumerate(cuts):
        bounds.append(int(min(max(cut, bounds[-1] + 1), nrows - (nranks - 1 - r))))
    bounds.append(nrows)
    return [np.arange(a, b) for a, b in itertools.pairwise(bounds)]


def wavenumber_sets(truncation: int, nranks: int) -> list[np.ndarray]:
    """Zonal wavenumbers 0..T dealt to ``nranks`` ranks in pairs (m, T - m), pair k to rank k mod nranks,
    so every rank's Legendre work (the sum of T - m + 1 over its m) is within one pair of the others'.

    Returns:
        For each rank, its wavenumbers (ascending). A rank may own none when nranks > (T + 2) // 2.
    """
    if truncation < 0:
        raise ArgumentError(f"truncation T must be at least 0, got {truncation}")
    if nranks < 1:
        raise ArgumentError(f"nranks must be at least 1, got {nranks}")
    owned: list[list[int]] = [[] for _ in range(nranks)]
    for k, m in enumerate(range((truncation + 2) // 2)):
        pair = {m, truncation - m}
        owned[k % nranks].extend(sorted(pair))
    return [np.array(sorted(ms), dtype=np.int64) for ms in owned]


def legendre_cost(truncation: int, ms: np.ndarray) -> int:
    """Relative Legendre work of the wavenumbers ``ms``: their number of (l, m) coefficients."""
    return int(np.sum(truncation - np.asarray(ms, dtype=np.int64) + 1))
