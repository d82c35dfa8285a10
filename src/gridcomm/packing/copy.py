"""Packing by array copies: every selection of every field copied into (and out of) one contiguous buffer.

Works for any array module with ``copyto`` (NumPy, CuPy). The views are made once at construction, so a
pack or unpack allocates nothing: it is one ``copyto`` per field and selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .layout import Layout, PeerMessage


def _segment_view(buffer: Any, offset: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...], order: str) -> Any:
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape, order=order)


class CopyPacker:
    """Packs fields into one send buffer and unpacks one receive buffer into them.

    Args:
        layout: the byte layout of the exchange's messages.
        fields: the arrays, in the layout's field order, all from array module ``xp``.
        xp: numpy or cupy.
    """

    copies_data = True

    def __init__(self, layout: Layout, fields: Sequence[Any], xp: Any) -> None:
        self.xp = xp
        self.layout = layout
        self.send_buffer = xp.empty(max(layout.send_nbytes, 1), dtype=np.uint8)
        self.recv_buffer = xp.empty(max(layout.recv_nbytes, 1), dtype=np.uint8)
        self._pack = self._pairs(layout.sends, self.send_buffer, fields, into_buffer=True)
        self._unpack = self._pairs(layout.recvs, self.recv_buffer, fields, into_buffer=False)

    def _pairs(
        self, messages: Sequence[PeerMessage], buffer: Any, fields: Sequence[Any], into_buffer: bool
    ) -> list[tuple[Any, Any]]:
        pairs = []
        for message in messages:
            for seg in message.segments:
                field, spec = fields[seg.field], self.layout.fields[seg.field]
                # Packed in the order all ranks agreed on, so that sender and receiver read the same bytes.
                packed = _segment_view(buffer, seg.offset, seg.nbytes, spec.dtype, seg.box.shape, spec.order)
                selected = field[seg.box.slices]
                pairs.append((packed, selected) if into_buffer else (selected, packed))
        return pairs

    def pack(self) -> None:
        """Copy every send selection into the send buffer."""
        copyto = self.xp.copyto
        for dst, src in self._pack:
            copyto(dst, src)

    def unpack(self) -> None:
        """Copy the receive buffer into every receive selection."""
        copyto = self.xp.copyto
        for dst, src in self._unpack:
            copyto(dst, src)

    def send_message(self, index: int) -> Any:
        """The bytes of send message ``index`` (a view of the send buffer)."""
        m = self.layout.sends[index]
        return self.send_buffer[m.offset : m.offset + m.nbytes]

    def recv_message(self, index: int) -> Any:
        """The bytes of receive message ``index`` (a view of the receive buffer)."""
        m = self.layout.recvs[index]
        return self.recv_buffer[m.offset : m.offset + m.nbytes]

    def close(self) -> None:
        self._pack, self._unpack = [], []
