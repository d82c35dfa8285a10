"""ECMWF's octahedral reduced Gaussian grid O-N: latitudes, points per row, node coordinates."""

from __future__ import annotations

import re

import numpy as np

from ..errors import ArgumentError
from .gauss import gauss_legendre_colatitudes
from .spherical import lonlat_to_xyz

_NAME = re.compile(r"^[Oo](\d+)$")


def parse_grid_name(name: str | int) -> int:
    """N of an octahedral grid given as an int (``32``) or a name (``"O32"``); ValueError otherwise."""
    if isinstance(name, bool):
        raise ArgumentError(f"grid {name!r} is not a grid: pass a name such as 'O32' or a positive int N")
    if isinstance(name, int | np.integer):
        n = int(name)
    else:
        match = _NAME.match(str(name).strip())
        if match is None:
            raise ArgumentError(
                f"unknown grid {name!r}: expected an octahedral reduced Gaussian grid 'O<N>' such as 'O32' "
                "(N latitude rows between pole and equator) or a positive int N"
            )
        n = int(match.group(1))
    if n < 1:
        raise ArgumentError(f"grid {name!r}: N must be at least 1 (e.g. 'O16'), got {n}")
    return n


def grid_points(n: int | str) -> int:
    """Points of the octahedral grid O-N (a name or N): 4N(N + 9), without building the grid."""
    n = parse_grid_name(n)
    return 4 * n * (n + 9)


class OctahedralGrid:
    """The octahedral reduced Gaussian grid O-N (the grid of ECMWF's IFS since 2016).

    2N Gaussian latitudes (the roots of the Legendre polynomial P_2N), north to south. Row i counted from
    either pole (i = 1..N) has 20 + 4(i - 1) points, equally spaced in longitude from longitude 0; the two
    rows next to the equator have 16 + 4N points each; 4N(N + 9) points in all. Global node ids run
    row-major: north to south, then west to east (longitude 0 first) within a row.

    Attributes:
        N: latitude rows between pole and equator.
        name: ``"O<N>"``.
        latitudes: (2N,) row latitudes in radians, north to south.
        weights: (2N,) Gaussian quadrature weights of the rows (they sum to 2, the integral of d(sin lat)).
        nlon: (2N,) points per row.
        offsets: (2N + 1,) global id of each row's first point; ``offsets[-1]`` is the number of points.
        row: (V,) row of each node.
        lon, lat: (V,) node longitude in [0, 2 pi) and latitude, radians.
        xyz: (V, 3) node positions as unit vectors (x towards lon 0 on the equator, z towards the north pole).
    """

    def __init__(self, n: int | str) -> None:
        self.N: int = parse_grid_name(n)
        self.name = f"O{self.N}"
        # The Gauss-Legendre rule of 2N nodes, north to south (numpy's leggauss loses 2e-8 of the weights at O640)
        colatitudes, weights = gauss_legendre_colatitudes(2 * self.N)
        north = 0.5 * np.pi - colatitudes[: self.N]
        self.latitudes: np.ndarray = np.concatenate([north, -north[::-1]])  # exactly antisymmetric
        self.weights: np.ndarray = weights
        i = np.arange(1, self.N + 1)
        half = 20 + 4 * (i - 1)
        self.nlon: np.ndarray = np.concatenate([half, half[::-1]]).astype(np.int64)
        self.offsets: np.ndarray = np.concatenate([[0], np.cumsum(self.nlon)]).astype(np.int64)
        self.size: int = int(self.offsets[-1])
        assert self.size == grid_points(self.N)
        self.row: np.ndarray = np.repeat(np.arange(2 * self.N), self.nlon)
        k = np.arange(self.size) - self.offsets[self.row]  # index within the row
        # k / nlon first: equal fractions of a turn then give bitwise equal longitudes in every row.
        self.lon: np.ndarray = 2.0 * np.pi * (k / self.nlon[self.row])
        self.lat: np.ndarray = self.latitudes[self.row]
        self.xyz: np.ndarray = lonlat_to_xyz(self.lon, self.lat)

    def points_of(self, rows: np.ndarray) -> np.ndarray:
        """The global ids of the points of ``rows``, row after row in the order given (e.g. one rank's rows of the
        spectral dwarf, which need not be consecutive)."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return np.zeros(0, np.int64)
        return np.concatenate([np.arange(self.offsets[r], self.offsets[r + 1]) for r in rows])

    def patch_order(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` (global node ids) reordered so that consecutive runs of them are compact patches of the grid:
        by the Z-order (Morton) key of (row, x), x the point's place within its quarter of the row (the
        octahedron's face) plus the quarter times the widest quarter. A point's neighbours in the next row then
        sit at x or x + 1, so 16 consecutive ids are about a 4 x 4 patch, 64 an 8 x 8 one, and so on: what a GPU
        block gathers from its neighbours is mostly in its own patch (in L1), where whole rows would make it
        fetch two other rows from L2."""
        ids = np.asarray(ids, dtype=np.int64)
        row = self.row[ids]
        quarter = self.nlon[row] // 4
        k = ids - self.offsets[row]
        x = (k // quarter) * (self.N + 4) + k % quarter
        key = _spread_bits(x) | (_spread_bits(row) << np.uint64(1))
        return ids[np.argsort(key, kind="stable")]

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"OctahedralGrid({self.name}: {2 * self.N} rows, {self.size} points)"


def _spread_bits(v: np.ndarray) -> np.ndarray:
    """The bits of ``v`` (each below 2^32) moved to the even bit positions of a uint64 (Morton interleaving)."""
    v = np.asarray(v).astype(np.uint64)
    for shift, mask in ((16, 0x0000FFFF0000FFFF), (8, 0x00FF00FF00FF00FF), (4, 0x0F0F0F0F0F0F0F0F),
                        (2, 0x3333333333333333), (1, 0x5555555555555555)):  # fmt: skip
        v = (v | (v << np.uint64(shift))) & np.uint64(mask)
    return v
