"""Exchange patterns: per peer, which elements to send and where received ones go. Plain data, built once."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

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
        _check_sizes(mpi_comm, [self], ["per field"])


@dataclass(frozen=True)
class FieldPatterns:
    """The patterns of an exchange's fields, one per field: field i moves by ``patterns[i]``.

    The fields of one decomposition share its one pattern (the same object, once per field); fields of
    different halos or staggering, or an unstructured mesh's fields on different row sets, each bring their
    own. Whatever field i sends a peer, and then field i + 1, travels in one message per peer.
    """

    patterns: tuple[Pattern, ...]

    @classmethod
    def uniform(cls, pattern: Pattern, fields: int) -> FieldPatterns:
        """``pattern`` for each of ``fields`` fields."""
        return cls((pattern,) * fields)

    @cached_property
    def _plans(self) -> tuple[dict[int, PeerPlan], ...]:
        return tuple({plan.rank: plan for plan in pattern.peers} for pattern in self.patterns)

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every rank some field exchanges with, ascending."""
        return tuple(sorted(set().union(*self._plans)))

    def plans(self, rank: int) -> tuple[PeerPlan, ...]:
        """What each field exchanges with ``rank``: its plan, or an empty one where it exchanges nothing."""
        return tuple(plans.get(rank, PeerPlan(rank, (), ())) for plans in self._plans)

    def restricted(self, ranks: Iterable[int]) -> FieldPatterns:
        """These patterns with only the peers in ``ranks`` (patterns shared between fields stay shared)."""
        keep, made = set(ranks), {}
        for pattern in self.patterns:
            if id(pattern) not in made:
                peers = tuple(p for p in pattern.peers if p.rank in keep)
                made[id(pattern)] = Pattern(pattern.local_shape, peers, pattern.trailing_axes, pattern.recv_shape)
        return FieldPatterns(tuple(made[id(p)] for p in self.patterns))

    def _distinct(self) -> list[Pattern]:
        """The patterns, each once (the fields of one decomposition share one)."""
        return list({id(p): p for p in self.patterns}.values())

    def check_bounds(self) -> None:
        """``Pattern.check_bounds`` of every field's pattern."""
        for pattern in self._distinct():
            pattern.check_bounds()

    def check_matches_peers(self, mpi_comm) -> None:
        """Collective: raise PatternError on every rank if some pair of ranks disagrees on the size of some
        field's part of a message (in one all-to-all, however many patterns there are)."""
        distinct = self._distinct()
        if len(distinct) == 1:
            _check_sizes(mpi_comm, distinct, ["per field"])
            return
        _check_sizes(mpi_comm, list(self.patterns), [f"of field {i}" for i in range(len(self.patterns))])


def _check_sizes(mpi_comm, patterns: Sequence[Pattern], what: Sequence[str]) -> None:
    """Collective: PatternError on every rank unless every rank expects from each peer, for every pattern, the
    elements that peer sends it (``what`` names each pattern's elements in the message, e.g. "per field")."""
    size, count = mpi_comm.Get_size(), len(patterns)
    sends = np.zeros((size, count), dtype=np.int64)
    expected = np.zeros((size, count), dtype=np.int64)
    for k, pattern in enumerate(patterns):
        for peer in pattern.peers:
            sends[peer.rank, k] = peer.send_size
            expected[peer.rank, k] = peer.recv_size
    incoming = np.zeros((size, count), dtype=np.int64)
    mpi_comm.Alltoall(sends, incoming)
    bad = [(int(r), int(k), int(incoming[r, k]), int(expected[r, k])) for r, k in np.argwhere(incoming != expected)]
    all_bad = mpi_comm.allgather(bad)
    problems = [
        f"rank {src} sends {n} elements {what[k]} to rank {dst}, which expects {m}"
        for dst, rows in enumerate(all_bad)
        for src, k, n, m in rows
    ]
    if problems:
        raise PatternError("ranks disagree on the exchange: " + "; ".join(problems[:8]))
