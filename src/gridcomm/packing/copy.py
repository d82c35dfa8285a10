"""Packing by array copies: every selection of every field copied into (and out of) one contiguous buffer.

Works for any array module with ``copyto`` and ``take`` (NumPy, CuPy). The views are made once at
construction, so a pack or unpack allocates no buffers: it is one copy per field and selection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..pattern import Box, PeerPlan, Rows
from .layout import BufferedMessages, FieldSpec, Layout, PeerMessage


def _segment_view(buffer: Any, offset: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...], order: str) -> Any:
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape, order=order)


def _put_rows(field: Any, index: Any, packed: Any) -> None:
    field[index] = packed


class CopyPacker(BufferedMessages):
    """Packs fields into one send buffer and unpacks one receive buffer into them (or into other arrays).

    Args:
        layout: the byte layout of the exchange's messages.
        fields: the arrays sent from, in the layout's field order, all from array module ``xp``.
        xp: numpy or cupy.
        destinations: the arrays received into, field for field (a transposition's); None: ``fields``
            themselves (a halo exchange).
    """

    copies_data = True

    def __init__(
        self, layout: Layout, fields: Sequence[Any], xp: Any, destinations: Sequence[Any] | None = None
    ) -> None:
        self.xp = xp
        self.layout = layout
        self.send_buffer = xp.empty(max(layout.send_nbytes, 1), dtype=np.uint8)
        self.recv_buffer = xp.empty(max(layout.recv_nbytes, 1), dtype=np.uint8)
        received = fields if destinations is None else destinations
        self._pack = self._copies(layout.sends, self.send_buffer, fields, into_buffer=True)
        self._unpack = self._copies(layout.recvs, self.recv_buffer, received, into_buffer=False)

    def _copies(
        self, messages: Sequence[PeerMessage], buffer: Any, fields: Sequence[Any], into_buffer: bool
    ) -> list[Callable[[], Any]]:
        """One prepared copy per field and selection: boxes by copyto of views, rows by take / put."""
        xp, copies = self.xp, []
        for message in messages:
            for seg in message.segments:
                field, spec, sel = fields[seg.field], self.layout.fields[seg.field], seg.selection
                shape = (sel.size, *spec.trailing) if isinstance(sel, Rows) else sel.shape
                # Packed in the order all ranks agreed on, so that sender and receiver read the same bytes.
                packed = _segment_view(buffer, seg.offset, seg.nbytes, spec.dtype, shape, spec.order)
                if isinstance(sel, Rows):
                    index = xp.asarray(sel.index)
                    # mode="clip": indices were checked at bind time, and "raise" would buffer the output.
                    copies.append(
                        partial(xp.take, field, index, axis=0, out=packed, mode="clip")
                        if into_buffer
                        else partial(_put_rows, field, index, packed)
                    )
                else:
                    selected = field[sel.slices]
                    copies.append(
                        partial(xp.copyto, packed, selected) if into_buffer else partial(xp.copyto, selected, packed)
                    )
        return copies

    def pack(self) -> None:
        """Copy every send selection into the send buffer."""
        for copy in self._pack:
            copy()

    def unpack(self) -> None:
        """Copy the receive buffer into every receive selection (of the destinations)."""
        for copy in self._unpack:
            copy()

    def close(self) -> None:
        self._pack, self._unpack = [], []


def local_copies(
    plans: Sequence[PeerPlan], specs: Sequence[FieldSpec], sources: Sequence[Any], destinations: Sequence[Any], xp: Any
) -> list[tuple[Any, Any]]:
    """What a rank sends itself, as (destination view, source view) pairs to ``xp.copyto`` in this order.

    ``plans`` lists, per field, the boxes sent (from ``sources``) and received (into ``destinations``). Boxes
    that pair one to one with equal shapes are copied view to view, with no buffer (a halo exchange's periodic
    wrap over one rank, a transposition's diagonal block). Otherwise the boxes' elements go through a scratch
    array per field, in the agreed memory order, exactly as a message to another rank would carry them.
    """
    copies = []
    for plan, spec, src, dst in zip(plans, specs, sources, destinations, strict=True):
        if not all(isinstance(sel, Box) for sel in plan.send + plan.recv):
            raise ValueError("a rank can only send itself boxes (unstructured patterns never do)")
        if pairs_directly(plan):
            copies += [(dst[r.slices], src[s.slices]) for s, r in zip(plan.send, plan.recv, strict=True)]
            continue
        scratch = xp.empty(max(plan.send_size, 1), dtype=spec.dtype)
        sent, received = _pieces(scratch, plan.send, spec.order), _pieces(scratch, plan.recv, spec.order)
        copies += [(piece, src[box.slices]) for piece, box in zip(sent, plan.send, strict=True)]
        copies += [(dst[box.slices], piece) for piece, box in zip(received, plan.recv, strict=True)]
    return copies


def pairs_directly(plan: PeerPlan) -> bool:
    """Whether ``plan``'s send and receive boxes pair one to one with equal extents (copied box to box)."""
    return len(plan.send) == len(plan.recv) and all(
        isinstance(s, Box) and isinstance(r, Box) and s.shape == r.shape
        for s, r in zip(plan.send, plan.recv, strict=True)
    )


def _pieces(scratch: Any, boxes: Sequence[Box], order: str) -> list[Any]:
    """Consecutive views of the 1-D ``scratch``, one per box, shaped like it in memory order ``order``."""
    views, offset = [], 0
    for box in boxes:
        views.append(scratch[offset : offset + box.size].reshape(box.shape, order=order))
        offset += box.size
    return views
