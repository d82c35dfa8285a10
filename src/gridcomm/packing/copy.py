"""Packing by copies into contiguous buffers: every selection of every field gathered into (and scattered out of)
one byte array, in one call each way per exchange; and what a rank sends itself, copied alike.

On the host the whole gather is a single ``MPI_Pack`` and the whole scatter a single ``MPI_Unpack``, through one
MPI struct datatype per direction built when the exchange is bound: a member per field and selection (a
subarray, or indexed rows), at its absolute address, in the layout's byte order, and a member per padding gap of
the layout (read from, or written into, a scratch array of the packer's). MPI's datatype engine then walks every
box of every field in compiled code: no Python loop per box or per field, no index arrays. Elements move as
integers of their size, so every bit of every value arrives unchanged.

What a rank sends itself (a periodic dimension over one rank, a transposition's diagonal block) goes the same
way through a scratch buffer small enough to stay in the cache (``OwnCopier``): packed and unpacked a few hundred
KiB at a time, which costs what a direct copy of each box would, in a call or two per exchange.

``local_copies`` is the GPU path's copy of what a rank sends itself, view to view with ``copyto``.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..pattern import Box, PeerPlan, Selection
from .datatype import selection_type
from .geometry import RunGrid, run_grid
from .layout import BufferedMessages, FieldSpec, Layout, PeerMessage


def _address(a: Any) -> int:
    return int(a.__array_interface__["data"][0])


@dataclass(frozen=True)
class _Piece:
    """One member of a struct datatype, ``nbytes`` at ``address``: the runs of ``grid`` (a selection of a field,
    ``address`` its first byte), selection ``sel`` of ``array`` (traversed as ``spec`` says) where no run grid
    describes it, or, with neither, plain bytes (a padding gap's scratch bytes)."""

    address: int
    nbytes: int
    grid: RunGrid | None = None
    array: Any = None
    spec: FieldSpec | None = None
    sel: Selection | None = None

    def datatype(self) -> Any:
        from mpi4py import MPI

        if self.grid is not None:
            # Each run a block of the widest integer dividing it, in vectors of runs: MPICH's engine copies those
            # at NumPy's speed or better, where a subarray type of the elements took 1.6x NumPy's time (32² x 60
            # float64, 4 fields) and a run of plain bytes 10x (it copies those byte by byte).
            g = self.grid
            unit = next(u for u in (8, 4, 2, 1) if g.run_bytes % u == 0)
            integer = {8: MPI.INT64_T, 4: MPI.INT32_T, 2: MPI.INT16_T, 1: MPI.BYTE}[unit]
            run = integer.Create_contiguous(g.run_bytes // unit)
            if g.index is None:
                inner = run.Create_hvector(g.n1, 1, g.stride1)
            else:
                inner = run.Create_hindexed_block(1, (g.index * g.stride1).tolist())
            outer = inner.Create_hvector(g.n0, 1, g.stride0)
            run.Free()
            inner.Free()
            return outer
        if self.sel is not None:
            return selection_type(self.array.shape, self.spec, self.sel)
        return MPI.BYTE.Create_contiguous(self.nbytes)


def _selection(array: Any, spec: FieldSpec, sel: Selection) -> list[_Piece]:
    """The piece of ``sel`` in ``array``, or none for an empty selection (MPI has no empty subarray)."""
    nbytes = sel.size * spec.row_items * spec.dtype.itemsize
    if not nbytes:
        return []
    try:
        grid = run_grid(array.shape, spec, sel)
    except ValueError:  # more than 2 axes outside the contiguous runs: MPI's own subarray type
        return [_Piece(_address(array), nbytes, None, array, spec, sel)]
    return [_Piece(_address(array) + grid.start, nbytes, grid)]


class _Struct:
    """One MPI struct datatype over ``pieces`` (in stream order), and the anchor ``MPI_Pack`` and ``MPI_Unpack``
    take it at: displacements count from the lowest address and the extent is 1 byte, so the anchor (a 1-byte
    buffer at that address) holds exactly one instance of the struct. None of it when there are no pieces."""

    def __init__(self, pieces: Sequence[_Piece]) -> None:
        from mpi4py import MPI

        self.nbytes = sum(p.nbytes for p in pieces)
        self.type: Any = None
        self.anchor: Any = None
        if not pieces:
            return
        base = min(p.address for p in pieces)
        parts = [p.datatype() for p in pieces]
        struct = MPI.Datatype.Create_struct([1] * len(parts), [p.address - base for p in pieces], parts)
        self.type = struct.Create_resized(0, 1).Commit()
        for datatype in [*parts, struct]:
            datatype.Free()
        packed = self.type.Pack_size(1, MPI.COMM_SELF)
        if packed != self.nbytes:  # MPI_Pack may add a header; none of the MPIs of one architecture do
            self.free()
            raise RuntimeError(
                f"this MPI packs {self.nbytes} B of data into {packed} B, so the copy packer cannot lay out its "
                "messages; use MpiTransport(packing='datatype') for host fields"
            )
        self.anchor = MPI.buffer.fromaddress(base, 1)

    def call_packing(self, into: Any) -> Callable[[], Any]:
        """MPI_Pack of one instance into the buffer ``into`` (of ``nbytes``), its arguments bound now."""
        from mpi4py import MPI

        return _nothing if self.type is None else functools.partial(self.type.Pack, self.anchor, into, 0, MPI.COMM_SELF)

    def call_unpacking(self, source: Any) -> Callable[[], Any]:
        """MPI_Unpack of one instance out of the buffer ``source`` (of ``nbytes``), its arguments bound now."""
        from mpi4py import MPI

        if self.type is None:
            return _nothing
        return functools.partial(self.type.Unpack, source, 0, self.anchor, MPI.COMM_SELF)

    def free(self) -> None:
        if self.type is not None:
            self.type.Free()
        self.type = self.anchor = None


class CopyPacker(BufferedMessages):
    """Packs host fields into one send buffer and unpacks one receive buffer into them (or into other arrays):
    one ``MPI_Pack`` and one ``MPI_Unpack`` per exchange for every field and selection (see the module docstring).

    Args:
        layout: the byte layout of the exchange's messages.
        fields: the NumPy arrays sent from, in the layout's field order.
        destinations: the arrays received into, field for field (a transposition's); None: ``fields``
            themselves (a halo exchange).
        recv_buffer: a uint8 array of at least ``layout.recv_nbytes`` bytes to receive into, where the transport
            needs it to be its own (``Transport.receive_buffer``: shm's lies in memory its senders share); None:
            the packer's own.
    """

    copies_data = True

    def __init__(
        self,
        layout: Layout,
        fields: Sequence[Any],
        destinations: Sequence[Any] | None = None,
        recv_buffer: Any = None,
    ) -> None:
        from mpi4py import MPI

        self.layout = layout
        received = fields if destinations is None else destinations
        self._arrays = (fields, received)  # the datatypes hold their addresses: keep the arrays alive
        self.send_buffer = np.empty(max(layout.send_nbytes, 1), dtype=np.uint8)
        self.recv_buffer = np.empty(max(layout.recv_nbytes, 1), dtype=np.uint8) if recv_buffer is None else recv_buffer
        # The layout's padding gaps are read from and written into scratch bytes of their own.
        packed = list(self._stream(layout.sends, layout.send_nbytes, fields))
        unpacked = list(self._stream(layout.recvs, layout.recv_nbytes, received))
        self._scratch, spare = _scratch_for(packed + unpacked)
        self._pack = _Struct(_fill(packed, spare))
        self._unpack = _Struct(_fill(unpacked, spare))
        # Everything each call takes, made once: an exchange then costs one call into MPI each way.
        self._pack_call = self._pack.call_packing(MPI.buffer(self.send_buffer[: layout.send_nbytes]))
        self._unpack_call = self._unpack.call_unpacking(MPI.buffer(self.recv_buffer[: layout.recv_nbytes]))
        self._message_packs: list[_Struct] = []  # send_into's, one per message
        self._message_gaps: list[np.ndarray] = []

    def _stream(
        self, messages: Sequence[PeerMessage], total: int, arrays: Sequence[Any], at: int = 0
    ) -> Iterator[_Piece | int]:
        """Bytes ``at`` to ``total`` of a buffer laid out as ``messages``, in byte order: each segment's piece, and
        the size of each padding gap before it (and at the end)."""
        for message in messages:
            for seg in message.segments:  # laid out one after the other (Layout.build)
                if seg.nbytes:
                    yield seg.offset - at
                    yield from _selection(arrays[seg.field], self.layout.fields[seg.field], seg.selection)
                    at = seg.offset + seg.nbytes
        yield total - at

    def pack(self) -> None:
        """Gather every send selection into the send buffer: one MPI_Pack (or one per message, see send_into)."""
        self._pack_call()

    def send_into(self, buffers: Sequence[Any], order: Sequence[int] | None = None) -> None:
        """From now on pack send message ``i`` straight into ``buffers[i]`` (an MPI buffer of its size, e.g. in its
        receiver's memory: the shm transport's) instead of the send buffer: one MPI_Pack per message, a copy
        fewer for the transport; the messages in ``order`` (indices; None: the layout's)."""
        self._message_packs, self._message_gaps = [], []
        calls = []
        for message, into in zip(self.layout.sends, buffers, strict=True):
            items = list(self._stream([message], message.offset + message.nbytes, self._arrays[0], message.offset))
            scratch, spare = _scratch_for(items)
            struct = _Struct(_fill(items, spare))
            self._message_packs.append(struct)
            self._message_gaps.append(scratch)  # the padding gaps' bytes, written by the struct
            calls.append(struct.call_packing(into))
        self._pack.free()
        calls = calls if order is None else [calls[i] for i in order]

        def pack() -> None:
            for call in calls:
                call()

        self._pack_call = pack

    def unpack(self) -> None:
        """Scatter the receive buffer into every receive selection: one MPI_Unpack."""
        self._unpack_call()

    def close(self) -> None:
        self._pack.free()
        self._unpack.free()
        for struct in self._message_packs:
            struct.free()
        self._pack_call = self._unpack_call = _nothing
        self._arrays = ((), ())


class OwnCopier:
    """Copies what a rank sends itself: each field's ``own.send`` selections of ``sources`` land in its
    ``own.recv`` selections of ``destinations``, element after element in the field's memory order (the two
    sides may be cut into boxes differently). ``copy()`` packs and unpacks it through one scratch buffer,
    ``chunk_bytes`` at a time at most where selections allow (a field's boxes that pair one to one with equal
    extents may go in different chunks, and so may the slabs of a box paired with a block of a 1-D array; a field
    cut differently on the two sides otherwise goes whole): a buffer that stays in the cache costs what a direct
    copy of each box would, where one pass over all of it through memory and back costs twice that.

    Args:
        specs: each field's element type, memory order and trailing shape.
        sources: the arrays sent from.
        destinations: the arrays received into, field for field (the sources themselves for a halo exchange).
        own: each field's plan with this rank itself.
        chunk_bytes: the most bytes packed before they are unpacked, where the selections can be split there.
    """

    def __init__(
        self,
        specs: Sequence[FieldSpec],
        sources: Sequence[Any],
        destinations: Sequence[Any],
        own: Sequence[PeerPlan],
        chunk_bytes: int = 256 << 10,
    ) -> None:
        from mpi4py import MPI

        self._arrays = (sources, destinations)  # the datatypes hold their addresses: keep the arrays alive
        groups: list[tuple[list[_Piece], list[_Piece]]] = []
        for sent, received in _own_units(specs, sources, destinations, own):
            size = sum(p.nbytes for p in sent)
            if not groups or sum(p.nbytes for p in groups[-1][0]) + size > chunk_bytes:
                groups.append(([], []))
            groups[-1][0].extend(sent)
            groups[-1][1].extend(received)
        self.nbytes = sum(p.nbytes for sent, _ in groups for p in sent)
        self._structs = [(_Struct(sent), _Struct(received)) for sent, received in groups if sent]
        self._scratch = np.empty(max([1, *(pack.nbytes for pack, _ in self._structs)]), dtype=np.uint8)
        self._calls = [
            (pack.call_packing(buffer), unpack.call_unpacking(buffer))
            for pack, unpack in self._structs
            for buffer in [MPI.buffer(self._scratch[: pack.nbytes])]
        ]

    def copy(self) -> None:
        """Copy it all: one MPI_Pack and one MPI_Unpack per chunk."""
        for pack, unpack in self._calls:
            pack()
            unpack()

    def close(self) -> None:
        for pack, unpack in self._structs:
            pack.free()
            unpack.free()
        self._structs, self._calls, self._arrays = [], [], ((), ())


def _own_units(
    specs: Sequence[FieldSpec], sources: Sequence[Any], destinations: Sequence[Any], own: Sequence[PeerPlan]
) -> Iterator[tuple[list[_Piece], list[_Piece]]]:
    """What a rank sends itself in the smallest runs of selections that hold the same elements on both sides: the
    stream of a field's send selections and that of its receive selections are cut wherever both have a
    selection boundary at the same element count (between each box pair that pairs one to one, for example)."""
    for spec, source, destination, plan in zip(specs, sources, destinations, own, strict=True):
        send, recv = _slabs_against_ranges(plan, source.ndim, destination.ndim, spec.order)
        sizes_sent = np.cumsum([sel.size for sel in send]).tolist()
        sizes_received = np.cumsum([sel.size for sel in recv]).tolist()
        cuts = sorted(set(sizes_sent) & set(sizes_received))
        sent = _cut([_selection(source, spec, sel) for sel in send], sizes_sent, cuts)
        received = _cut([_selection(destination, spec, sel) for sel in recv], sizes_received, cuts)
        yield from zip(sent, received, strict=True)


def _slabs_against_ranges(
    plan: PeerPlan, source_ndim: int, destination_ndim: int, order: str
) -> tuple[list[Selection], list[Selection]]:
    """``plan``'s send and receive selections, where a box of a 1-D array pairs with a box of as many elements
    of a larger array (the spectral dwarf's diagonal block: a block of its flat Legendre side into a box of its
    Fourier side), the latter cut into slabs of its slowest axis and the former into ranges of the same sizes:
    both sides then end a selection at each slab, so that the copy goes in cache-sized chunks, not whole."""
    send, recv = list(plan.send), list(plan.recv)
    if len(send) != len(recv) or (source_ndim == 1) == (destination_ndim == 1):
        return send, recv
    sends: list[Selection] = []
    recvs: list[Selection] = []
    for s, r in zip(send, recv, strict=True):
        if not (isinstance(s, Box) and isinstance(r, Box) and s.size == r.size):
            sends.append(s)
            recvs.append(r)
        elif source_ndim == 1:
            recvs += (slabs := _slabs(r, order))
            sends += _ranges(s, slabs)
        else:
            sends += (slabs := _slabs(s, order))
            recvs += _ranges(r, slabs)
    return sends, recvs


def _slabs(box: Box, order: str) -> list[Box]:
    """``box`` cut into slabs one index thick along its slowest axis in memory order ``order``."""
    axis = 0 if order == "C" else len(box.start) - 1
    slabs = []
    for k in range(box.start[axis], box.stop[axis]):
        start, stop = list(box.start), list(box.stop)
        start[axis], stop[axis] = k, k + 1
        slabs.append(Box(tuple(start), tuple(stop)))
    return slabs


def _ranges(box: Box, pieces: Sequence[Box]) -> list[Box]:
    """The 1-D ``box`` cut into consecutive ranges of the sizes of ``pieces``."""
    first, ranges = box.start[0], []
    for piece in pieces:
        ranges.append(Box((first,), (first + piece.size,)))
        first += piece.size
    return ranges


def _cut(pieces: list[list[_Piece]], ends: list[int], cuts: list[int]) -> list[list[_Piece]]:
    """``pieces`` (one list per selection, ending at element ``ends[i]``) grouped at the element counts ``cuts``."""
    groups: list[list[_Piece]] = [[] for _ in cuts]
    for selection, end in zip(pieces, ends, strict=True):
        groups[bisect.bisect_left(cuts, end)].extend(selection)
    return groups


def _nothing() -> None:
    pass


def _scratch_for(items: Sequence[_Piece | int]) -> tuple[np.ndarray, Iterator[int]]:
    """Scratch bytes for every padding gap of ``items`` (the gap sizes among the pieces), and the address of each
    gap's bytes in turn, for ``_fill``."""
    gaps = [item for item in items if isinstance(item, int)]
    scratch = np.empty(max(sum(gaps), 1), dtype=np.uint8)
    return scratch, iter(np.cumsum([_address(scratch), *gaps]).tolist())


def _fill(items: Sequence[_Piece | int], spare: Iterator[int]) -> list[_Piece]:
    """``items`` with each gap size replaced by a piece of that many scratch bytes (the next address of
    ``spare``: every gap gets bytes of its own, as MPI_Unpack must not write one byte twice); empty gaps dropped."""
    pieces = []
    for item in items:
        if isinstance(item, int):
            address = next(spare)
            if item:
                pieces.append(_Piece(address, item))
        else:
            pieces.append(item)
    return pieces


def local_copies(
    plans: Sequence[PeerPlan], specs: Sequence[FieldSpec], sources: Sequence[Any], destinations: Sequence[Any], xp: Any
) -> list[tuple[Any, Any]]:
    """What a rank sends itself, as (destination view, source view) pairs to ``xp.copyto`` in this order (GPU
    fields; host fields copy it with ``OwnCopier``).

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
