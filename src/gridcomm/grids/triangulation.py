"""Triangulation of the octahedral grid: zip neighbouring rows, close each pole within its polar row."""

from __future__ import annotations

import numpy as np

from .octahedral import OctahedralGrid
from .spherical import dot


def _exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]])


def band_triangles(grid: OctahedralGrid) -> np.ndarray:
    """Triangles between every pair of neighbouring rows, (sum over bands of n_north + n_south, 3).

    Each band is zipped by longitude: walking west to east, the row whose next point has the smaller
    longitude advances, and every advance makes one triangle (current north, current south, new point).
    Longitudes are compared exactly as integer fractions k/n, so the points the octahedral rows share
    (longitudes 0, 90, 180, 270 degrees) tie exactly; at a tie the row whose current point lies further west
    advances first, which cuts the quadrilateral along its shorter diagonal.
    """
    n_north, n_south = grid.nlon[:-1], grid.nlon[1:]
    nbands = n_north.size
    band_n = np.repeat(np.arange(nbands), n_north)  # one advance per point of each row (the last wraps)
    band_s = np.repeat(np.arange(nbands), n_south)
    a = np.arange(band_n.size) - np.repeat(_exclusive_cumsum(n_north), n_north)
    b = np.arange(band_s.size) - np.repeat(_exclusive_cumsum(n_south), n_south)
    # Longitude / (2 pi) of a point, scaled by n_north * n_south of its band: an exact integer.
    target = np.concatenate([(a + 1) * n_south[band_n], (b + 1) * n_north[band_s]])
    current = np.concatenate([a * n_south[band_n], b * n_north[band_s]])
    band = np.concatenate([band_n, band_s])
    south = np.concatenate([np.zeros(a.size, bool), np.ones(b.size, bool)])
    order = np.lexsort((south, current, target, band))
    band, south = band[order], south[order]
    # Pointer positions before each advance: earlier advances of the same row in the same band.
    first = _exclusive_cumsum(n_north + n_south)[band]
    done_n = np.cumsum(~south) - ~south
    done_s = np.cumsum(south) - south
    done_n = done_n - done_n[first]
    done_s = done_s - done_s[first]
    len_n, len_s = grid.nlon[band], grid.nlon[band + 1]
    off_n, off_s = grid.offsets[band], grid.offsets[band + 1]
    north_point = off_n + done_n % len_n
    south_point = off_s + done_s % len_s
    new = np.where(south, off_s + (done_s + 1) % len_s, off_n + (done_n + 1) % len_n)
    return np.stack([north_point, south_point, new], axis=1)


def polar_triangles(offset: int, n: int) -> np.ndarray:
    """The n - 2 triangles of a zig-zag strip across the polygon of a polar row (points offset..offset+n-1).

    Chords join point k with point n - k (mirror images about longitude 0), so the strip's triangles are
    as wide as the row spacing allows; a fan from one point would give slivers meeting at that point.
    """
    k = np.arange(1, n // 2 - 1)
    first = [[0, 1, n - 1]]
    lower = np.stack([k, k + 1, n - k], axis=1)
    upper = np.stack([k + 1, n - k - 1, n - k], axis=1)
    last = [[n // 2 - 1, n // 2, n // 2 + 1]]
    return offset + np.concatenate([first, lower, upper, last]).astype(np.int64)


def orient(triangles: np.ndarray, xyz: np.ndarray) -> np.ndarray:
    """``triangles`` with corners reordered to run counter-clockwise seen from outside the sphere."""
    a, b, c = (xyz[triangles[:, k]] for k in range(3))
    flip = dot(a, np.cross(b - a, c - a)) < 0
    out = triangles.copy()
    out[flip, 1], out[flip, 2] = triangles[flip, 2], triangles[flip, 1]
    return out


def triangulate(grid: OctahedralGrid) -> np.ndarray:
    """All triangles of the closed octahedral mesh, (2V - 4, 3), counter-clockwise seen from outside;
    polar cap (north), bands north to south, polar cap (south)."""
    last = len(grid.nlon) - 1
    tris = np.concatenate(
        [
            polar_triangles(int(grid.offsets[0]), int(grid.nlon[0])),
            band_triangles(grid),
            polar_triangles(int(grid.offsets[last]), int(grid.nlon[last])),
        ]
    )
    return orient(tris, grid.xyz)
