"""Where each field's selections sit inside the per-peer message buffers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..pattern import FieldPatterns, Pattern, Selection

# Segments start on 16-byte boundaries: typed views stay aligned and GPU kernels can use vector loads.
ALIGNMENT = 16


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class FieldSpec:
    """What the packers need to know of a field: its element type, memory order ('C' or 'F') and the
    shape of the axes after the pattern's (``trailing``, e.g. levels), which travel with every row."""

    dtype: np.dtype
    order: str
    trailing: tuple[int, ...] = ()

    @property
    def row_items(self) -> int:
        """Elements that travel per selected element of the pattern."""
        return math.prod(self.trailing)


@dataclass(frozen=True)
class Segment:
    """One selection of one field, stored at ``offset`` bytes into the whole send or receive buffer."""

    field: int
    selection: Selection
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PeerMessage:
    """One message to or from one peer: a contiguous byte range of the send or receive buffer."""

    peer: int
    offset: int
    nbytes: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Layout:
    """Byte layout of the send and receive buffers of an exchange: field-major inside each peer's message.

    With ``align="segment"`` (a halo exchange) every selection starts on an ALIGNMENT boundary: typed views
    stay aligned and the GPU kernels can use vector loads, but sender and receiver must cut a message into
    selections of the same sizes. With ``align="field"`` (a transposition) only each field's part of a message
    does; its selections follow each other without padding, so that a block may be cut into other boxes on
    the receiving side than on the sending side (each selection still starts on a multiple of its itemsize).
    """

    fields: tuple[FieldSpec, ...]
    sends: tuple[PeerMessage, ...]
    recvs: tuple[PeerMessage, ...]
    send_nbytes: int
    recv_nbytes: int

    @classmethod
    def build(cls, pattern: Pattern | FieldPatterns, fields: Sequence[FieldSpec], align: str = "segment") -> Layout:
        """The layout of ``fields`` moved by ``pattern``: one Pattern for every field, or FieldPatterns (one per
        field). Peers in ascending rank order; inside a peer's message, field after field, each field's
        selections in its plan's order."""
        if align not in ("segment", "field"):
            raise ValueError(f"Layout.build(align={align!r}): use 'segment' or 'field'")
        patterns = pattern if isinstance(pattern, FieldPatterns) else FieldPatterns.uniform(pattern, len(fields))
        if len(patterns.patterns) != len(fields):
            raise ValueError(f"Layout.build: {len(patterns.patterns)} patterns for {len(fields)} fields")
        plans = [(rank, patterns.plans(rank)) for rank in patterns.ranks]
        sends, send_total = cls._messages(fields, [(r, [p.send for p in per_field]) for r, per_field in plans], align)
        recvs, recv_total = cls._messages(fields, [(r, [p.recv for p in per_field]) for r, per_field in plans], align)
        return cls(tuple(fields), sends, recvs, send_total, recv_total)

    @staticmethod
    def _messages(
        fields: Sequence[FieldSpec], selections: list[tuple[int, list[tuple[Selection, ...]]]], align: str
    ) -> tuple[tuple[PeerMessage, ...], int]:
        """Messages of (peer, the selections of each field for it), in that order; peers with nothing go out."""
        messages, offset = [], 0
        for peer, per_field in selections:
            start, segments = offset, []
            for f, (spec, chosen) in enumerate(zip(fields, per_field, strict=True)):
                for sel in chosen:
                    nbytes = sel.size * spec.row_items * spec.dtype.itemsize
                    segments.append(Segment(f, sel, offset, nbytes))
                    offset = _align(offset + nbytes) if align == "segment" else offset + nbytes
                offset = _align(offset)
            if segments:
                messages.append(PeerMessage(peer, start, offset - start, tuple(segments)))
        return tuple(messages), offset


class BufferedMessages:
    """The message views of a packer that keeps its messages back to back in two contiguous byte buffers,
    ``send_buffer`` and ``recv_buffer``, laid out by ``layout`` (the host and the CUDA packers)."""

    layout: Layout
    send_buffer: Any
    recv_buffer: Any

    def send_message(self, index: int) -> Any:
        """The bytes of send message ``index`` (a view of the send buffer)."""
        m = self.layout.sends[index]
        return self.send_buffer[m.offset : m.offset + m.nbytes]

    def recv_message(self, index: int) -> Any:
        """The bytes of receive message ``index`` (a view of the receive buffer)."""
        m = self.layout.recvs[index]
        return self.recv_buffer[m.offset : m.offset + m.nbytes]
