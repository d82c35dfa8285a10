"""Moving halos on the GPU: every selection of every field for every peer in one kernel launch.

A descriptor table, built once, lists each segment's source and destination run grids (kernels/runs.cuh):
a field, a message buffer, or a peer's field mapped by CUDA IPC. ``CudaPacker`` packs all messages (and
copies what a rank sends itself straight from field to field) in one launch and unpacks in another; the
``ipc`` transport builds its table with the same rows and moves everything in one kernel of its own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..kernel_text import kernel_text
from .geometry import RunGrid, message_grid, paired_grids, run_grid
from .layout import BufferedMessages, FieldSpec, Layout, PeerMessage

# Columns of a row of the descriptor table (kept in step with the enum in kernels/runs.cuh).
SRC, SRC_STRIDE0, SRC_STRIDE1, SRC_INDEX, DST, DST_STRIDE0, DST_STRIDE1, DST_INDEX = range(8)
UNIT, UNITS_PER_RUN, N1, UNITS = range(8, 12)
TABLE_WIDTH = 12
THREADS = 256
# The copy kernels' shape (measured by benchmarks/tune_copy.py on H200, see docs/design.md): units each
# thread keeps in flight, and blocks per SM, each copying an equal share of the table; the kernels are
# compiled with registers few enough for that many blocks to be resident at once (one wave).
UNROLL = 1
BLOCKS_PER_SM = 6
PIECE_UNITS = 1024  # units a block copies before the next block's turn (0: one contiguous share per block)


def kernel_folder() -> Path:
    """Where the copy kernels' sources lie (``packing/kernels``)."""
    return Path(str(resources.files(__package__).joinpath("kernels")))


def kernel(source: str, name: str) -> Any:
    """Kernel ``name`` of ``packing/kernels/<source>``, compiled once by NVRTC (its includes resolved
    beside it, and part of CuPy's cache key: ``gridcomm.kernel_text``) for the current UNROLL and
    BLOCKS_PER_SM."""
    return _compiled(source, name, UNROLL, BLOCKS_PER_SM)


@functools.cache
def _compiled(source: str, name: str, unroll: int, blocks_per_sm: int) -> Any:
    import cupy

    folder = kernel_folder()
    options = ("-std=c++17", f"-I{folder}", f"-DUNROLL={unroll}", f"-DCOPY_THREADS={THREADS}",
               f"-DMIN_BLOCKS={blocks_per_sm}")  # fmt: skip
    return cupy.RawModule(code=kernel_text(folder / source, [folder]), options=options).get_function(name)


@functools.cache
def _multiprocessors(device: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


def device_allocation(nbytes: int) -> Any:
    """A CuPy uint8 array on its own cudaMalloc allocation: pooled memory cannot be exported by CUDA IPC
    on its own (a handle names a whole allocation), so exported buffers are allocated apart from the pool."""
    import cupy

    memory = cupy.cuda.Memory(max(nbytes, 1))
    return cupy.ndarray((max(nbytes, 1),), dtype=np.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))


def _unit(*values: int) -> int:
    """The widest of 16, 8, 4, 2, 1 bytes that divides every value (addresses, strides, run lengths)."""
    g = math.gcd(*values) if values else 16
    return next(u for u in (16, 8, 4, 2, 1) if g % u == 0)


def address(a: Any) -> int:
    """The address of an array's first byte: device memory for CuPy, host memory for NumPy."""
    return a.data.ptr if hasattr(a.data, "ptr") else a.ctypes.data


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


class SegmentTable:
    """A descriptor table on the device and each block's pieces of it (``balanced_pieces`` with
    PIECE_UNITS and the rows' ``lanes``): BLOCKS_PER_SM blocks per SM of the current device (or at most
    ``blocks``), fewer where there are fewer than THREADS units per block to copy."""

    def __init__(self, rows: Descriptors, lanes: Sequence[int] | None = None, blocks: int | None = None) -> None:
        import cupy

        self._keep = rows.keep
        table = np.array(rows.rows, dtype=np.int64).reshape(-1, TABLE_WIDTH)
        units = table[:, UNITS]
        cap = blocks or BLOCKS_PER_SM * _multiprocessors(cupy.cuda.Device().id)
        self.grid = max(1, min(cap, -(-int(units.sum()) // THREADS)))
        pieces = balanced_pieces(units, self.grid, PIECE_UNITS, lanes)
        self.pieces = len(pieces[0])
        self.table = cupy.asarray(table)
        self._pieces = tuple(cupy.asarray(a) for a in pieces)

    @property
    def args(self) -> tuple[Any, ...]:
        """The table's kernel arguments (runs.cuh's copy_pieces)."""
        return (self.table, *self._pieces, np.int32(self.pieces))

    def copy(self, stream: Any) -> None:
        """Enqueue the copy of every row on ``stream`` (None: the current stream)."""
        if self.pieces:
            kernel("pack.cu", "gridcomm_copy_runs")((self.grid,), (THREADS,), self.args, stream=stream)


class CudaPacker(BufferedMessages):
    """Packs all fields for all peers into one device send buffer in one launch, and unpacks likewise;
    what a rank sends itself is copied field to field in the pack launch.

    Args:
        layout: the byte layout of the messages to other ranks.
        fields: CuPy arrays sent from, in the layout's field order.
        local: the layout of what this rank sends itself (a one-peer Layout whose boxes pair one to one), or None.
        destinations: the CuPy arrays received into, field for field (a transposition's); None: ``fields``.
        recv_buffer: a uint8 CuPy array of at least ``layout.recv_nbytes`` to receive into (a transport's own
            memory); None: one is allocated.
    """

    copies_data = True

    def __init__(
        self,
        layout: Layout,
        fields: Sequence[Any],
        local: Layout | None = None,
        destinations: Sequence[Any] | None = None,
        recv_buffer: Any = None,
    ) -> None:
        import cupy

        self.xp = cupy
        self.layout = layout
        received = fields if destinations is None else destinations
        self.send_buffer = device_allocation(layout.send_nbytes)
        self.recv_buffer = device_allocation(layout.recv_nbytes) if recv_buffer is None else recv_buffer
        self.local_nbytes = local.send_nbytes if local is not None else 0
        pack = Descriptors(cupy)
        pack.messages(layout.sends, layout.fields, fields, self.send_buffer.data.ptr, into=True)
        pack.local(local, fields, received)
        unpack = Descriptors(cupy)
        unpack.messages(layout.recvs, layout.fields, received, self.recv_buffer.data.ptr, into=False)
        self._pack, self._unpack = SegmentTable(pack), SegmentTable(unpack)
        self.stream: Any = None

    def pack(self) -> None:
        """Enqueue the pack launch on ``self.stream`` (None: the current stream)."""
        self._pack.copy(self.stream)

    def unpack(self) -> None:
        """Enqueue the unpack launch on ``self.stream``."""
        self._unpack.copy(self.stream)

    def close(self) -> None:
        self._pack = self._unpack = None
