"""The moves around the Legendre half's matrix products: between the caller's arrays, which keep the fields
(batch) slowest, and the products' operands, which keep them fastest (module doc of ``transform.py``).

A product then reads and writes its operands where they lie, as C-contiguous stacks of matrices, and the real
and imaginary parts of a field are simply two neighbouring columns of one real matrix. Each move is one pass:

- ``gather``: coefficients (batch, ncoef) -> operand (chunk, parity, depth, batch), zero past each m's degrees;
- ``scatter``: the reverse, product (chunk, parity, depth, batch) -> coefficients;
- ``unfold``: product (chunk, parity, N, batch) on the northern rows -> Fourier coefficients (batch, M, 2N) of
  every row, even + odd in the north and even - odd on the mirrored southern rows;
- ``fold``: the reverse for the quadrature, (batch, M, 2N) -> north + south and north - south per northern row.

The Fourier coefficients lie in a flat buffer as a ``RowLayout`` says, by per-row tables: element (b, m, r) at
``base[r] + (b * M + m) * width[r]``, each row in a block of rows that is a C-contiguous (batch, M, rows of the
block) array. One block of all 2N rows is the plain (batch, M, 2N) array; the
distributed dwarf keeps a block per peer (and stage of wavenumbers), so that each transposition message is one
contiguous range (``dwarf.py``). A northern row and its southern mirror may lie in different blocks.

On the host these are NumPy gathers; on the GPU one launch each (``legendre.cu``, transposing through shared
memory), which replaced a gather, copies to and from the products' layout and four strided additions per
bucket (O640, batch 412, one H200: see ``benchmarks/tune_buckets.py``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .... import kernels
from ....arrays import array_module
from ....errors import ArgumentError

SOURCE = Path(__file__).with_name("legendre.cu")
TILE = 32  # legendre.cu's tile side
BLOCK = (TILE, 8)  # threads per block


@dataclass(frozen=True, eq=False)
class RowLayout:
    """Where the Fourier coefficients F_m(row) of ``batch`` fields, ``count`` wavenumbers and rows 0..2N-1 lie in
    a flat complex128 buffer of ``size`` elements: element (b, m, r) at ``base[r] + (b * count + m) * width[r]``
    [elements]. Rows lie in blocks, each a C-contiguous (batch, count, rows of the block) array, the blocks one
    after the other: ``width[r]`` is the row count of r's block and ``base[r]`` the block's start plus r's place
    in it. ``plain``: one block, the (batch, count, 2N) array.

    ``base`` (2N,) int64 and ``width`` (2N,) int32 are host arrays; ``tables(xp)`` gives them on the device.
    """

    batch: int
    count: int
    base: np.ndarray
    width: np.ndarray
    _on_device: dict[Any, tuple[Any, Any]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def plain(cls, batch: int, count: int, rows: int) -> RowLayout:
        """The (batch, count, rows) C-contiguous array: base[r] = r, width[r] = rows."""
        return cls.blocked(batch, count, [np.arange(rows)])

    @classmethod
    def blocked(cls, batch: int, count: int, blocks: Sequence[Sequence[int] | np.ndarray]) -> RowLayout:
        """Blocks of the rows listed (each block a (batch, count, its rows) array, its rows in the order listed),
        one after the other in the buffer in the order given; together they must hold every row 0..2N-1 once
        (ArgumentError otherwise)."""
        lists = [np.asarray(rows, dtype=np.int64).reshape(-1) for rows in blocks]
        total = sum(len(rows) for rows in lists)
        base, width = np.full(total, -1, np.int64), np.zeros(total, np.int32)
        start = 0
        for rows in lists:
            outside = np.any((rows < 0) | (rows >= total))  # checked first: base[rows] needs rows in range
            if outside or np.any(base[rows] >= 0) or len(np.unique(rows)) < len(rows):
                raise ArgumentError(
                    f"row blocks of {[len(r) for r in lists]} rows: each lists rows of 0..{total - 1}, and every "
                    "row lies in one block once"
                )
            base[rows] = start + np.arange(len(rows))
            width[rows] = len(rows)
            start += batch * count * len(rows)
        return cls(batch, count, base, width)

    @property
    def rows(self) -> int:
        """2N: every latitude row."""
        return len(self.base)

    @property
    def size(self) -> int:
        """Elements of the buffer: batch x count x 2N."""
        return self.batch * self.count * self.rows

    def span(self, first: int) -> tuple[int, int]:
        """(start, stop) in the buffer [elements] of the block whose first row (as listed) is ``first``."""
        start = int(self.base[first])
        return start, start + self.batch * self.count * int(self.width[first])

    def tables(self, xp: Any) -> tuple[Any, Any]:
        """(base, width) as arrays of ``xp``: the host's own, or device copies made once."""
        if xp is np:
            return self.base, self.width
        if xp not in self._on_device:
            self._on_device[xp] = (xp.asarray(self.base), xp.asarray(self.width))
        return self._on_device[xp]

    @functools.cached_property
    def _pieces(self) -> list[tuple[int, int, int, int, int, int]]:
        """The northern rows cut where their own block or their southern mirrors' block changes:
        (a, b, north start, north width, south start, south width) per piece of rows a..b-1, where rows a..b-1
        start at ``north start`` and their mirrors 2N-b..2N-1-a (ascending) at ``south start``, each in a block
        of that width."""
        n, base, width = self.rows // 2, self.base, self.width
        # r starts a new block where it does not follow r - 1 in the buffer.
        new = np.ones(self.rows, bool)
        new[1:] = (base[1:] != base[:-1] + 1) | (width[1:] != width[:-1])
        starts = np.flatnonzero(new)
        cuts = {0, n, *starts[starts < n].tolist(), *(2 * n - starts[starts > n]).tolist()}
        edges = sorted(c for c in cuts if 0 <= c <= n)
        return [
            (a, b, int(base[a]), int(width[a]), int(base[2 * n - b]), int(width[2 * n - b]))
            for a, b in itertools.pairwise(edges)
        ]

    def views(self, fourier: np.ndarray) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """(a, b, north, south) per piece of the northern rows a..b-1 (host): views (batch, count, b - a) of the
        flat buffer ``fourier`` on those rows and on their southern mirrors, the mirrors in mirror order (the
        view of row 2N-1-r at place r - a)."""
        item, lead = fourier.itemsize, (self.batch, self.count)
        for a, b, north, north_width, south, south_width in self._pieces:
            shape = (*lead, b - a)
            yield (
                a,
                b,
                np.lib.stride_tricks.as_strided(
                    fourier[north:], shape, (self.count * north_width * item, north_width * item, item)
                ),
                np.lib.stride_tricks.as_strided(
                    fourier[south:], shape, (self.count * south_width * item, south_width * item, item)
                )[:, :, ::-1],
            )


