"""Validation mode: every exchange checked against checksums of what its peers sent.

With ``validate=True`` (or ``GRIDCOMM_VALIDATE=1``) each rank computes, when an exchange starts, checksums of
the elements it sends to each peer, read from the source arrays themselves, and sends them beside the
exchange; after the exchange the receiver computes the same checksums of the elements now in its destination
arrays and compares. The check covers the whole path (pack, transport, unpack), is independent of the
transport, and is free when off (the exchanger holds no validator).

Checksums are taken per block of ``BLOCK_ITEMS`` elements, so a mismatch is located to a range of elements.
Each is two sums over the block's bytes read as 32-bit words, plain and position-weighted (Fletcher's idea):
any changed word, and any two words swapped, changes one of them. Bytes, not values, are summed: NaN
payloads and signed zeros are compared bitwise, like the exchange itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .arguments import environment_flag
from .errors import ArgumentTypeError, GridcommTimeout, ValidationError
from .packing.layout import FieldSpec
from .pattern import Box, PeerPlan, Selection
from .waiting import poll_until

#: Elements per checksum: a mismatch is reported as a range of at most this many elements.
BLOCK_ITEMS = 1024


def _current(stream: Any) -> Any:
    """``with _current(stream)``: ``stream`` made current for the checksum kernels (GPU), or nothing (host)."""
    return contextlib.nullcontext() if stream is None else stream


def check_validate(value: bool | None) -> bool:
    """``value`` as a bool; None reads ``GRIDCOMM_VALIDATE`` (default off)."""
    if value is None:
        return environment_flag("GRIDCOMM_VALIDATE", False, "validate every exchange")
    if not isinstance(value, bool | np.bool_):
        raise ArgumentTypeError(f"validate={value!r}: pass True or False (or None for GRIDCOMM_VALIDATE)")
    return bool(value)


def block_checksums(values: Any, xp: Any) -> Any:
    """Checksums of ``values`` (1-D, any dtype) per block of BLOCK_ITEMS elements: uint64 array (blocks, 2)."""
    width = BLOCK_ITEMS * values.dtype.itemsize // 4  # 32-bit words per block (itemsizes are 1 to 16 bytes)
    blocks = -(-values.size // BLOCK_ITEMS)
    words = xp.zeros(blocks * width * 4, dtype=xp.uint8)
    words[: values.nbytes] = xp.ascontiguousarray(values).view(xp.uint8)
    words = words.view(xp.uint32).reshape(blocks, width).astype(xp.uint64)
    # No sum can wrap: at most 16384 words of < 2**32, weighted by at most 16384: < 2**60.
    weights = xp.arange(1, width + 1, dtype=xp.uint64)
    return xp.stack([words.sum(axis=1), (words * weights).sum(axis=1)], axis=1)


class ExchangeValidator:
    """The checksums of one exchanger: posted by ``post`` when an exchange starts, compared by ``check``.

    Args:
        comm: the exchanger's Communicator.
        plans: per peer of the exchange, this rank itself (a periodic wrap, a diagonal block) included, each
            field's plan (``FieldPatterns.plans``).
        sources, destinations: the arrays sends are read from and receives written into (field i to field i).
        specs: the fields' FieldSpecs (memory order: the order elements travel in).
        xp: NumPy or CuPy.
        tag: the MPI tag the checksums travel under (one of the exchanger's own).
    """

    def __init__(
        self,
        comm: Any,
        plans: Sequence[Sequence[PeerPlan]],
        sources: Sequence[Any],
        destinations: Sequence[Any],
        specs: Sequence[FieldSpec],
        xp: Any,
        tag: int,
    ) -> None:
        self._comm, self._plans, self._xp, self._tag = comm, list(plans), xp, tag
        self._sources, self._destinations, self._specs = list(sources), list(destinations), list(specs)
        self._indices: dict[int, Any] = {}  # Rows index arrays, on the arrays' device
        self._requests: list[Any] = []
        self._expected: dict[int, np.ndarray] = {}

    def _values(self, array: Any, selections: Sequence[Selection], order: str) -> Any:
        """The elements of ``selections`` of ``array`` in message order (selection after selection, each in
        ``order``), as one 1-D array."""
        parts = []
        for selection in selections:
            if isinstance(selection, Box):
                parts.append(array[selection.slices].ravel(order=order))
                continue
            index = self._indices.get(id(selection))
            if index is None:
                index = self._indices[id(selection)] = self._xp.asarray(selection.index)
            parts.append(array[index].ravel(order=order))
        return self._xp.concatenate(parts) if parts else self._xp.empty(0, array.dtype)

    def _blocks(self, plans: Sequence[PeerPlan], side: str) -> list[int]:
        """Checksum blocks per field of the send or recv side of ``plans`` (one per field). Blocks run across
        selections: a receiver may cut a transposition's block into other boxes than its sender."""
        sizes = [plan.send_size if side == "send" else plan.recv_size for plan in plans]
        return [-(-(size * spec.row_items) // BLOCK_ITEMS) for size, spec in zip(sizes, self._specs, strict=True)]

    def _checksums(self, arrays: Sequence[Any], plans: Sequence[PeerPlan], side: str) -> np.ndarray:
        """Host array (blocks, 2) of the checksums of the send or recv side of ``plans``, field after field."""
        xp = self._xp
        sums = [
            block_checksums(self._values(array, plan.send if side == "send" else plan.recv, spec.order), xp)
            for array, plan, spec in zip(arrays, plans, self._specs, strict=True)
        ]
        joined = xp.concatenate(sums) if sums else xp.empty((0, 2), xp.uint64)
        return np.ascontiguousarray(joined.get() if hasattr(joined, "get") else joined)

    def post(self, stream: Any = None) -> None:
        """When an exchange starts: checksum what this rank sends and send it; post the peers' receives."""
        with _current(stream):
            mpi, me = self._comm.mpi, self._comm.rank
            self._requests, self._expected, self._sent = [], {}, []
            for plans in self._plans:
                peer = plans[0].rank
                if peer == me:
                    self._expected[me] = self._checksums(self._sources, plans, "send")
                    continue
                expected = np.empty((sum(self._blocks(plans, "recv")), 2), dtype=np.uint64)
                self._expected[peer] = expected
                sent = self._checksums(self._sources, plans, "send")
                self._sent.append(sent)  # must live until its send completes
                self._requests += [mpi.Irecv(expected, peer, self._tag), mpi.Isend(sent, peer, self._tag)]

    def check(self, timeout: float, operation: object, stream: Any = None) -> None:
        """After the exchange: compare the destinations' checksums with the peers'; ValidationError on a mismatch."""
        from mpi4py import MPI

        peers = [plans[0].rank for plans in self._plans if plans[0].rank != self._comm.rank]
        poll_until(
            lambda: MPI.Request.Testall(self._requests),
            timeout,
            lambda elapsed: GridcommTimeout(f"{operation} (validation checksums)", self._comm.rank, peers, elapsed),
        )
        with _current(stream):
            for plans in self._plans:
                found = self._checksums(self._destinations, plans, "recv")
                bad = np.nonzero((found != self._expected[plans[0].rank]).any(axis=1))[0]
                if len(bad):
                    raise ValidationError(self._describe(plans, int(bad[0]), len(bad), operation))

    def _describe(self, plans: Sequence[PeerPlan], block: int, count: int, operation: object) -> str:
        """Which field, peer and elements checksum block number ``block`` of the receive side of ``plans`` (one
        per field) covers."""
        for field, blocks in enumerate(self._blocks(plans, "recv")):
            if block < blocks:
                spec, plan = self._specs[field], plans[field]
                first = block * BLOCK_ITEMS
                last = min(first + BLOCK_ITEMS, plan.recv_size * spec.row_items) - 1
                source = "this rank itself" if plan.rank == self._comm.rank else f"rank {plan.rank}"
                return (
                    f"rank {self._comm.rank}: {operation}: field {field} received from {source} differs from what "
                    f"was sent, somewhere from local index {_locate(plan.recv, spec, first)} to "
                    f"{_locate(plan.recv, spec, last)} ({count} block(s) of up to {BLOCK_ITEMS} elements differ in "
                    "this message). The data was corrupted in packing, transport or unpacking, or something wrote "
                    "into the received region while the exchange was in flight"
                )
            block -= blocks
        raise AssertionError(f"checksum block {block} beyond the message")  # unreachable: blocks were counted


def _locate(selections: Sequence[Selection], spec: FieldSpec, position: int) -> str:
    """Where element ``position`` (in message order) of ``selections`` of a field like ``spec`` lies: its index
    in the destination array and the selection that holds it."""
    for selection in selections:
        items = selection.size * spec.row_items
        if position < items:
            if isinstance(selection, Box):
                index = np.unravel_index(position, selection.shape + spec.trailing, order=spec.order)
                origin = selection.start + (0,) * len(spec.trailing)
                where = "[" + ", ".join(f"{a}:{b}" for a, b in zip(selection.start, selection.stop, strict=True))
                return f"{tuple(int(i) + a for i, a in zip(index, origin, strict=True))} of box {where}]"
            row, *rest = np.unravel_index(position, (selection.size, *spec.trailing), order=spec.order)
            return f"{(int(selection.index[row]), *map(int, rest))} (row {int(row)} of {selection.size} received)"
        position -= items
    raise AssertionError("element beyond the message")  # unreachable: sizes were counted
