"""Exchange patterns: per peer, which elements to send and where received ones go. Plain data, built once."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import PatternError


@dataclass(frozen=True)
class Box:
    """A rectangular block of a local array (with halo), ``start`` inclusive, ``stop`` exclusive, per axis."""

    start: tuple[int, ...]
    stop: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """Points per axis (``stop - start``)."""
        return tuple(b - a for a, b in zip(self.start, self.stop, strict=True))

    @property
    def size(self) -> int:
        """Points in the box."""
        return math.prod(self.shape)

    @property
    def slices(self) -> tuple[slice, ...]:
        """The box as an index of its array: ``a[box.slices]``."""
        return tuple(slice(a, b) for a, b in zip(self.start, self.stop, strict=True))


@dataclass(frozen=True, eq=False)
class Rows:
    """Rows (entries of the first axis) of a local array, in message order: nodes of an unstructured mesh.
    Every trailing axis (e.g. vertical levels) travels with its row."""

    index: np.ndarray

    def __post_init__(self) -> None:
        index = np.ascontiguousarray(self.index, dtype=np.int64)
        index.setflags(write=False)
        object.__setattr__(self, "index", index)

    @property
    def size(self) -> int:
        """Rows selected."""
        return len(self.index)


Selection = Box | Rows


@dataclass(frozen=True)
class PeerPlan:
    """What one rank exchanges with one peer: the selections are packed in this order into one message."""

    rank: int
    send: tuple[Selection, ...]
    recv: tuple[Selection, ...]

    @property
    def send_size(self) -> int:
        """Elements sent per field."""
        return sum(s.size for s in self.send)

    @property
    def recv_size(self) -> int:
        """Elements received per field."""
        return sum(s.size for s in self.recv)


@dataclass(frozen=True)
class Pattern:
    """Everything one rank sends and receives in an exchange, peers in ascending rank order.

    ``local_shape`` is the shape every field of the exchange must have on this rank; with
    ``trailing_axes`` fields may have more axes after it (e.g. levels), which travel with each row.
    ``recv_shape`` is the shape of the arrays received selections are written into, when they are not the
    fields that are sent from (a transposition's destinations); None: the same arrays (a halo exchange).
    """

    local_shape: tuple[int, ...]
    peers: tuple[PeerPlan, ...]
    trailing_axes: bool = False
    recv_shape: tuple[int, ...] | None = None

    @property
    def destination_shape(self) -> tuple[int, ...]:
        """The shape of the arrays the receive selections select from: ``recv_shape``, else ``local_shape``."""
        return self.local_shape if self.recv_shape is None else self.recv_shape

    def check_bounds(self) -> None:
        """Raise PatternError if a send selection reaches outside ``local_shape``, or a receive selection
        outside ``destination_shape`` (or a box has another number of axes than its array)."""
        for peer in self.peers:
            for which, shape, selections in (
                ("send", self.local_shape, peer.send),
                ("receive", self.destination_shape, peer.recv),
            ):
                for sel in selections:
                    if isinstance(sel, Rows):
                        bad = sel.size > 0 and (sel.index.min() < 0 or sel.index.max() >= shape[0])
                    elif len(sel.start) != len(shape) or len(sel.stop) != len(shape):
                        raise PatternError(
                            f"a {which} box for peer {peer.rank} ({sel}) has {len(sel.start)} axes, but its "
                            f"array has {len(shape)} {shape}; give start and stop for every axis"
                        )
                    else:
                        bounds = zip(sel.start, sel.stop, shape, strict=True)
                        bad = any(a < 0 or b > n or a > b for a, b, n in bounds)
                    if bad:
                        where = sel if isinstance(sel, Box) else "rows"
                        raise PatternError(f"a {which} selection for peer {peer.rank} ({where}) lies outside {shape}")

    def check_matches_peers(self, mpi_comm) -> None:
        """Collective: raise PatternError on every rank if some pair of ranks disagrees on a message size.

        Each rank tells each rank how many elements (per field) it will send it; the receiver compares that
        with what it expects to receive.
        """
        size = mpi_comm.Get_size()
        sends = np.zeros(size, dtype=np.int64)
        expected = np.zeros(size, dtype=np.int64)
        for peer in self.peers:
            sends[peer.rank] = peer.send_size
            expected[peer.rank] = peer.recv_size
        incoming = np.zeros(size, dtype=np.int64)
        mpi_comm.Alltoall(sends, incoming)
        bad = [(int(r), int(incoming[r]), int(expected[r])) for r in np.nonzero(incoming != expected)[0]]
        all_bad = mpi_comm.allgather(bad)
        problems = [
            f"rank {src} sends {n} elements per field to rank {dst}, which expects {m}"
            for dst, rows in enumerate(all_bad)
            for src, n, m in rows
        ]
        if problems:
            raise PatternError("ranks disagree on the exchange: " + "; ".join(problems[:8]))