@dataclass(frozen=True)
class Chunk:
    """Wavenumbers whose products run as one batched call, longest first, all padded to ``depth`` degrees of
    each parity.

    ``offsets`` and ``lengths`` (count,) where each wavenumber's coefficients start and how many there are
    (T - m + 1); ``positions`` (count,) where it sits on the m axis of the Fourier arrays; ``tables``
    (count, 2, N, depth) lambda_l^m on the northern rows, l = m + 2k + p at [i, p, :, k] (zero past T), the
    inverse product's left operand; ``weighted`` (count, 2, depth, N) the same times the quadrature weights,
    transposed, the direct product's. On the GPU, ``offsets``, ``lengths`` and ``positions`` are device arrays;
    on the host ``index`` (count, 2, depth) gives each operand entry's coefficient and ``valid`` says which are
    within T.
    """

    depth: int
    offsets: Any
    lengths: Any
    positions: Any
    tables: Any
    weighted: Any
    index: np.ndarray | None
    valid: np.ndarray | None
    places: slice | np.ndarray | None  # host: positions to index the m axis with, a slice where one ascending run

    @property
    def count(self) -> int:
        return int(self.tables.shape[0])

    def part(self, first: int, stop: int) -> Chunk:
        """Wavenumbers ``first:stop`` of this chunk (views of its tables: no copy)."""
        host = self.index is not None
        return Chunk(
            self.depth,
            self.offsets[first:stop],
            self.lengths[first:stop],
            self.positions[first:stop],
            self.tables[first:stop],
            self.weighted[first:stop],
            self.index[first:stop] if host else None,
            self.valid[first:stop] if host else None,
            _places(self.positions[first:stop]) if host else None,
        )


def make_chunk(
    xp: Any,
    offsets: np.ndarray,
    lengths: np.ndarray,
    positions: np.ndarray,
    tables: np.ndarray,
    weights: np.ndarray,
) -> Chunk:
    """A Chunk on the device of ``xp`` from host arrays: ``tables`` (count, 2, depth, N) as computed, zero-padded,
    and the quadrature ``weights`` (N,) of the northern rows."""
    depth = tables.shape[2]
    weighted = np.ascontiguousarray(tables * weights)  # (count, 2, depth, N)
    inverse = np.ascontiguousarray(tables.swapaxes(-1, -2))  # (count, 2, N, depth)
    if xp is np:
        j = 2 * np.arange(depth)[None, None, :] + np.arange(2)[None, :, None]  # coefficient j = 2k + p
        valid = j < lengths[:, None, None]
        index = np.where(valid, offsets[:, None, None] + j, 0)
        return Chunk(depth, offsets, lengths, positions, inverse, weighted, index, valid, _places(positions))
    return Chunk(
        depth,
        xp.asarray(offsets.astype(np.int64)),
        xp.asarray(lengths.astype(np.int64)),
        xp.asarray(positions.astype(np.int32)),
        xp.asarray(inverse),
        xp.asarray(weighted),
        None,
        None,
        None,
    )


