"""The moves around the Legendre half's matrix products: between the caller's arrays, which keep the fields
(batch) slowest, and the products' operands, which keep them fastest (module doc of ``transform.py``).

A product then reads and writes its operands where they lie, as C-contiguous stacks of matrices, and the real
and imaginary parts of a field are simply two neighbouring columns of one real matrix. Each move is one pass:

- ``gather``: coefficients (batch, ncoef) -> operand (chunk, parity, depth, batch), zero past each m's degrees;
- ``scatter``: the reverse, product (chunk, parity, depth, batch) -> coefficients;
- ``unfold``: product (chunk, parity, N, batch) on the northern rows -> Fourier coefficients (batch, M, 2N) of
  every row, even + odd in the north and even - odd on the mirrored southern rows;
- ``fold``: the reverse for the quadrature, (batch, M, 2N) -> north + south and north - south per northern row.

On the host these are NumPy gathers; on the GPU one launch each (``legendre.cu``, transposing through shared
memory), which replaced a gather, copies to and from the products' layout and four strided additions per
bucket (O640, batch 412, one H200: see ``benchmarks/tune_buckets.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .... import kernels

SOURCE = Path(__file__).with_name("legendre.cu")
TILE = 32  # legendre.cu's tile side
BLOCK = (TILE, 8)  # threads per block


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


def unfold(product: Any, chunk: Chunk, fourier: Any) -> None:
    """fourier[b, positions[i], r] = even + odd and fourier[b, positions[i], 2N - 1 - r] = even - odd on the
    northern rows r, from product (chunk, 2, N, batch); ``fourier`` (batch, M, 2N) complex."""
    batch, count, rows = fourier.shape
    n = rows // 2
    if chunk.index is None:
        _launch("gridcomm_legendre_unfold", n, batch, chunk.count, (
            product, np.int32(n), np.int32(batch), chunk.positions, np.int32(count), fourier,
        ))  # fmt: skip
        return
    even, odd = product[:, 0], product[:, 1]  # (chunk, N, batch)
    at = chunk.places
    fourier[:, at, :n] = np.moveaxis(even + odd, -1, 0)
    fourier[:, at, n:] = np.moveaxis((even - odd)[:, ::-1], -1, 0)


def fold(fourier: Any, chunk: Chunk, sums: Any) -> None:
    """sums[i, 0, r, b] = north + south and sums[i, 1, r, b] = north - south of fourier[b, positions[i], .] on
    the northern row r and its mirror 2N - 1 - r; unfold's counterpart for the quadrature."""
    batch, count, rows = fourier.shape
    n = rows // 2
    if chunk.index is None:
        _launch("gridcomm_legendre_fold", n, batch, chunk.count, (
            fourier, np.int32(n), np.int32(batch), chunk.positions, np.int32(count), sums,
        ))  # fmt: skip
        return
    at = chunk.places
    north, south = fourier[:, at, :n], fourier[:, at, n:][:, :, ::-1]  # (batch, chunk, N)
    np.add(north, south, out=np.moveaxis(sums[:, 0], -1, 0))
    np.subtract(north, south, out=np.moveaxis(sums[:, 1], -1, 0))


def _launch(name: str, across: int, batch: int, count: int, args: tuple[Any, ...]) -> None:
    """Kernel ``name`` of legendre.cu on the current stream: a block per 32 x 32 tile of ``across`` (degrees or
    rows) by fields, per wavenumber of the chunk."""
    if across == 0 or batch == 0 or count == 0:
        return
    grid = (-(-across // TILE), -(-batch // TILE), count)
    kernels.function(SOURCE, name)(grid, BLOCK, args)
