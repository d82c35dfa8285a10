"""The descriptor table: every copy of an exchange as rows of two run grids, the format the copy kernels read.

Each row names a segment (one selection of one field, to or from one peer): its source and destination run
grids (start address, two strides, an optional row-index array; ``packing/geometry.py``), the widest unit of
1, 2, 4, 8 or 16 bytes that every address, stride and run length allows, and how many units it holds. The
CUDA packer and the ipc transport build their tables here; ``runs.cuh`` is the same format on the GPU (its
columns kept in step with these). ``balanced_pieces`` deals a table's units out to thread blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .geometry import RunGrid, message_grid, paired_grids, run_grid
from .layout import FieldSpec, Layout, PeerMessage

# Columns of a row of the descriptor table (kept in step with the enum in runs.cuh).
SRC, SRC_STRIDE0, SRC_STRIDE1, SRC_INDEX, DST, DST_STRIDE0, DST_STRIDE1, DST_INDEX = range(8)
UNIT, UNITS_PER_RUN, N1, UNITS = range(8, 12)
TABLE_WIDTH = 12


def _unit(*values: int) -> int:
    """The widest of 16, 8, 4, 2, 1 bytes that divides every value (addresses, strides, run lengths)."""
    g = math.gcd(*values) if values else 16
    return next(u for u in (16, 8, 4, 2, 1) if g % u == 0)


def address(a: Any) -> int:
    """The address of an array's first byte: device memory for CuPy, host memory for NumPy."""
    return a.data.ptr if hasattr(a.data, "ptr") else a.ctypes.data


def message_range(message: PeerMessage, specs: Sequence[FieldSpec], arrays: Sequence[Any]) -> tuple[int, int] | None:
    """(address, bytes) of ``message`` in its array where it is one selection lying there as one contiguous
    range (a block of a 1-D array, whole rows of a C-order one): it can then be sent from, or received into,
    the array itself, with no pack or unpack; else None."""
    if len(message.segments) != 1:
        return None
    segment = message.segments[0]
    array = arrays[segment.field]
    try:
        grid = run_grid(array.shape, specs[segment.field], segment.selection)
    except ValueError:  # not runs of one grid: never one range
        return None
    if grid.n0 * grid.n1 != 1 or grid.index is not None or not segment.nbytes:
        return None
    return address(array) + grid.start, segment.nbytes


