"""The distributed transform's last pass before each transposition written straight into the peers (ipc's kernel).

Each transposition of the dwarf moves what one pass has just written: in the inverse, ``operands.unfold`` (the
Legendre products (m, parity, N, batch) -> every row's Fourier coefficients, even + odd and even - odd, in blocks
per peer of the Legendre side); in the direct, the FFTs' pick (the rows' half spectra -> the Fourier side's
(batch, M, rows)). The transposition then reads those blocks again and writes them into the peers. Here the pass
is left out of the compute (``SpectralTransform.legendre_inverse(..., unfold=False)``, ``fourier_direct(...,
pick=False)``) and runs as the transposition itself, in place of ipc's copies: ``gridcomm_legendre_unfold_exchange``
(legendre.cu) and ``gridcomm_pick_exchange`` (fourier.cu), between the ipc exchange's flags
(transports/ipc_exchange.cuh), storing every element into the side of the rank that owns it (mapped here by the
transposer), this rank's own included. One local write and one local read of every byte moved are saved, and the
pass leaves the compute stream for the transpositions' (TCo639 on 4 x H100: the compute stream without its unfolds
took 16.95 instead of 18.30 ms per step, without its picks 17.33, without both 15.92: the passes left out,
probe-spectral-timeline-gpu-4r-20261127T211134Z). The arithmetic is the same: the result is the same, bit for bit.

Both kernels take tables of where each element lands, counted in elements from an origin (this rank's own
destination array) to the destination's place, mapped from the peers' by the transposer's channel
(``destination_addresses``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .... import kernels
from ....errors import TransportError
from . import fourier, operands

ITEM = 16  # bytes of a complex128
#: Thread blocks of the pick's exchange kernel: None, twice as many as ipc's copies would take (its work per byte
#: is the FFTs' untwiddling, not a copy). TCo639 on 4 x H100, 8 x 2, where the copies take 132 blocks, ms per step
#: in one call (probe-spectral-timeline-gpu-4r-20261127T212919Z): 132 blocks 17.44, 264 16.46, 528 17.26; the pick
#: on the compute stream 16.87 and 16.78.
PICK_BLOCKS: int | None = None


def places_from(addresses: Mapping[int, Sequence[int]], origin: int) -> dict[int, int]:
    """Elements from ``origin`` to each rank's (first) destination, from ``addresses`` (rank -> destination
    addresses here, a transposer channel's ``destination_addresses``)."""
    places = {}
    for q, (where, *_) in addresses.items():
        if (where - origin) % ITEM:
            raise TransportError(f"rank {q}'s destination lies {where - origin} bytes from this rank's: not 16 x k")
        places[q] = (where - origin) // ITEM
    return places


# -- the inverse: the unfold into every rank's Fourier side of a group of rows ------------------------------------


