"""How the spectral-transform dwarf shares its work between ranks.

Grid-point space is split by latitude rows (``row_shares``): each rank owns as many rows as the others and as
many grid points, in a few bands of consecutive rows, one nearer the pole (short rows) and one nearer the equator
(long rows) in each hemisphere. Contiguous bands balanced by points alone (``row_bands``) give the polar ranks
far more rows than the equatorial ones (451 against 189 on O640 over 4 ranks), and the transposition moves every
wavenumber of every row: those ranks then receive that much more of it. Spectral space is split by zonal
wavenumber m:
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


def row_shares(points_per_row: np.ndarray, nranks: int) -> list[np.ndarray]:
    """Rows shared so that every rank has as many rows as the others and as many points, within one row per
    hemisphere and band: the northern rows i and N - 1 - i paired (on the octahedral grid, whose rows grow by 4
    points a row, every pair has as many points as any other), the pairs dealt in nranks runs of consecutive
    pairs, each rank taking its run (a band nearer the pole and one nearer the equator), the middle row of an odd
    N last, and the southern mirrors of its rows. Where there are fewer than 2 x nranks northern rows, or the
    rows are not symmetric about the equator, ``row_bands``.

    Args:
        points_per_row: grid points in each row, north to south.
        nranks: ranks to share the rows (at most the number of rows).

    Returns:
        For each rank, the row indices it owns (ascending).
    """
    counts = np.asarray(points_per_row, dtype=np.int64)
    north = len(counts) // 2
    if len(counts) % 2 or 2 * nranks > north or not np.array_equal(counts, counts[::-1]):
        return row_bands(counts, nranks)
    runs = np.array_split(np.arange(north // 2), nranks)
    shares = [np.concatenate([run, north - 1 - run]) for run in runs]
    if north % 2:  # the middle row of the hemisphere, pairless
        shares[-1] = np.append(shares[-1], north // 2)
    return [np.sort(np.concatenate([rows, 2 * north - 1 - rows])) for rows in shares]


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


def row_groups(rows: np.ndarray, points_per_row: np.ndarray, groups: int) -> list[np.ndarray]:
    """A rank's ``rows`` cut into at most ``groups`` groups that the pipelined dwarf transposes apart, each group
    holding as many rows as points would say: a group's transposition moves every wavenumber of its rows (bytes
    in proportion to its rows) while its FFTs cost in proportion to its points, and the transposition of one
    group hides behind the FFTs of another only where both keep one ratio. So a row and its mirror in the other
    hemisphere (as long) stay together, and the shortest of these pairs go with the longest (on the octahedral
    grid every such quad of rows has as many points as any other); the quads are dealt to the groups in runs
    as even as they allow. (Groups of consecutive rows put a rank's short polar rows in groups of their own,
    whose transpositions outlasted their FFTs.)

    Args:
        rows: the rank's latitude rows (ascending), e.g. ``row_shares(...)[rank]``.
        points_per_row: grid points in each row of the grid, north to south.
        groups: the most groups wanted (fewer where there are fewer quads).

    Returns:
        The groups' rows, each ascending.
    """
    counts = np.asarray(points_per_row, dtype=np.int64)
    last = len(counts) - 1
    mine = set(np.asarray(rows).tolist())
    units: list[list[int]] = []
    for r in sorted(mine):
        mirror = last - r
        if r <= mirror:
            units.append([r, mirror] if mirror != r and mirror in mine else [r])
        elif mirror not in mine:
            units.append([r])
    units.sort(key=lambda unit: (int(counts[unit[0]]), unit[0]))
    quads = [units[i] + units[-1 - i] for i in range(len(units) // 2)]
    if len(units) % 2:
        quads.append(units[len(units) // 2])
    runs = np.array_split(np.arange(len(quads)), max(1, min(groups, len(quads))))
    return [np.sort(np.concatenate([quads[i] for i in run])) for run in runs]
