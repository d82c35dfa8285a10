"""No packing: each message described as the contiguous memory runs it occupies inside the fields.

For transports that copy straight from the sender's fields into the receiver's halos (one copy, no
buffers). A message's runs are listed in the same byte order as the copy layout packs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..pattern import Box, Rows
from .layout import FieldSpec, Layout, PeerMessage


def box_runs(shape: Sequence[int], itemsize: int, order: str, box: Box) -> tuple[np.ndarray, int]:
    """Byte offsets (from the array's start) of the contiguous runs that make up ``box``, in the box's
    ``order`` traversal, and the length in bytes of each run (all runs are equally long)."""
    shape, start, extent = list(shape), list(box.start), list(box.shape)
    if order == "F":  # a Fortran array is the C array of the reversed axes
        shape, start, extent = shape[::-1], start[::-1], extent[::-1]
    strides = np.cumprod([1, *shape[:0:-1]])[::-1] * itemsize
    # The run grows outward from the last axis while the axes inside it span the whole array.
    inner = len(shape) - 1
    while inner > 0 and extent[inner] == shape[inner]:
        inner -= 1
    run = int(np.prod(extent[inner:])) * itemsize
    offsets = np.zeros(1, dtype=np.int64)
    for axis in range(inner + 1):
        first = start[axis] * strides[axis]
        steps = np.arange(extent[axis] if axis < inner else 1, dtype=np.int64) * strides[axis]
        offsets = (offsets[:, None] + first + steps[None, :]).ravel()
    return offsets, run


def rows_runs(rows: int, spec: FieldSpec, sel: Rows) -> tuple[np.ndarray, int]:
    """Like :func:`box_runs` for selected rows of an array of ``rows`` rows and ``spec.trailing`` items each."""
    items, itemsize = spec.row_items, spec.dtype.itemsize
    if spec.order == "C":
        return sel.index * (items * itemsize), items * itemsize
    offsets = (np.arange(items, dtype=np.int64)[:, None] * rows + sel.index[None, :]) * itemsize
    return offsets.ravel(), itemsize


class DirectPacker:
    """Describes messages as runs of (address, bytes) in the fields; ``pack`` and ``unpack`` do nothing."""

    copies_data = False

    def __init__(self, layout: Layout, fields: Sequence[Any]) -> None:
        self.layout = layout
        self._fields = fields

    def _runs(self, message: PeerMessage) -> np.ndarray:
        pieces = []
        for seg in message.segments:
            field, spec, sel = self._fields[seg.field], self.layout.fields[seg.field], seg.selection
            if isinstance(sel, Rows):
                offsets, run = rows_runs(field.shape[0], spec, sel)
            else:
                offsets, run = box_runs(field.shape, spec.dtype.itemsize, spec.order, sel)
            base = field.__array_interface__["data"][0]
            pieces.append(np.stack([offsets + base, np.full_like(offsets, run)], axis=1))
        return np.concatenate(pieces) if pieces else np.zeros((0, 2), dtype=np.int64)

    def send_runs(self, index: int) -> np.ndarray:
        """(address, bytes) rows of send message ``index``, in stream order."""
        return self._runs(self.layout.sends[index])

    def recv_runs(self, index: int) -> np.ndarray:
        """(address, bytes) rows of receive message ``index``, in stream order."""
        return self._runs(self.layout.recvs[index])

    def pack(self) -> None:
        """Nothing to do: the transport reads the fields."""

    def unpack(self) -> None:
        """Nothing to do: the transport writes the fields."""

    def close(self) -> None:
        self._fields = ()