def row_destinations(
    rows: int, owned: Sequence[np.ndarray], places: Mapping[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unfold's row tables for one exchange, as ``operands.RowLayout``'s (element (b, m, r) at ``base[r] +
    (b * count + m) * width[r]``): (base (rows,) int64, width (rows,) int32, the northern rows to unfold (int32,
    ascending)). ``owned[q]``: rank q's rows of the group moved, in the order of its Fourier side (batch, count,
    its rows); ``places[q]``: elements from the origin to that side (a rank left out receives nothing: its rows are
    not written). Rows outside the group have width 0; a northern row is listed where it or its southern mirror
    rows - 1 - r is written."""
    base, width = np.zeros(rows, np.int64), np.zeros(rows, np.int32)
    for q, mine in enumerate(owned):
        if q in places and len(mine):
            base[mine] = places[q] + np.arange(len(mine))
            width[mine] = len(mine)
    north = np.arange(rows // 2)
    listed = north[(width[north] > 0) | (width[rows - 1 - north] > 0)].astype(np.int32)
    return base, width, listed


def unfold_into(
    channel: Any,
    products: Any,
    positions: np.ndarray,
    owned: Sequence[np.ndarray],
    origin: Any,
    first: int,
    count: int,
    shape: tuple[int, int],
) -> None:
    """Make ``channel`` (an ipc kernel channel of a transposition to the Fourier sides: ``write_with``) unfold
    ``products``, the flat products of ``len(positions)`` wavenumbers of ``shape`` = (N, batch), each
    (2, N, batch), into every rank's Fourier side of the group instead of copying blocks: wavenumber i lands at
    m = positions[i] - ``first`` on an m axis of ``count``; ``owned`` (each rank's rows of the group) as for
    ``row_destinations``, and ``origin`` is this rank's own side of the group."""
    import cupy

    n, batch = shape
    base, width, listed = row_destinations(2 * n, owned, places_from(channel.destination_addresses, origin.data.ptr))
    on_device = [cupy.asarray(a) for a in (positions.astype(np.int32), base, width, listed)]
    channel.write_with(
        kernels.function(operands.SOURCE, "gridcomm_legendre_unfold_exchange"),
        operands.BLOCK,
        (products, np.int32(n), np.int32(batch), on_device[0], np.int32(count), np.int32(first), on_device[1],
         on_device[2], origin, on_device[3], np.int32(len(listed)), np.int32(len(positions))),
    )  # fmt: skip


# -- the direct: the pick into every rank's Legendre side, its block of this rank's rows of a group ----------------


def legendre_blocks(
    staged: Sequence[Sequence[tuple[int, int]]],
    cut: Sequence[Sequence[np.ndarray]],
    m_start: Sequence[int],
    at: tuple[int, int, int],
    shape: tuple[int, int],
) -> dict[int, tuple[int, int, int]]:
    """``blocks`` for ``wavenumber_destinations``: where rank ``at[0]``'s rows of group ``at[1]`` land for stage
    ``at[2]`` in every rank p's Legendre side, laid out as the dwarf lays it (per stage c, per group, per rank q,
    the C-contiguous (batch, p's wavenumbers of c, q's rows of the group)). ``staged[p]``: p's stages, (first, stop)
    on its m axis; ``cut[q]``: q's rows by group; ``m_start[p]``: where p's wavenumbers start on the Fourier sides' m
    axis; ``shape``: (batch, 2N)."""
    rank, group, stage = at
    batch, rows = shape
    blocks = [mine[g] for g in range(len(cut[0])) for mine in cut]
    ahead = sum(len(block) for block in blocks[: group * len(cut) + rank])  # rows of the blocks before
    return {
        p: (int(m_start[p]) + first, stop - first,
            batch * (rows * sum(b - a for a, b in parts[:stage]) + (stop - first) * ahead))
        for p, parts in enumerate(staged) for first, stop in [parts[stage]]
    }  # fmt: skip


def wavenumber_destinations(
    blocks: Mapping[int, tuple[int, int, int]], places: Mapping[int, int], rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pick's tables for one exchange: (the positions on the Fourier side's m axis to pick (int32), and per
    position (start, stride of the fields) of its row of ``rows`` in its destination, int64 pairs). ``blocks[p]``:
    (first position of rank p's wavenumbers moved, how many, the start of this rank's block of them in p's side
    [elements]), the block a C-contiguous (batch, how many, rows) array; ``places[p]`` as for ``row_destinations``
    (a rank left out: its wavenumbers are not picked)."""
    listed, at = [], []
    for p, (first, count, start) in sorted(blocks.items()):
        if p in places and count:
            listed.append(np.arange(first, first + count))
            lines = places[p] + start + np.arange(count) * rows
            at.append(np.stack([lines, np.full(count, count * rows)], axis=1))
    if not listed:
        return np.zeros(0, np.int32), np.zeros((0, 2), np.int64)
    return np.concatenate(listed).astype(np.int32), np.concatenate(at).astype(np.int64)


def pick_into(
    channel: Any, picking: tuple[Any, ...], blocks: Mapping[int, tuple[int, int, int]], origin: Any, batch: int
) -> None:
    """Make ``channel`` (an ipc kernel channel of a transposition to the Legendre sides: ``write_with``) pick the
    Fourier coefficients of ``batch`` fields from the half spectra into every rank's block of them instead of
    copying blocks. ``picking``: ``SpectralTransform.pick_operands`` of this rank's group of rows; ``blocks`` as for
    ``wavenumber_destinations``; ``origin``: this rank's own Legendre side."""
    import cupy

    rows = int(picking[-1])
    listed, at = wavenumber_destinations(blocks, places_from(channel.destination_addresses, origin.data.ptr), rows)
    on_device = [cupy.asarray(a) for a in (listed, at.reshape(-1))]
    channel.write_with(
        fourier.cuda_kernel("gridcomm_pick_exchange"),
        (fourier.TILE, fourier.THREADS // fourier.TILE),
        (*picking, np.int32(batch), np.int32(fourier.BATCH_PER_BLOCK), origin, on_device[0], np.int32(len(listed)),
         on_device[1]),
        PICK_BLOCKS or 2 * channel.blocks,
    )  # fmt: skip
