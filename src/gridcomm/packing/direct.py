"""No packing: each message described as the contiguous memory runs it occupies inside the fields.

For transports that copy straight from the sender's fields into the receiver's halos (one copy, no
buffers). A message's runs are listed in the same byte order as the copy layout packs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .geometry import run_grid
from .layout import Layout, PeerMessage


class DirectPacker:
    """Describes messages as runs of (address, bytes) in the fields; ``pack`` and ``unpack`` do nothing.

    Args:
        layout: the byte layout of the exchange's messages (the byte order the runs are listed in).
        fields: the arrays sent from, in the layout's field order.
        local: the layout of what this rank sends itself, for transports that copy it too (ipc), or None.
        destinations: the host arrays received into, field for field; None: ``fields`` themselves. (The
            ``ipc`` transport maps ``fields`` into the peers and so needs destinations that are the fields.)
    """

    copies_data = False

    def __init__(
        self,
        layout: Layout,
        fields: Sequence[Any],
        local: Layout | None = None,
        destinations: Sequence[Any] | None = None,
    ) -> None:
        self.layout = layout
        self.fields = fields
        self.destinations = fields if destinations is None else destinations
        self.local = local  # what this rank sends itself, for transports that copy it too (ipc)

    def _runs(self, message: PeerMessage, arrays: Sequence[Any]) -> np.ndarray:
        pieces = []
        for seg in message.segments:
            field = arrays[seg.field]
            grid = run_grid(field.shape, self.layout.fields[seg.field], seg.selection)
            offsets = grid.offsets() + field.__array_interface__["data"][0]
            pieces.append(np.stack([offsets, np.full_like(offsets, grid.run_bytes)], axis=1))
        return np.concatenate(pieces) if pieces else np.zeros((0, 2), dtype=np.int64)

    def send_runs(self, index: int) -> np.ndarray:
        """(address, bytes) rows of send message ``index``, in stream order."""
        return self._runs(self.layout.sends[index], self.fields)

    def recv_runs(self, index: int) -> np.ndarray:
        """(address, bytes) rows of receive message ``index``, in stream order."""
        return self._runs(self.layout.recvs[index], self.destinations)

    def pack(self) -> None:
        """Nothing to do: the transport reads the fields."""

    def unpack(self) -> None:
        """Nothing to do: the transport writes the fields."""

    def close(self) -> None:
        self.fields = self.destinations = ()
