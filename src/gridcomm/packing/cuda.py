"""Packing on the GPU: every selection of every field for every peer in one kernel launch (kernels/pack.cu).

A descriptor table, built once, lists each segment's field address, message address and run geometry;
``pack`` and ``unpack`` are one launch each on the exchange's stream. What a rank sends to itself (periodic
wrap over one rank) is packed into a loopback buffer in the same launch and unpacked with the rest.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from .geometry import run_grid
from .layout import FieldSpec, Layout, PeerMessage

# Columns of the descriptor table (kept in step with the enum in kernels/pack.cu).
FIELD, BUFFER, START, STRIDE0, STRIDE1, INDEX, UNIT, UNITS_PER_RUN, N1, UNITS = range(10)
TABLE_WIDTH = 10
THREADS = 256
UNITS_PER_BLOCK = THREADS * 8


def kernel_source(name: str) -> str:
    """The text of ``packing/kernels/<name>``."""
    return resources.files(__package__).joinpath("kernels", name).read_text()


@functools.cache
def _copy_kernel() -> Any:
    import cupy

    module = cupy.RawModule(code=kernel_source("pack.cu"), options=("-std=c++17",))
    return module.get_function("gridcomm_copy_segments")


def device_allocation(nbytes: int) -> Any:
    """A CuPy uint8 array on its own cudaMalloc allocation: pooled memory cannot be exported by CUDA IPC
    (a handle names a whole allocation), so message buffers are allocated apart from the pool."""
    import cupy

    memory = cupy.cuda.Memory(max(nbytes, 1))
    return cupy.ndarray((max(nbytes, 1),), dtype=np.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))


def _unit(*values: int) -> int:
    """The widest of 16, 8, 4, 2, 1 bytes that divides every value (addresses, strides, run lengths)."""
    g = math.gcd(*values) if values else 16
    return next(u for u in (16, 8, 4, 2, 1) if g % u == 0)


class SegmentTable:
    """The descriptor table of one direction (pack or unpack) and its block map, on the device."""

    def __init__(self, rows: list[list[int]], keep: list[Any]) -> None:
        import cupy

        self._keep = keep  # device index arrays the table points at
        table = np.array(rows, dtype=np.int64).reshape(-1, TABLE_WIDTH)
        blocks = [(s, first) for s, row in enumerate(table) for first in range(0, int(row[UNITS]), UNITS_PER_BLOCK)]
        self.blocks = len(blocks)
        self.table = cupy.asarray(table)
        self.block_segment = cupy.asarray(np.array([s for s, _ in blocks], dtype=np.int32))
        self.block_first = cupy.asarray(np.array([f for _, f in blocks], dtype=np.int64))

    def launch(self, unpack: bool, stream: Any) -> None:
        if self.blocks:
            _copy_kernel()(
                (self.blocks,),
                (THREADS,),
                (self.table, self.block_segment, self.block_first, np.int32(UNITS_PER_BLOCK), np.int32(unpack)),
                stream=stream,
            )


def segment_rows(
    messages: Sequence[PeerMessage], specs: Sequence[FieldSpec], fields: Sequence[Any], buffer_addresses: Sequence[int]
) -> tuple[list[list[int]], list[Any]]:
    """Descriptor rows of ``messages``; message i's bytes start at device address ``buffer_addresses[i]``.

    Returns the rows and the device index arrays they point at (to be kept alive).
    """
    import cupy

    rows, keep = [], []
    for message, address in zip(messages, buffer_addresses, strict=True):
        for seg in message.segments:
            field = fields[seg.field]
            grid = run_grid(field.shape, specs[seg.field], seg.selection)
            base, target = field.data.ptr + grid.start, address + seg.offset - message.offset
            strides = [
                s for s, n in ((grid.stride0, grid.n0), (grid.stride1, grid.n1)) if n > 1 or grid.index is not None
            ]
            unit = _unit(base, target, grid.run_bytes, *strides)
            units = grid.n0 * grid.n1 * grid.run_bytes // unit
            if units >= 2**31:
                raise ValueError(f"a selection of {units} units is too large for one segment (limit 2^31)")
            index = 0
            if grid.index is not None:
                device_index = cupy.asarray(grid.index)
                keep.append(device_index)
                index = device_index.data.ptr
            row = [0] * TABLE_WIDTH
            row[FIELD], row[BUFFER], row[START] = field.data.ptr, target, grid.start
            row[STRIDE0], row[STRIDE1], row[INDEX] = grid.stride0, grid.stride1, index
            row[UNIT], row[UNITS_PER_RUN], row[N1], row[UNITS] = unit, grid.run_bytes // unit, grid.n1, units
            rows.append(row)
    return rows, keep


class CudaPacker:
    """Packs all fields for all peers into one device send buffer in one launch, and unpacks likewise.

    Args:
        layout: the byte layout of the messages to other ranks.
        fields: CuPy arrays in the layout's field order.
        local: the layout of what this rank sends itself (a one-peer Layout), or None.
        send_targets: device address for each send message to write into instead of the local send buffer
            (e.g. the peer's receive buffer mapped by CUDA IPC), or None.
    """

    copies_data = True
    handles_local = True

    def __init__(
        self,
        layout: Layout,
        fields: Sequence[Any],
        local: Layout | None = None,
        send_targets: Sequence[int] | None = None,
    ) -> None:
        import cupy

        self.xp = cupy
        self.layout = layout
        self.send_buffer = device_allocation(layout.send_nbytes)
        self.recv_buffer = device_allocation(layout.recv_nbytes)
        self._fields, self._local = fields, local
        self.loopback = device_allocation(local.send_nbytes if local is not None else 0)
        recv_base = self.recv_buffer.data.ptr
        rows, keep = segment_rows(layout.recvs, layout.fields, fields, [recv_base + m.offset for m in layout.recvs])
        rows += self._local_rows(local.recvs if local is not None else (), keep)
        self._unpack = SegmentTable(rows, keep)
        self.write_sends_to(send_targets)
        self.stream: Any = None

    def _local_rows(self, messages: Sequence[PeerMessage], keep: list[Any]) -> list[list[int]]:
        """Rows of what this rank sends itself: packed into and unpacked from the loopback buffer."""
        if not messages:
            return []
        loop = [self.loopback.data.ptr + m.offset for m in messages]
        rows, more = segment_rows(messages, self._local.fields, self._fields, loop)
        keep += more
        return rows

    def write_sends_to(self, targets: Sequence[int] | None = None) -> None:
        """Make the pack launch write send message i to device address ``targets[i]`` (e.g. the peer's
        receive buffer mapped by CUDA IPC); None: this packer's own send buffer."""
        layout, base = self.layout, self.send_buffer.data.ptr
        targets = list(targets) if targets is not None else [base + m.offset for m in layout.sends]
        rows, keep = segment_rows(layout.sends, layout.fields, self._fields, targets)
        rows += self._local_rows(self._local.sends if self._local is not None else (), keep)
        self._pack = SegmentTable(rows, keep)

    def pack(self) -> None:
        """Enqueue the pack launch on ``self.stream`` (None: the current stream)."""
        self._pack.launch(False, self.stream)

    def unpack(self) -> None:
        """Enqueue the unpack launch on ``self.stream``."""
        self._unpack.launch(True, self.stream)

    def send_message(self, index: int) -> Any:
        m = self.layout.sends[index]
        return self.send_buffer[m.offset : m.offset + m.nbytes]

    def recv_message(self, index: int) -> Any:
        m = self.layout.recvs[index]
        return self.recv_buffer[m.offset : m.offset + m.nbytes]

    def close(self) -> None:
        self._pack = self._unpack = None