class Descriptors:
    """Descriptor rows under construction, and the index arrays they point at (kept alive), for arrays of
    module ``xp`` (CuPy for the kernels; NumPy where the tests replay a table on the host)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.rows: list[list[int]] = []
        self.keep: list[Any] = []

    def _index(self, grid: RunGrid) -> int:
        if grid.index is None:
            return 0
        index = self.xp.ascontiguousarray(self.xp.asarray(grid.index, dtype=np.int64))
        self.keep.append(index)
        return address(index)

    def add(self, src_base: int, src: RunGrid, dst_base: int, dst: RunGrid) -> None:
        """Copy the runs of ``src`` (in the array at device address ``src_base``) to those of ``dst``."""
        if (src.n0, src.n1, src.run_bytes) != (dst.n0, dst.n1, dst.run_bytes):
            raise ValueError(f"run grids do not pair: {src} and {dst}")
        a, b = src_base + src.start, dst_base + dst.start
        strides = []
        for grid in (src, dst):
            strides += [grid.stride0] if grid.n0 > 1 else []
            strides += [grid.stride1] if grid.n1 > 1 or grid.index is not None else []
        unit = _unit(a, b, src.run_bytes, *strides)
        units = src.n0 * src.n1 * src.run_bytes // unit
        if units >= 2**31:
            raise ValueError(f"a selection of {units} units is too large for one segment (limit 2^31)")
        row = [0] * TABLE_WIDTH
        row[SRC], row[SRC_STRIDE0], row[SRC_STRIDE1], row[SRC_INDEX] = a, src.stride0, src.stride1, self._index(src)
        row[DST], row[DST_STRIDE0], row[DST_STRIDE1], row[DST_INDEX] = b, dst.stride0, dst.stride1, self._index(dst)
        row[UNIT], row[UNITS_PER_RUN], row[N1], row[UNITS] = unit, src.run_bytes // unit, src.n1, units
        if units:
            self.rows.append(row)

    def messages(
        self, messages: Sequence[PeerMessage], specs: Sequence[FieldSpec], fields: Sequence[Any], base: int, into: bool
    ) -> None:
        """Rows between the fields and message buffer ``base`` (device address of byte 0 of the whole buffer):
        fields into the buffer when ``into`` (pack), else out of it (unpack)."""
        for message in messages:
            for seg in message.segments:
                field = fields[seg.field]
                grid = run_grid(field.shape, specs[seg.field], seg.selection)
                packed = message_grid(grid, seg.offset)
                if into:
                    self.add(address(field), grid, base, packed)
                else:
                    self.add(base, packed, address(field), grid)

    def local(self, local: Layout | None, sources: Sequence[Any], destinations: Sequence[Any]) -> None:
        """Rows of what a rank sends itself (a periodic wrap over one rank, a transposition's diagonal block):
        source to destination, no buffer. Its boxes must pair one to one (``pairs_directly``)."""
        if local is None:
            return
        for send, recv in zip(local.sends, local.recvs, strict=True):
            for s, r in zip(send.segments, recv.segments, strict=True):
                src_field, dst_field, spec = sources[s.field], destinations[r.field], local.fields[s.field]
                src, dst = paired_grids(src_field.shape, s.selection, dst_field.shape, r.selection, spec)
                self.add(address(src_field), src, address(dst_field), dst)


def balanced_pieces(
    units: Sequence[int], blocks: int, piece_units: int = 0, lanes: Sequence[int] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deal the units of segments ``units[0], units[1], ...`` out to ``blocks`` blocks in equal shares.

    ``piece_units`` 0: the segments are taken one after another and block b gets one contiguous share, units
    b U / blocks to (b + 1) U / blocks (rounded down) of the U in all. Else the units are cut every
    ``piece_units`` and the pieces dealt out in turn (block b: pieces b, b + blocks, ...), so that the blocks
    sweep memory side by side. ``lanes`` (with ``piece_units``): segment s belongs to lane ``lanes[s]`` (for
    the ipc all-to-all: the peer it is written to), each lane is cut on its own, and the pieces are
    interleaved lane by lane in the order of the lane numbers (first piece of every lane, then the second of
    every lane, ...): the blocks running at any moment then write to every lane at once, instead of all of
    them into one peer's link while the others idle. Shares are cut again where a segment ends.

    Returns (segment, first, last): piece p is units [first[p], last[p]) of segment segment[p], and block b
    copies pieces b, b + blocks, b + 2 blocks, ... (empty ones, first == last, pad the list where blocks
    have fewer pieces than others)."""
    units = np.asarray(units, dtype=np.int64).reshape(-1)
    if not piece_units:
        segment, first, last, key = _cut_lane(np.arange(len(units)), units, 0, blocks, contiguous=True)
        owner = key
    else:
        lane_of = np.zeros(len(units), np.int64) if lanes is None else np.asarray(lanes, dtype=np.int64)
        cut = [_cut_lane(np.flatnonzero(lane_of == lane), units, piece_units, blocks) for lane in np.unique(lane_of)]
        cut = cut or [_cut_lane(np.zeros(0, np.int64), units, piece_units, blocks)]
        segment, first, last = (np.concatenate([c[k] for c in cut]) for k in range(3))
        # Interleave: the share j of lane L comes at position j * lanes + L (lanes run out at different j).
        key = np.concatenate([c[3] * len(cut) + position for position, c in enumerate(cut)])
        owner = np.unique(key, return_inverse=True)[1] % blocks
    # Slot k of block b is entry k * blocks + b: sort by (k, b), k being the piece's rank within its block, in
    # the order of the keys (lexsort is stable: pieces of one share keep their order).
    order = np.lexsort((key, owner))
    rank = np.empty(len(first), np.int64)
    counts = np.bincount(owner, minlength=blocks)
    rank[order] = np.arange(len(first)) - np.repeat(np.cumsum(counts) - counts, counts)
    slots = int(counts.max(initial=0))
    place = rank * blocks + owner
    out_segment = np.zeros(slots * blocks, np.int32)
    out_first = np.zeros(slots * blocks, np.int64)
    out_last = np.zeros(slots * blocks, np.int64)
    out_segment[place], out_first[place], out_last[place] = segment, first, last
    return out_segment, out_first, out_last


def _cut_lane(
    segments: np.ndarray, units: np.ndarray, piece_units: Any, blocks: int, contiguous: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The segments ``segments`` (indices into ``units``) taken one after another and cut into shares: every
    ``piece_units`` units, or (``contiguous``) into ``blocks`` equal contiguous shares; shares cut again where
    a segment ends. Returns (segment, first, last, share) per piece, first and last within the segment."""
    starts = np.concatenate(([0], np.cumsum(units[segments])))
    total = int(starts[-1])
    if contiguous:
        bounds = np.arange(blocks + 1, dtype=np.int64) * total // blocks  # exact in int64 below 2^63 / blocks
    else:
        bounds = np.append(np.arange(0, total, int(piece_units), dtype=np.int64), total)
    cuts = np.union1d(bounds, starts)  # every share and every segment starts at a cut
    first, last = cuts[:-1], cuts[1:]
    where = np.searchsorted(starts, first, side="right") - 1
    share = np.searchsorted(bounds, first, side="right") - 1
    return segments[where], first - starts[where], last - starts[where], share
