"""Packing by MPI derived datatypes: the message to a peer is described in place, MPI gathers it itself.

For host memory this saves the two extra copies of :class:`~gridcomm.packing.copy.CopyPacker`: an MPI
library copies a message through its own buffers anyway, and its datatype engine reads the strided
selections straight from the fields. Each message is a struct, with absolute addresses (``MPI.BOTTOM``), of
one subarray per field and selection, in the same order as the copy layout, so the bytes on the wire are
the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..pattern import Rows, Selection
from .layout import FieldSpec, Layout, PeerMessage


def _element_type(dtype: np.dtype) -> Any:
    """The MPI type of one element: the predefined integer of its size (MPI's datatype engine packs those
    several times faster than opaque bytes, and copies every bit: a floating-point type could be converted on
    the way, e.g. an x87 long double losing its padding bytes), two 8-byte integers for 16-byte elements,
    else ``itemsize`` bytes (all ranks share one architecture)."""
    from mpi4py import MPI

    integer = {1: MPI.INT8_T, 2: MPI.INT16_T, 4: MPI.INT32_T, 8: MPI.INT64_T}.get(dtype.itemsize)
    if integer is not None:
        return integer
    if dtype.itemsize == 16:
        return MPI.INT64_T.Create_contiguous(2)
    return MPI.BYTE.Create_contiguous(dtype.itemsize)


def selection_type(shape: tuple[int, ...], spec: FieldSpec, sel: Selection) -> Any:
    """An MPI datatype of ``sel`` inside an array of ``shape``, traversed in the agreed order ``spec.order``."""
    from mpi4py import MPI

    element = _element_type(spec.dtype)
    if isinstance(sel, Rows):
        rows, items = shape[0], spec.row_items
        if spec.order == "C":  # a row's trailing items are contiguous
            row = element.Create_contiguous(items)
            result = row.Create_indexed_block(1, sel.index.tolist())
            row.Free()
        else:  # item t of row i sits at i + rows * t: the selected rows of each item, item after item
            column = element.Create_indexed_block(1, sel.index.tolist())
            result = column.Create_hvector(items, 1, rows * spec.dtype.itemsize)
            column.Free()
    else:
        order = MPI.ORDER_C if spec.order == "C" else MPI.ORDER_FORTRAN
        result = element.Create_subarray(shape, sel.shape, sel.start, order=order)
    if not element.is_predefined:
        element.Free()
    return result


class DatatypePacker:
    """Per-peer MPI datatypes over the fields themselves; ``pack`` and ``unpack`` have nothing to do.

    Args:
        layout: the byte layout of the exchange's messages (the order MPI traverses the selections in).
        fields: the arrays sent from, in the layout's field order.
        destinations: the arrays received into, field for field; None: ``fields`` themselves.
    """

    copies_data = False

    def __init__(self, layout: Layout, fields: Sequence[Any], destinations: Sequence[Any] | None = None) -> None:
        self.layout = layout
        self._sends = [self._datatype(m, fields) for m in layout.sends]
        self._recvs = [self._datatype(m, fields if destinations is None else destinations) for m in layout.recvs]

    def _datatype(self, message: PeerMessage, fields: Sequence[Any]) -> Any:
        from mpi4py import MPI

        parts, addresses = [], []
        for seg in message.segments:
            field, spec = fields[seg.field], self.layout.fields[seg.field]
            parts.append(selection_type(field.shape, spec, seg.selection))
            addresses.append(MPI.Get_address(field))
        datatype = MPI.Datatype.Create_struct([1] * len(parts), addresses, parts).Commit()
        for part in parts:
            part.Free()
        return datatype

    def pack(self) -> None:
        """Nothing to do: MPI reads the fields through the datatypes."""

    def unpack(self) -> None:
        """Nothing to do: MPI writes the fields through the datatypes."""

    def send_message(self, index: int) -> Any:
        from mpi4py import MPI

        return [MPI.BOTTOM, 1, self._sends[index]]

    def recv_message(self, index: int) -> Any:
        from mpi4py import MPI

        return [MPI.BOTTOM, 1, self._recvs[index]]

    def close(self) -> None:
        for datatype in self._sends + self._recvs:
            datatype.Free()
        self._sends, self._recvs = [], []