def _places(positions: np.ndarray) -> slice | np.ndarray:
    """``positions`` as a slice where they are one ascending run (a view instead of a gather), else as they are."""
    if len(positions) and np.array_equal(positions, np.arange(positions[0], positions[0] + len(positions))):
        return slice(int(positions[0]), int(positions[0]) + len(positions))
    return positions


def gather(a: Any, chunk: Chunk, operand: Any) -> None:
    """operand[i, p, k, b] = a[b, offsets[i] + 2k + p], zero past lengths[i]; ``a`` (batch, ncoef) complex."""
    batch, ncoef = a.shape
    if chunk.index is None:
        _launch("gridcomm_legendre_gather", 2 * chunk.depth, batch, chunk.count, (
            a, np.int64(ncoef), np.int32(batch), chunk.offsets, chunk.lengths, np.int32(chunk.depth), operand,
        ))  # fmt: skip
        return
    np.copyto(operand, np.moveaxis(a[:, chunk.index], 0, -1))
    operand[~chunk.valid] = 0.0


def scatter(product: Any, chunk: Chunk, a: Any) -> None:
    """a[b, offsets[i] + 2k + p] = product[i, p, k, b] within lengths[i]; gather's reverse."""
    batch, ncoef = a.shape
    if chunk.index is None:
        _launch("gridcomm_legendre_scatter", 2 * chunk.depth, batch, chunk.count, (
            product, np.int32(batch), chunk.offsets, chunk.lengths, np.int32(chunk.depth), np.int64(ncoef), a,
        ))  # fmt: skip
        return
    a[:, chunk.index[chunk.valid]] = product[chunk.valid].T


def unfold(product: Any, chunk: Chunk, fourier: Any, layout: RowLayout, first: int = 0) -> None:
    """F[b, m, r] = even + odd and F[b, m, 2N - 1 - r] = even - odd on the northern rows r, m = positions[i] - first,
    from product (chunk, 2, N, batch); F laid out by ``layout`` in the flat complex buffer ``fourier`` (``first``:
    the position on the m axis of the layout's first wavenumber)."""
    n = layout.rows // 2
    if chunk.index is None:
        _launch("gridcomm_legendre_unfold", n, layout.batch, chunk.count, (
            product, np.int32(n), np.int32(layout.batch), chunk.positions, np.int32(layout.count), np.int32(first),
            *layout.tables(array_module(fourier)), fourier,
        ))  # fmt: skip
        return
    even, odd = product[:, 0], product[:, 1]  # (chunk, N, batch)
    plus, minus = np.moveaxis(even + odd, -1, 0), np.moveaxis(even - odd, -1, 0)  # (batch, chunk, N)
    at = _shifted(chunk.places, first)
    for a, b, north, south in layout.views(fourier):
        north[:, at] = plus[:, :, a:b]
        south[:, at] = minus[:, :, a:b]


def fold(fourier: Any, chunk: Chunk, sums: Any, layout: RowLayout, first: int = 0) -> None:
    """sums[i, 0, r, b] = north + south and sums[i, 1, r, b] = north - south of F[b, positions[i] - first, .] on
    the northern row r and its mirror 2N - 1 - r, F laid out by ``layout`` in the flat complex buffer ``fourier``
    (``first`` as for ``unfold``); unfold's counterpart for the quadrature."""
    n = layout.rows // 2
    if chunk.index is None:
        _launch("gridcomm_legendre_fold", n, layout.batch, chunk.count, (
            fourier, np.int32(n), np.int32(layout.batch), chunk.positions, np.int32(layout.count), np.int32(first),
            *layout.tables(array_module(fourier)), sums,
        ))  # fmt: skip
        return
    at = _shifted(chunk.places, first)
    for a, b, north, south in layout.views(fourier):
        north, south = north[:, at], south[:, at]  # (batch, chunk, b - a)
        np.add(north, south, out=np.moveaxis(sums[:, 0, a:b], -1, 0))
        np.subtract(north, south, out=np.moveaxis(sums[:, 1, a:b], -1, 0))


def _shifted(places: slice | np.ndarray, first: int) -> slice | np.ndarray:
    """Host ``places`` on an m axis that starts at position ``first``."""
    if isinstance(places, slice):
        return slice(places.start - first, places.stop - first)
    return places - first


def _launch(name: str, across: int, batch: int, count: int, args: tuple[Any, ...]) -> None:
    """Kernel ``name`` of legendre.cu on the current stream: a block per 32 x 32 tile of ``across`` (degrees or
    rows) by fields, per wavenumber of the chunk."""
    if across == 0 or batch == 0 or count == 0:
        return
    grid = (-(-across // TILE), -(-batch // TILE), count)
    kernels.function(SOURCE, name)(grid, BLOCK, args)
