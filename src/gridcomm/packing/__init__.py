"""Packing: gathering the selected elements of many fields into per-peer messages, and back."""

from .copy import CopyPacker, OwnCopier, local_copies
from .datatype import DatatypePacker
from .direct import DirectPacker
from .geometry import RunGrid, run_grid
from .layout import FieldSpec, Layout, PeerMessage, Segment

__all__ = [
    "CopyPacker",
    "DatatypePacker",
    "DirectPacker",
    "FieldSpec",
    "Layout",
    "OwnCopier",
    "PeerMessage",
    "RunGrid",
    "Segment",
    "local_copies",
    "run_grid",
]
