"""All-to-all(v) transpositions: blocks of source arrays sent to every rank, landing in destination arrays.

A ``Transposer`` is a ``BoundExchange`` whose pattern comes from a plan of blocks
(which box of the sources goes to which rank, where each rank's blocks land in the destinations) instead of a
decomposition's halos, and whose receives are written into other arrays than its sends are read from. It
runs on the same packers and transports as the halo exchanger: one message per peer carrying every field,
the rank's own block copied source to destination while the messages are in flight.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from .arrays import array_list, as_array, check_dtype, check_writable, memory_order
from .comm import Communicator
from .device import cupy_or_none
from .errors import FieldError, GridcommError, PatternError
from .exchange import (
    BoundExchange,
    _compatible_orders,
    check_on_current_gpu,
    check_same_memory,
    check_same_transport,
    gather_or_raise,
    on_device_alike,
)
from .packing import FieldSpec, Layout, run_grid
from .pattern import Box, FieldPatterns, Pattern, PeerPlan
from .slabs import Redistribution, redistribution
from .transports import Transport, kind, names, requested

Blocks = Mapping[int, Box | Sequence[Box]]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Counts:
    """``from_counts``'s arguments for one direction, turned into boxes once the arrays' shape is known."""

    name: str  # "send" or "recv"
    counts: Any
    displs: Any

    def blocks(self, shape: tuple[int, ...], size: int) -> dict[int, tuple[Box, ...]]:
        counts = self._integers(f"{self.name}_counts", self.counts, size)
        if self.displs is None:  # packed one after the other, in rank order
            displs = [0, *np.cumsum(counts[:-1]).tolist()]
        else:
            displs = self._integers(f"{self.name}_displs", self.displs, size)
        rest = tuple(shape[1:])
        zeros = (0,) * len(rest)
        return {r: (Box((d, *zeros), (d + c, *rest)),) for r, (c, d) in enumerate(zip(counts, displs, strict=True))}

    @staticmethod
    def _integers(name: str, values: Any, size: int) -> list[int]:
        """``values`` as ``size`` non-negative ints, else PatternError naming ``name``."""
        try:  # not a mapping or a set either: they iterate over their keys, in no rank order
            one_axis = not isinstance(values, Mapping | Set | str | bytes) and np.ndim(values) == 1
            items = [operator.index(v) for v in values] if one_axis else None
        except (TypeError, ValueError):  # entries that are not integers, ragged nesting
            items = None
        if items is None:
            raise PatternError(
                f"{name} must be a sequence of integers (numbers of first-axis entries), one per rank; got {values!r}"
            )
        if len(items) != size:
            raise PatternError(f"{name} has {len(items)} entries, but the communicator has {size} ranks; give one each")
        negative = [(r, v) for r, v in enumerate(items) if v < 0]
        if negative:
            r, v = negative[0]
            raise PatternError(f"{name}[{r}] = {v} is negative; counts and displacements are >= 0 (first-axis entries)")
        return items


def _blocks(name: str, given: Any, shape: tuple[int, ...], size: int) -> dict[int, tuple[Box, ...]]:
    """``send`` or ``recv`` as {peer: boxes}, checked; PatternError naming what is wrong."""
    if isinstance(given, _Counts):
        return given.blocks(shape, size)
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise PatternError(f"{name} must map peer ranks to a Box or a sequence of Boxes; got a {type(given).__name__}")
    blocks = {}
    for key, value in given.items():
        try:
            peer = operator.index(key)
        except TypeError:
            raise PatternError(f"{name} has the key {key!r}; its keys are peer ranks (integers)") from None
        if not 0 <= peer < size:
            raise PatternError(f"{name} names rank {peer}, but the communicator has ranks 0..{size - 1}")
        boxes = (value,) if isinstance(value, Box) else value
        if not isinstance(boxes, Sequence) or not all(isinstance(b, Box) for b in boxes):
            raise PatternError(
                f"{name}[{peer}] must be a gridcomm.Box or a sequence of Boxes; got {type(value).__name__}"
            )
        blocks[peer] = tuple(_checked_box(f"{name}[{peer}]", b, shape) for b in boxes)
    return blocks


def _checked_box(what: str, box: Box, shape: tuple[int, ...]) -> Box:
    """``box`` with integer corners, one per axis of an array of ``shape``, start <= stop; PatternError otherwise."""
    try:
        start, stop = tuple(operator.index(a) for a in box.start), tuple(operator.index(b) for b in box.stop)
    except TypeError:
        raise PatternError(
            f"{what} holds {box}, whose corners are not sequences of integers; e.g. Box((0, 0), (2, 3))"
        ) from None
    if len(start) != len(shape) or len(stop) != len(shape):
        raise PatternError(
            f"{what} holds {box}, but its arrays have {len(shape)} axes {shape}; give start and stop for every axis"
        )
    if any(a > b for a, b in zip(start, stop, strict=True)):
        raise PatternError(f"{what} holds {box}, whose start lies beyond its stop; give start <= stop on every axis")
    return Box(start, stop)


def _first_overlap(boxes: Sequence[Box]) -> tuple[int, int] | None:
    """Indices (i < j) of two non-empty boxes that share an element, or None when none do."""
    if len(boxes) < 2:
        return None
    start = np.array([b.start for b in boxes], dtype=np.int64)
    stop = np.array([b.stop for b in boxes], dtype=np.int64)
    later = np.arange(len(boxes))
    for first in range(0, len(boxes), 256):  # 256 boxes against all at a time: bounded memory
        s, e = start[first : first + 256, None, :], stop[first : first + 256, None, :]
        hit = ((s < stop[None]) & (start[None] < e)).all(axis=2)
        hit &= later[first : first + 256, None] < later[None, :]
        found = np.argwhere(hit)
        if len(found):
            return first + int(found[0, 0]), int(found[0, 1])
    return None


def _check_block_shapes(arrays: list[Any], what: str, block: Box, how: str, rank: int) -> None:
    """FieldError unless every array of ``arrays`` has the shape of ``block`` (its global box, from ``how``)."""
    for i, a in enumerate(arrays):
        shape = getattr(a, "shape", None)  # not an array at all: the constructor says so on every rank
        if shape is not None and tuple(shape) != block.shape:
            raise FieldError(
                f"{what} {i} has shape {tuple(shape)} on rank {rank}, but its block of the global array is "
                f"{block.shape} (global indices {block.start} to {block.stop}); allocate it with the shape of {how}"
            )


class Transposer(BoundExchange):
    """A planned all-to-all(v): blocks of the source arrays go to other ranks and land in destination arrays.

    Built once (collective over ``comm``), run many times: ``exchange()``, or ``start()`` and the handle's
    ``wait()`` with work in between. Every field travels in one message per peer; a rank's block to itself
    is copied source box to destination box. Construction checks the plan on every rank and raises on every
    rank if any rank finds a problem (bad boxes, sizes that disagree between two ranks, mismatched fields).

    Box coordinates are indices of this rank's local arrays (``source[box.slices]``), not of a global array:
    a rank holding rows 8..15 of a global array sends its first row as ``Box((0, 0), (1, n))``. For the
    redistributions of a distributed FFT, ``Transposer.slabs`` and ``Transposer.pencils`` compute every box
    from the global shape and the split axes; ``from_counts`` takes MPI_Alltoallv's counts.

    Args:
        comm: an mpi4py communicator, a ``Communicator``, or None for COMM_WORLD.
        send: ``{peer rank: Box or sequence of Boxes}`` of the source arrays to send to that rank; the blocks
            of a peer are sent in the order given, each in the fields' memory order (C: last axis fastest).
        recv: ``{peer rank: Box or sequence of Boxes}`` of the destination arrays where that rank's blocks
            land, in the order it sends them. A receive box may have another shape than the box sent to it
            (the elements fill it in memory order) but must hold as many elements; receive boxes must not
            overlap. Peers left out, and empty boxes, exchange nothing.
        sources: one array or a sequence of arrays (the fields), all of one shape on this rank.
        destinations: as many arrays as ``sources``, all of one shape on this rank (may differ from the
            sources'); destination i has the dtype and memory order (C or F) of source i, and no destination
            shares memory with a source or another destination. Sources may be read-only.
        transport: ``"auto"``, a transport name (``gridcomm.transports.names()``) or a configured Transport
            (e.g. ``MpiTransport(method="neighbor", packing="datatype")``, ``IpcTransport(method="copy-engine")``),
            as for HaloExchanger.
        timeout: seconds to wait for a silent peer before GridcommTimeout (default: the communicator's).
        on_timeout: ``"abort"`` (print the timeout and abort every rank) or ``"raise"`` (raise GridcommTimeout
            for you to handle); default: the communicator's (``GRIDCOMM_ON_TIMEOUT``, else abort).
        validate: check every exchange against checksums of what the peers sent, raising ValidationError
            naming the field, peer and elements on a mismatch (costs a pass over every message; default
            ``GRIDCOMM_VALIDATE``, else off).

    Arrays may be NumPy or CuPy (any DLPack array is viewed without a copy): on the GPU everything is
    enqueued on the stream given to ``start(stream)``, the transports are those of the halo exchange
    (``"auto"`` picks ipc within a node, else nccl, CUDA-aware mpi, staged), and ``capture()`` records one
    transposition in a CUDA graph (ipc, nccl). ``transport="ipc"`` copies each block straight into the peer's
    destination and so needs it to land in a box of the extents it was sent as, or one side of it to be one
    contiguous range, e.g. a block of a 1-D buffer (``from_counts`` always does; ``"auto"`` otherwise takes
    nccl).
    """

    _what = "transposition"
    _checked = "arguments"
    _align = "field"  # blocks may be cut differently on the two sides

    def __init__(
        self,
        comm: Any,
        send: Blocks | None,
        recv: Blocks | None,
        sources: Any,
        destinations: Any,
        transport: str | Transport = "auto",
        *,
        timeout: float | None = None,
        on_timeout: str | None = None,
        validate: bool | None = None,
    ) -> None:
        self.comm = Communicator.wrap(comm)
        self.comm.rendezvous("Transposer()")
        self._plan = (send, recv)
        try:
            raw_sources, raw_destinations = array_list(sources, "sources"), array_list(destinations, "destinations")
            on_device = self._check_arguments(raw_sources, raw_destinations, (timeout, on_timeout, validate))
            asked, problem = (requested(transport), on_device), None
        except Exception as error:  # every rank must hear of it, or the others would wait for this one
            asked, problem = (None, None), error
        transports, on_device = zip(*gather_or_raise(self.comm.mpi, asked, problem, "arguments"), strict=True)
        check_same_transport(transports)
        check_same_memory(on_device)
        self.on_device = on_device[0]
        self.transport = self._first_choice(transport)
        self._raw = (raw_sources, raw_destinations)
        self.xp = cupy_or_none() if self.on_device else np
        specs = self._agree_on_fields()  # also builds and checks the plan: self._full
        full = self._full
        full.check_matches_peers(self.comm.mpi)
        self._fall_back_unless_runs(transport)
        self.pattern = full  # every field moves by it
        self._split_own(FieldPatterns.uniform(full, len(specs)))
        self.layout = Layout.build(self.patterns, specs, align=self._align)
        self.tag = self.comm.new_tag()
        self._bind_transports(transport)  # auto: ipc needs each block to land in a box of its extents
        self._ready()
        del self._raw, self._plan

    @classmethod
    def from_counts(
        cls,
        comm: Any,
        send_counts: Sequence[int],
        send_displs: Sequence[int] | None,
        recv_counts: Sequence[int],
        recv_displs: Sequence[int] | None,
        sources: Any,
        destinations: Any,
        transport: str | Transport = "auto",
        *,
        timeout: float | None = None,
        on_timeout: str | None = None,
        validate: bool | None = None,
    ) -> Transposer:
        """MPI_Alltoallv's plan: ``send_counts[r]`` entries of the sources' first axis, from entry
        ``send_displs[r]`` on, go to rank r, and rank r's entries land at ``recv_displs[r]`` of the
        destinations' first axis (``recv_counts[r]`` of them). Counts and displacements are in first-axis
        entries (elements of 1-D arrays; every trailing axis travels with its entry, so sources and
        destinations must have the same trailing shape); one per rank; counts may be zero. Displacements
        None: the blocks lie one after the other in rank order. The other arguments are as for the
        constructor."""
        return cls(
            comm,
            _Counts("send", send_counts, send_displs),  # type: ignore[arg-type]
            _Counts("recv", recv_counts, recv_displs),  # type: ignore[arg-type]
            sources,
            destinations,
            transport,
            timeout=timeout,
            on_timeout=on_timeout,
            validate=validate,
        )

    @classmethod
    def slabs(
        cls,
        comm: Any,
        global_shape: Sequence[int],
        from_axis: int,
        to_axis: int,
        sources: Any,
        destinations: Any,
        transport: str | Transport = "auto",
        *,
        timeout: float | None = None,
        on_timeout: str | None = None,
        validate: bool | None = None,
    ) -> Transposer:
        """The slab redistribution of a distributed FFT: a global array of ``global_shape`` split along
        ``from_axis`` over the ranks becomes the same array split along ``to_axis``. ``sources`` are this rank's
        slabs before (shape ``gridcomm.slab(global_shape, from_axis, rank, size).shape``), ``destinations``
        after (``gridcomm.slab(global_shape, to_axis, rank, size).shape``); every axis is split as
        CartesianDecomposition splits it (uneven sizes are fine; a rank's slab may be empty). Collective; the
        other arguments are as for the constructor, and every rank must pass the same shape and axes."""

        def plan(rank: int, size: int) -> Redistribution:
            return redistribution(global_shape, [from_axis], [to_axis], rank, size, names=("from_axis", "to_axis"))

        how = tuple(f"gridcomm.slab(global_shape, {axis}, rank, size)" for axis in ("from_axis", "to_axis"))
        return cls._redistributing(comm, plan, how, sources, destinations, transport, (timeout, on_timeout, validate))

    @classmethod
    def pencils(
        cls,
        comm: Any,
        global_shape: Sequence[int],
        from_axes: Sequence[int],
        to_axes: Sequence[int],
        sources: Any,
        destinations: Any,
        transport: str | Transport = "auto",
        *,
        proc_grid: Sequence[int] | None = None,
        timeout: float | None = None,
        on_timeout: str | None = None,
        validate: bool | None = None,
    ) -> Transposer:
        """The pencil redistribution of a distributed FFT: a global array of ``global_shape`` whose axes
        ``from_axes`` are split over the process grid ``proc_grid`` (ranks per split axis, C order; None: the
        most balanced, ``gridcomm.slabs.balanced_grid``) becomes the same array split along ``to_axes``:
        grid dimension k splits from_axes[k], then to_axes[k], so only the ranks of one grid row or column
        exchange. E.g. a 3-D array split along (0, 1) becomes split along (0, 2): its last axis, whole before,
        is split and axis 1 made whole. Sources have the shape ``gridcomm.pencil(global_shape, from_axes,
        rank, size, proc_grid).shape``, destinations that of ``to_axes``. Collective; the other arguments are as
        for the constructor, and every rank must pass the same shape, axes and grid."""

        def plan(rank: int, size: int) -> Redistribution:
            return redistribution(global_shape, from_axes, to_axes, rank, size, proc_grid)

        how = tuple(
            f"gridcomm.pencil(global_shape, {axes}, rank, size, proc_grid)" for axes in ("from_axes", "to_axes")
        )
        return cls._redistributing(comm, plan, how, sources, destinations, transport, (timeout, on_timeout, validate))

    @classmethod
    def _redistributing(
        cls,
        comm: Any,
        plan: Callable[[int, int], Redistribution],
        how: tuple[str, ...],
        sources: Any,
        destinations: Any,
        transport: str | Transport,
        options: tuple[Any, Any, Any],
    ) -> Transposer:
        """Collective: the Transposer of ``plan`` (this rank's part, from its rank and the rank count), after
        every rank has checked the plan's arguments, that they pass the same ones, and that the arrays have the
        shapes of their blocks (larger arrays would hold the boxes, and give wrong results silently); ``how``
        names the call that gives the sources' and the destinations' blocks."""
        comm = Communicator.wrap(comm)
        try:
            mine = plan(comm.rank, comm.size)
            _check_block_shapes(array_list(sources, "sources"), "source", mine.source, how[0], comm.rank)
            _check_block_shapes(
                array_list(destinations, "destinations"), "destination", mine.destination, how[1], comm.rank
            )
            signature, problem = mine.signature, None
        except GridcommError as error:
            signature, problem = None, error
        signatures = gather_or_raise(comm.mpi, signature, problem, "arguments")
        if len(set(signatures)) > 1:
            raise PatternError(
                f"ranks pass different global shapes, axes or process grids ({dict(enumerate(signatures))}); pass "
                "the same on every rank"
            )
        timeout, on_timeout, validate = options
        return cls(
            comm, mine.send, mine.recv, sources, destinations, transport,
            timeout=timeout, on_timeout=on_timeout, validate=validate,
        )  # fmt: skip

    # -- construction -----------------------------------------------------------------------------------

    def _check_arguments(self, sources: list[Any], destinations: list[Any], options: tuple[Any, Any, Any]) -> bool:
        """Local checks of the arguments' form, before anything collective depends on them; whether the
        arrays are on the GPU."""
        if not sources:
            raise FieldError("sources is empty; pass at least one array to transpose")
        if len(sources) != len(destinations):
            raise FieldError(
                f"{len(sources)} source(s) but {len(destinations)} destination(s); pass one destination per source"
            )
        named = [(f"source {i}", a) for i, a in enumerate(sources)]
        on_device = on_device_alike(named + [(f"destination {i}", a) for i, a in enumerate(destinations)], "arrays")
        self._set_options(*options)
        return on_device

    def _array(self, a: Any, what: str, shape: tuple[int, ...] | None) -> tuple[Any, np.dtype]:
        """``a`` as a NumPy or CuPy array with its dtype, checked: contiguous, at least 1-D, of ``shape`` (if
        given)."""
        a = as_array(a, what)
        dtype = check_dtype(a.dtype, what)
        if a.ndim == 0:
            raise FieldError(f"{what} is 0-dimensional; pass arrays with at least one axis")
        if shape is not None and tuple(a.shape) != shape:
            first = what.split()[0]
            raise FieldError(
                f"{what} has shape {tuple(a.shape)} on rank {self.comm.rank}, but {first} 0 has {shape}; all "
                f"{first}s of a Transposer share one shape"
            )
        memory_order(a, what)  # raises for a strided view
        return a, dtype

    def _check_fields(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """Local: the arrays (shapes, dtypes, orders, memory) and the plan (boxes, bounds, overlaps)."""
        raw_sources, raw_destinations = self._raw
        sources, destinations, rows = [], [], []
        for i, (s, d) in enumerate(zip(raw_sources, raw_destinations, strict=True)):
            src, src_dtype = self._array(s, f"source {i}", tuple(sources[0].shape) if sources else None)
            dst, dst_dtype = self._array(d, f"destination {i}", tuple(destinations[0].shape) if destinations else None)
            if src_dtype != dst_dtype:
                raise FieldError(
                    f"source {i} has dtype {src_dtype} but destination {i} has {dst_dtype}; a transposition moves "
                    "bytes, it does not convert: give them one dtype"
                )
            orders = "".join(sorted(set(_compatible_orders(src)) & set(_compatible_orders(dst))))
            if not orders:
                raise FieldError(
                    f"source {i} is {'C' if src.flags.c_contiguous else 'Fortran'}-ordered but destination {i} is "
                    "not; give them one memory order (np.ascontiguousarray / np.asfortranarray)"
                )
            check_writable(d, dst, f"destination {i}", "received blocks")
            sources.append(src)
            destinations.append(dst)
            rows.append((src_dtype.str, orders, ()))
        for j, dst in enumerate(destinations):
            for what, other in [(f"source {i}", s) for i, s in enumerate(sources)] + [
                (f"destination {i}", d) for i, d in enumerate(destinations[:j])
            ]:
                if self.xp.may_share_memory(dst, other):
                    raise FieldError(
                        f"destination {j} shares memory with {what}; a transposition cannot work in place: pass "
                        "separate destination arrays"
                    )
        if self.on_device:
            named = [(f"source {i}", a) for i, a in enumerate(sources)]
            check_on_current_gpu(self.comm.rank, named + [(f"destination {i}", a) for i, a in enumerate(destinations)])
        self.sources, self.destinations = sources, destinations
        self._full = self._build_pattern(tuple(sources[0].shape), tuple(destinations[0].shape))
        self._runs_problem = self._runs_problem_of(self._full, rows)
        return rows

    def _build_pattern(self, source_shape: tuple[int, ...], destination_shape: tuple[int, ...]) -> Pattern:
        """The plan as a Pattern (peers in rank order, empty boxes dropped), bounds and overlaps checked."""
        size = self.comm.size
        send, recv = self._plan
        if isinstance(send, _Counts) != isinstance(recv, _Counts):
            raise PatternError("give both send and recv as counts (from_counts), or both as boxes")
        if isinstance(send, _Counts) and source_shape[1:] != destination_shape[1:]:
            raise FieldError(
                f"from_counts moves first-axis entries, but the sources' trailing shape {source_shape[1:]} is not "
                f"the destinations' {destination_shape[1:]}; give them the same axes after the first"
            )
        sends = _blocks("send", send, source_shape, size)
        recvs = _blocks("recv", recv, destination_shape, size)
        peers = []
        for peer in sorted(set(sends) | set(recvs)):
            out = tuple(b for b in sends.get(peer, ()) if b.size > 0)
            into = tuple(b for b in recvs.get(peer, ()) if b.size > 0)
            if out or into:
                peers.append(PeerPlan(peer, out, into))
        pattern = Pattern(source_shape, tuple(peers), recv_shape=destination_shape)
        pattern.check_bounds()
        landing = [(p.rank, box) for p in pattern.peers for box in p.recv]
        overlap = _first_overlap([box for _, box in landing])
        if overlap is not None:
            (p, a), (q, b) = landing[overlap[0]], landing[overlap[1]]
            raise PatternError(
                f"receive boxes overlap in the destinations: {a} (from rank {p}) and {b} (from rank {q}); each "
                "destination element may be written by one block only"
            )
        return pattern

    def _runs_problem_of(self, pattern: Pattern, rows: list[tuple[str, str, tuple[int, ...]]]) -> str | None:
        """Why some box cannot be described as memory runs (what transports that copy between the arrays
        directly, e.g. cma, need: at most 2 axes outside the contiguous runs), or None."""
        for dtype, orders, _ in rows:
            for order in orders:
                spec = FieldSpec(np.dtype(dtype), order)
                for peer in pattern.peers:
                    for shape, boxes in ((pattern.local_shape, peer.send), (pattern.destination_shape, peer.recv)):
                        for box in boxes:
                            try:
                                run_grid(shape, spec, box)
                            except ValueError as error:
                                return f"rank {self.comm.rank}: {box} of an array of shape {shape}: {error}"
        return None

    def _fall_back_unless_runs(self, transport: str | Transport | Mapping[str, Any]) -> None:
        """Collective: a transport that copies between the arrays directly, and every GPU transport (the
        kernels and copy engines move runs), needs every box as memory runs; where some box is not, 'auto' on
        the host leaves such transports out (``_unfit``), and a transport named for it raises PatternError."""
        problems = [p for p in self.comm.mpi.allgather(self._runs_problem) if p]
        if not problems:
            return
        if self.on_device:
            raise PatternError(
                f"on the GPU every block is moved as memory runs, which cannot describe {problems[0]}; use boxes "
                "spanning the last axes fully (or reshape the arrays so that they do)"
            )
        asked = transport.values() if isinstance(transport, Mapping) else [transport]
        for t in asked:
            named = t if isinstance(t, Transport) else None if t == "auto" else kind(t)()
            if named is not None and named.packer_kind(False) == "direct":
                raise PatternError(
                    f"transport {named.name!r} copies between the arrays directly and cannot describe {problems[0]}; "
                    "use transport='mpi' (or boxes spanning the last axes fully)"
                )
        self._unfit = tuple(n for n in names("host") if kind(n)().packer_kind(False) == "direct")
        log.info("Transposer: %s cannot describe %s; auto leaves them out", self._unfit, problems[0])

    @property
    def elements_per_exchange(self) -> tuple[int, int]:
        """(elements sent, elements received) per field by this rank per exchange, its own block included."""
        peers = self.pattern.peers  # this rank's own block included
        return sum(p.send_size for p in peers), sum(p.recv_size for p in peers)

    def __repr__(self) -> str:
        sent, received = self.bytes_per_exchange
        return (
            f"Transposer({len(self.sources)} field(s) {self.pattern.local_shape} -> {self.pattern.destination_shape}, "
            f"{len(self.layout.sends)} peer(s), transport={self.transport.name!r}, {sent} B sent / {received} B "
            f"received per exchange, {self.local_copy_nbytes} B copied locally)"
        )


__all__ = ["Transposer"]
