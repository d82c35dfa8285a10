"""Packing: gathering the selected elements of many fields into per-peer messages, and back."""

from .copy import CopyPacker
from .datatype import DatatypePacker
from .layout import FieldSpec, Layout, PeerMessage, Segment

__all__ = ["CopyPacker", "DatatypePacker", "FieldSpec", "Layout", "PeerMessage", "Segment"]
