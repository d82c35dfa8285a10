"""Halo exchange: a pattern, its fields, a packer and a transport bound into a reusable, asynchronous step.

``BoundExchange`` is that binding for any pattern whose sends are read from source arrays and whose
receives are written into destination arrays; ``HaloExchanger`` is the case destination = source, and
``Transposer`` (all-to-all(v)) the case of separate destinations.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, NoReturn, Self

import numpy as np

from .agreement import by_value, gather_or_raise
from .arguments import environment_flag
from .arrays import array_list, array_module, as_array, check_dtype, check_writable, is_device_array, memory_order
from .comm import Communicator
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    FieldError,
    GridcommError,
    GridcommTimeout,
    PatternError,
    TransportError,
)
from .packing import CopyPacker, DatatypePacker, DirectPacker, FieldSpec, Layout, OwnCopier, local_copies
from .packing.copy import pairs_directly
from .packing.cuda import CudaPacker
from .packing.geometry import paired_grids
from .pattern import Box, FieldPatterns, PeerPlan
from .timeouts import check_on_timeout, check_timeout, give_up
from .transports import (
    REACHES,
    Mixed,
    Transport,
    auto,
    auto_choice_reason,
    choose,
    kind,
    preference,
    reasons_for,
    requested,
)
from .transports.auto import auto_measurement
from .transports.base import prepares
from .validate import ExchangeValidator, check_validate

log = logging.getLogger(__name__)


def eager_replay() -> bool:
    """Whether a GPU exchanger's ``start()`` replays a CUDA graph of its own exchange: ``GRIDCOMM_REPLAY``
    (default 1; 0 enqueues pack, transfer and unpack from Python at every call, as inside a user's capture)."""
    return environment_flag("GRIDCOMM_REPLAY", True, "replay a graph of each exchange")


def _compatible_orders(a: Any) -> str:
    """Memory orders a field can be read in: 'C', 'F', or 'CF' when both describe it (e.g. 1-D)."""
    flags = a.flags
    return ("C" if flags.c_contiguous else "") + ("F" if flags.f_contiguous else "")


def check_same_transport(asked: Sequence[Any]) -> None:
    """PatternError unless every rank asked for the same transport (``asked``: each rank's, in rank order)."""
    if len(set(asked)) > 1:
        raise PatternError(
            f"ranks ask for different transports ({dict(enumerate(asked))}); every rank must pass the same"
        )


class NoExchange:
    """Stands in for an exchanger where no halo is exchanged (one part with no halo, or a benchmark's
    compute-only ceiling): every call returns at once."""

    transport = None
    bytes_per_exchange = (0, 0)

    def start(self, stream: Any = None) -> NoExchange:
        return self

    def wait(self) -> None:
        pass

    def exchange(self) -> None:
        pass

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass


class _InFlight:
    """The name of an exchanger's exchange in flight, e.g. "halo exchange #21 (exchanger tag 0, 1 field(s))", as
    timeouts and validation errors give it: made into text only when one is raised, not at every wait (on the
    host that is a tenth of an 8-byte exchange)."""

    __slots__ = ("_count", "_exchange")

    def __init__(self, exchange: BoundExchange, count: int | None = None) -> None:
        self._exchange, self._count = exchange, count

    def pinned(self) -> _InFlight:
        """This name with the exchange's number fixed now: for a timeout found after later exchanges started
        (nccl's watchdog)."""
        return _InFlight(self._exchange, self._exchange.count)

    def __str__(self) -> str:
        e = self._exchange
        count = e.count if self._count is None else self._count
        return f"{e._what} #{count} (exchanger tag {e.tag}, {len(e.sources)} field(s))"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class _LeanReplay(NamedTuple):
    """What a replay of an exchanger's own graph needs once it has run, where every channel waits on the GPU or
    only books its replays: start() runs the checks and launches the graph, wait() reads the reports and books."""

    timeout: float  # the GPU-side waits' limit the graph was captured with
    graph: Any  # the exchanger's own CUDA graph
    reports: list[Any]  # GPU-side waits' host-mapped words (ipc, nvshmem): nonzero where one gave up
    checks: list[Any]  # called before the launch: raise a timeout found meanwhile (nccl)
    trackers: list[Any]  # called by wait() with (stream, operation, timeout): book the replay (nccl)


class ExchangeHandle:
    """An exchange in flight: ``wait()`` completes it (received data is in place when it returns)."""

    def __init__(self, exchanger: BoundExchange) -> None:
        self._exchanger = exchanger
        self.done = True
        self.stream: Any = None
        self.replayed = False  # the exchange in flight is a launch of the exchanger's own graph

    def wait(self) -> None:
        """Complete this exchange: block until it is (GPU-side waits: until later work on its stream follows
        it); raise GridcommTimeout if a peer stays silent.

        After a timeout the exchange is still in flight and ``wait()`` may be called again: with host-side
        waits (mpi, staged, cma) that completes it once the peer answers. ``nccl`` aborts its communicator
        (NCCL's kernels would spin forever): the exchanger then raises on every use; make a new one. GPU-side
        waits (ipc, nvshmem) are stream-ordered: ``wait()`` returns at once (later work on the stream follows
        the exchange), and an exchange whose wait gave up on the GPU is reported by the first ``wait()``,
        ``check()`` or ``close()`` after that; it is over with its halos undefined, the peers are told, and the
        next exchange is right once the silent peer has caught up.
        """
        if self.done:
            return
        exchanger = self._exchanger
        lean = exchanger._lean
        if self.replayed and lean is not None:  # the exchanger's own graph: read the reports, book the replay
            for report in lean.reports:
                if report[0]:
                    break  # a GPU-side wait gave up: the whole way names it
            else:
                try:
                    for track in lean.trackers:
                        track(self.stream, exchanger._in_flight, exchanger.timeout)
                except GridcommTimeout as error:
                    exchanger._give_up(error)
                self.done, self.replayed = True, False
                return
        exchanger._complete(self.stream)
        self.done = True
        if exchanger._validator is not None:
            exchanger._validate(self.stream)


class CapturedExchange:
    """One exchange recorded in a CUDA graph by ``HaloExchanger.capture()``; ``launch(stream)`` replays it.

    The graph reads and writes the exchanger's fields and buffers, and NCCL cannot free a communicator while
    a graph that used it lives (ncclCommDestroy waits for it forever): closing the exchanger or its
    communicator therefore releases the graph, after which ``launch`` raises.
    """

    def __init__(self, graph: Any, exchanger: BoundExchange) -> None:
        self._graph = graph
        self._exchanger: BoundExchange | None = exchanger  # its buffers must outlive the graph

    def launch(self, stream: Any = None) -> None:
        """Enqueue one replay on ``stream`` (a CuPy stream; None: the current stream)."""
        if self._graph is None:
            raise GridcommError(
                "this captured exchange was released (its exchanger or communicator was closed); capture a new one"
            )
        self._graph.launch(stream)

    def close(self) -> None:
        """Free the graph now (also done by the exchanger's and the communicator's close)."""
        if self._exchanger is not None:
            self._exchanger._lean = None  # it may be the graph the exchanger's start() launches
        self._graph = self._exchanger = None


def on_device_alike(named: Sequence[tuple[str, Any]], what: str) -> bool:
    """Whether the (name, array) pairs live on the GPU; FieldError naming each one's memory when some live on
    the host and others on the GPU (``what`` names them all, e.g. "fields"). Local."""
    on_device = [is_device_array(a) for _, a in named]
    if any(on_device) and not all(on_device):
        where = ", ".join(f"{name}: {'GPU' if d else 'host'}" for (name, _), d in zip(named, on_device, strict=True))
        raise FieldError(f"{what} live in different memories ({where}); put them all on the host or all on the GPU")
    return bool(on_device) and on_device[0]


def check_same_memory(on_device: Sequence[Any]) -> None:
    """FieldError unless every rank passes arrays of one memory (``on_device``: each rank's, in rank order)."""
    if len(set(on_device)) > 1:
        raise FieldError("some ranks pass GPU arrays and others host arrays; every rank must pass the same kind")


def check_on_current_gpu(rank: int, named: Sequence[tuple[str, Any]]) -> None:
    """FieldError unless every (name, CuPy array) lives on the current GPU (one rank per GPU: use_local_gpu)."""
    import cupy

    current = cupy.cuda.Device().id
    elsewhere = {name: a.device.id for name, a in named if a.device.id != current}
    if elsewhere:
        raise FieldError(
            f"rank {rank}: {elsewhere} (array: GPU) are not on the current GPU {current}; allocate them after "
            "gridcomm.use_local_gpu(comm), or make their GPU current"
        )


@dataclass
class _Group:
    """The peers one transport serves in an exchange (``reach``: "all" of them, those on this rank's "node", or
    those on other nodes, "network"), with what binds them: their layout, message tags, packer and channel, and
    the layout of what this rank sends itself where this group's packer copies it too (the first group's)."""

    reach: str
    layout: Layout
    tag: int
    own: Layout | None = None
    transport: Any = None
    packer: Any = None
    channel: Any = None

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.packer.close()
        self.channel = self.packer = None


def _instance(transport: str | Transport) -> Transport:
    """A transport given by name (or configured already) as an instance."""
    return transport if isinstance(transport, Transport) else kind(transport)()


def _peers_by_reach(comm: Communicator, peers: Sequence[int]) -> dict[str, list[int]]:
    """Collective: the ranks ``peers`` by how they are reached: every one ("all") where the ranks share one node,
    else those on this rank's node ("node") and the others ("network"), each group kept where any rank has peers
    in it (the same groups on every rank: binding a transport is collective)."""
    nodes = comm.nodes
    if len(set(nodes)) == 1:
        return {"all": list(peers)}
    mine = {
        "node": [p for p in peers if nodes[p] == nodes[comm.rank]],
        "network": [p for p in peers if nodes[p] != nodes[comm.rank]],
    }
    present = comm.mpi.allgather([bool(mine[reach]) for reach in REACHES])
    return {reach: mine[reach] for k, reach in enumerate(REACHES) if any(p[k] for p in present)}


def _pairs_as_runs(
    plan: PeerPlan, spec: FieldSpec, source_shape: Sequence[int], destination_shape: Sequence[int]
) -> bool:
    """Whether ``plan``'s send and receive boxes pair one to one, each pair copied run to run (``paired_grids``:
    equal extents, or one side a contiguous range of as many elements)."""
    if pairs_directly(plan):
        return True
    if len(plan.send) != len(plan.recv) or not all(isinstance(b, Box) for b in plan.send + plan.recv):
        return False
    try:
        for s, r in zip(plan.send, plan.recv, strict=True):
            paired_grids(source_shape, s, destination_shape, r, spec)
    except ValueError:
        return False
    return True


class BoundExchange:
    """A pattern, its fields, a packer and a transport bound into a reusable, asynchronous step: what
    ``HaloExchanger`` and ``Transposer`` share.

    Sends are read from ``sources`` and receives written into ``destinations`` (field i of one into field i
    of the other; the same list for a halo exchange). What a rank sends itself is copied source box to
    destination box while the messages are in flight. Each field moves by its own pattern (``FieldPatterns``:
    one per field, shared by the fields of one decomposition). A subclass's constructor sets ``comm``,
    ``sources``, ``destinations``, ``on_device``, ``transport`` and ``xp``, says what fits in ``_check_fields``,
    then runs ``_split_own``, ``_agree_on_fields``, the patterns' ``check_matches_peers``, ``Layout.build``,
    ``_bind_transports`` and ``_ready``: each collective step raises on every rank if any rank found a problem.
    """

    #: How a timeout names one run of this kind, e.g. "halo exchange #3 (...)".
    _what: ClassVar[str] = "exchange"
    #: What another rank's error says it rejected ("rank 2 rejected its fields: ...").
    _checked: ClassVar[str] = "fields"
    #: Transports found unable to move this plan before binding (every rank agreed): auto leaves them out.
    _unfit: tuple[str, ...] = ()
    #: How messages are laid out (``Layout.build``): "segment" (every selection aligned) or "field".
    _align: ClassVar[str] = "segment"

    comm: Communicator
    patterns: FieldPatterns
    sources: list[Any]
    destinations: list[Any]
    on_device: bool
    transport: Transport
    xp: Any

    def _set_options(self, timeout: float | None, on_timeout: str | None, validate: bool | None) -> None:
        """The per-exchanger options, checked (local): None takes the communicator's (or the environment's)."""
        self.timeout = check_timeout(timeout, self.comm.timeout)
        self.on_timeout = self.comm.on_timeout if on_timeout is None else check_on_timeout(on_timeout)
        self.validate = check_validate(validate)

    def _give_up(self, error: GridcommTimeout) -> NoReturn:
        self._lean = None  # the next start() takes the whole way (its channels reset what gave up)
        give_up(error, self.comm.mpi, self.on_timeout)

    def _check_fields(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """Per field on this rank: (dtype, memory orders it can be read in, trailing shape); raise FieldError
        or PatternError for what does not fit. Local: subclasses say what fits."""
        raise NotImplementedError

    def _agree_on_fields(self) -> list[FieldSpec]:
        """Collective: check every field here, then that all ranks pass the same number of fields, each with
        one dtype, a common memory order and one trailing shape. Every rank raises if any rank found a problem."""
        try:
            local, error = self._check_fields(), None
        except Exception as problem:  # whatever it is, every rank must hear of it (or the others would hang)
            local, error = [], problem
        everyone = gather_or_raise(self.comm.mpi, local, error, self._checked)
        counts = {rank: len(rows) for rank, rows in enumerate(everyone)}
        if len(set(counts.values())) > 1:
            raise PatternError(f"ranks pass different numbers of fields ({counts}); every rank must pass the same list")
        specs = []
        for i in range(len(local)):
            dtypes = {rows[i][0] for rows in everyone}
            if len(dtypes) > 1:
                raise PatternError(
                    f"field {i} has different dtypes on different ranks ({sorted(dtypes)}); use one dtype per field"
                )
            common = set("CF").intersection(*(rows[i][1] for rows in everyone))
            if not common:
                raise PatternError(
                    f"field {i} is C-ordered on some ranks and Fortran-ordered on others; use one order per field"
                )
            trailing = {rows[i][2] for rows in everyone}
            if len(trailing) > 1:
                raise PatternError(f"field {i} has different trailing shapes on different ranks ({sorted(trailing)})")
            specs.append(FieldSpec(np.dtype(local[i][0]), "C" if "C" in common else "F", local[i][2]))
        return specs

    def _split_own(self, full: FieldPatterns) -> None:
        """``self.patterns``: ``full`` without what this rank sends itself, which goes to ``self._own`` (each
        field's plan; None where no field sends this rank anything) and ``self._own_patterns``."""
        rank = self.comm.rank
        self.patterns = full.restricted(r for r in full.ranks if r != rank)
        self._own = full.plans(rank) if rank in full.ranks else None
        self._own_patterns = full.restricted([rank])

    def _own_layout(self) -> Layout | None:
        """The layout of what this rank sends itself when the GPU kernels (or the ipc copies) can copy it source
        to destination in the same launch as the rest: on the GPU, when every field's boxes pair one to one with
        equal extents (a periodic wrap, a transposition's diagonal block) or with a contiguous range of as many
        elements (``paired_grids``: the spectral dwarf's blocks of its 1-D Legendre side). Otherwise None: it is
        copied through ``local_copies``."""
        if self._own is None or not self.on_device:
            return None
        fields = zip(self._own, self.layout.fields, self.sources, self.destinations, strict=True)
        if not all(_pairs_as_runs(plan, spec, s.shape, d.shape) for plan, spec, s, d in fields):
            return None
        return Layout.build(self._own_patterns, self.layout.fields)

    def _first_choice(self, transport: str | Transport | Mapping[str, Any]) -> Transport | None:
        """Collective: the transport a single named or configured one is, checked usable for every peer here
        (TransportError on every rank if not), or the first usable in order of preference for ``"auto"``; None for
        a mapping (its transports are chosen per group when bound)."""
        return None if isinstance(transport, Mapping) else choose(transport, self.comm, self.on_device)

    def _bind_transports(self, transport: str | Transport | Mapping[str, Any]) -> None:
        """Collective: the transport of every peer, bound. One transport (named or configured) serves every peer;
        with ``"auto"`` or a mapping ``{"node": ..., "network": ...}``, where the ranks are on several nodes
        (``Communicator.nodes``, declared ones included), the peers on this rank's node form one group and the
        others another, each served by its own transport (``"auto"``: measured, transports/auto.py, or the first
        usable in order of preference; a transport that cannot bind these arrays gives way to the next). Sets
        ``self._groups``, ``self.transport`` (a ``transports.Mixed`` of several), ``self.transport_reason`` and
        the copies of what this rank sends itself that no transport's kernel makes."""
        self._in_flight = _InFlight(self)
        own = self._own_layout()
        copied = self._own is not None and own is None
        specs = self.layout.fields
        # What this rank sends itself and no kernel copies: on the host, packed and unpacked a cache-sized chunk at
        # a time (a call or two per exchange); on the GPU, view to view on the exchange's stream, through a
        # scratch array where the boxes are cut differently on the two sides.
        self._local_copies: list[tuple[Any, Any]] = (
            local_copies(self._own, specs, self.sources, self.destinations, self.xp)
            if copied and self.on_device
            else []
        )
        self._own_copier = (
            OwnCopier(specs, self.sources, self.destinations, self._own) if copied and not self.on_device else None
        )
        # Bytes copied outside the transports' kernels from this rank to itself per exchange.
        items = [plan.recv_size for plan in self._own] if copied else [0] * len(specs)
        self.local_copy_nbytes = sum(n * s.row_items * s.dtype.itemsize for n, s in zip(items, specs, strict=True))
        wanted = transport if isinstance(transport, Mapping) else None
        if wanted is None and transport != "auto":
            reaches = {"all": list(self.patterns.ranks)}
        else:
            # No rank has a peer on several nodes (only blocks of their own): one group of none, this node's,
            # so that a transport of one node (the mapping's "node") can serve it.
            reaches = _peers_by_reach(self.comm, self.patterns.ranks) or {"node": []}
        self._groups: list[_Group] = []
        reasons = []
        for k, (reach, peers) in enumerate(reaches.items()):
            sub = self.patterns.restricted(peers)
            group = _Group(reach, Layout.build(sub, specs, self._align), self.tag + 4 * k, own if k == 0 else None)
            asked = transport if wanted is None else wanted.get("node" if reach == "all" else reach, "auto")
            why = self._bind_group(group, asked)
            self._groups.append(group)
            reasons.append(why if reach == "all" else f"{reach}: {why}")
        parts = [g.transport for g in self._groups]
        if len(parts) > 1 and len({requested(t) for t in parts}) == 1:  # one transport for every group: one group
            for group in self._groups:
                group.close()
            self._groups = [_Group("all", Layout.build(self.patterns, specs, self._align), self.tag, own, parts[0])]
            self._open(self._groups[0])
            parts = parts[:1]
        self.transport = parts[0] if len(parts) == 1 else Mixed(parts)
        self.transport_reason = "; ".join(reasons)
        self._lanes = self._make_lanes()

    def _bind_group(self, group: _Group, asked: str | Transport) -> str:
        """Collective: bind ``group`` to the transport ``asked`` for (or, for ``"auto"``, the fastest measured or
        the first usable one that binds); what was chosen and why."""
        reasons = reasons_for(self.comm, group.reach, self.on_device)
        reasons.update(dict.fromkeys(self._unfit, "cannot move this plan"))
        where = {"all": "", "node": " on this node", "network": " on other nodes"}[group.reach]
        if asked != "auto":
            chosen = _instance(asked)
            if reasons.get(chosen.name) is not None:
                raise TransportError(f"transport {chosen.name!r} cannot serve the peers{where}: {reasons[chosen.name]}")
            group.transport = chosen
            self._open(group)
            return f"{chosen.name}: asked for"
        if not self.validate and auto_measurement():  # validation mode measures nothing: its checks would count
            measured = self._bind_measured(group, reasons)
            if measured is not None:
                return measured
        for name in preference(self.on_device):
            if reasons.get(name) is not None:
                continue
            group.transport = _instance(name)
            try:
                self._open(group)
            except TransportError as error:  # raised on every rank together: the next one
                reasons[name] = f"cannot take these arrays ({error})"
                log.info("%s: %s cannot take these arrays (%s); falling back", type(self).__name__, name, error)
                continue
            return auto_choice_reason(reasons, self.on_device, measuring=False)
        detail = "; ".join(f"{name}: {why}" for name, why in reasons.items())
        raise TransportError(f"no transport can move these fields to the peers{where} ({detail})")

    def _bind_measured(self, group: _Group, reasons: dict[str, str | None]) -> str | None:
        """Collective: bind each usable candidate of ``auto.candidates`` for ``group`` in turn, time the group's
        own exchange and keep the fastest (or the one remembered for a plan of this shape); None where fewer than
        two candidates can serve it (the order of preference decides then)."""
        usable = auto.usable_candidates(reasons, self.on_device)
        if len(usable) < 2:
            return None
        key = (*auto.plan_shape(self.comm, group.layout), group.reach)
        label = auto.remembered(self.comm, key)
        if label in usable:
            group.transport = _instance(usable[label])
            self._open(group)
            return f"{label}: measured fastest before for a plan of this shape on these ranks"
        seconds, bound = {}, self._groups
        self._groups = [group]  # the exchange times this group alone
        try:
            for label, candidate in usable.items():
                group.transport = self.transport = _instance(candidate)
                try:
                    self._open(group)
                except TransportError:  # raised on every rank together: this candidate cannot move this plan
                    continue
                self._lanes = self._make_lanes()
                self._ready()
                seconds[label] = auto.time_exchanges(self.comm, self.exchange, self._synchronize)
                group.close()
        finally:
            self._groups = bound
        if not seconds:  # no candidate could bind these arrays: the order of preference and its fallbacks decide
            return None
        measured = auto.pick(seconds, list(usable))
        auto.remember(self.comm, key, measured.chosen)
        group.transport = _instance(usable[measured.chosen])
        self._open(group)
        log.info("%s: %s", type(self).__name__, measured.reason)
        return measured.reason

    def _open(self, group: _Group) -> None:
        """Make ``group``'s packer, which its transport reads and writes through, and its channel (collective)."""
        packer_kind = group.transport.packer_kind(self.on_device)
        if self.on_device and packer_kind == "direct":
            group.packer = DirectPacker(group.layout, self.sources, group.own, self.destinations)
        elif self.on_device:
            received = group.transport.receive_buffer(self.comm, group.layout.recv_nbytes)
            group.packer = CudaPacker(group.layout, self.sources, group.own, self.destinations, received)
        elif packer_kind == "datatype":
            group.packer = DatatypePacker(group.layout, self.sources, self.destinations)
        elif packer_kind == "direct":
            group.packer = DirectPacker(group.layout, self.sources, destinations=self.destinations)
        else:
            received = group.transport.receive_buffer(self.comm, group.layout.recv_nbytes)
            group.packer = CopyPacker(group.layout, self.sources, self.destinations, received)
        group.channel = group.transport.bind(self.comm, group.packer, group.tag)

    def _make_lanes(self) -> list[Any]:
        """The stream each group runs on beside the exchange's (GPU, several groups): the groups' transfers then
        overlap instead of one kernel waiting for another in stream order. None: the exchange's own stream."""
        if not self.on_device or len(self._groups) < 2:
            return [None] * len(self._groups)
        cuda = self.xp.cuda
        self._forked = cuda.Event(block=False, disable_timing=True)
        self._joined = [cuda.Event(block=False, disable_timing=True) for _ in self._groups]
        return [None, *(cuda.Stream(non_blocking=True) for _ in self._groups[1:])]

    @property
    def transports(self) -> dict[int, str]:
        """The transport that serves each peer of this rank: {peer rank: transport name}."""
        return {m.peer: g.transport.name for g in self._groups for m in (*g.layout.sends, *g.layout.recvs)}

    @property
    def packer(self) -> Any:
        """The packer of an exchanger whose peers one transport serves (GridcommError where several do)."""
        return self._only().packer

    @property
    def channel(self) -> Any:
        """The channel of an exchanger whose peers one transport serves (GridcommError where several do)."""
        return self._only().channel

    def _only(self) -> _Group:
        if len(self._groups) != 1:
            raise GridcommError(f"this exchanger's peers are served by {self.transport.name}: one packer each")
        return self._groups[0]

    def _synchronize(self) -> None:
        """Wait until this rank's exchanges have finished (the device, for GPU fields)."""
        if self.on_device:
            self.xp.cuda.Device().synchronize()

    def _ready(self) -> None:
        """The state of a bound exchange with nothing in flight."""
        plans = [*map(self.patterns.plans, self.patterns.ranks), *([self._own] if self._own is not None else [])]
        self._validator = (
            ExchangeValidator(
                self.comm, plans, self.sources, self.destinations, self.layout.fields, self.xp, self.tag + 3
            )
            if self.validate
            else None
        )
        self.count = 0
        self._handle = ExchangeHandle(self)
        self._closed = False
        self._graphs: weakref.WeakSet[CapturedExchange] = weakref.WeakSet()
        self._replay = self._can_replay and eager_replay()
        self._prepares = any(prepares(group.channel) for group in self._groups)
        self._replayed: tuple[float, CapturedExchange] | None = None  # (the timeout it was captured with, graph)
        # Set once the exchanger's own graph has run, where every channel waits on the GPU (ipc, nvshmem: their
        # reports) or only books its replays (nccl: its check and tracker): start() then only checks and launches
        # the graph, wait() only reads the reports and books the replay (host time of one exchange: 1.8 of 3.8 µs
        # was Python, 4 x H200). Dropped on every change. _lean_parts: its reports, checks and trackers, or None.
        self._lean: _LeanReplay | None = None
        channels = [group.channel for group in self._groups]
        self._lean_parts = (
            (
                [c.gpu_report for c in channels if c.gpu_report is not None],
                [c.replay_check for c in channels if c.replay_check is not None],
                [c.replay_track for c in channels if c.replay_track is not None],
            )
            if all(c.gpu_report is not None or c.replay_track is not None for c in channels)
            else None
        )
        self._current_stream = self.xp.cuda.get_current_stream if self.on_device else None
        log.info("ready: %r", self)

    @property
    def _can_replay(self) -> bool:
        replayable = all(group.channel.replayable for group in self._groups)
        return self.on_device and self.transport.replayable and replayable and not self.validate

    @property
    def replay(self) -> bool:
        """Whether ``start()`` launches a CUDA graph of the whole exchange, captured at its first call (GPU
        fields, a transport whose silent peers cannot hang a replay: ipc, nvshmem, and nccl where its abort can run
        beside the replay; no validation), instead of enqueueing each part from Python. Default:
        ``GRIDCOMM_REPLAY`` (1)."""
        return self._replay

    @replay.setter
    def replay(self, value: bool) -> None:
        if value and not self._can_replay:
            raise GridcommError(
                f"{type(self).__name__} over {self.transport.name!r} cannot replay a graph of its own exchange: "
                "that needs GPU fields, a transport whose silent peers cannot hang a replay (ipc, nvshmem; nccl "
                "where its abort can run beside the replay) and no validation"
            )
        self._replay = bool(value)
        self._lean = None

    @property
    def reaches(self) -> tuple[str, ...]:
        """How this exchanger's groups of peers are reached, each group by a transport of its own: ("all",) where
        the ranks share one node, else "node" (peers on this rank's node) and/or "network" (the others)."""
        return tuple(g.reach for g in self._groups)

    @contextlib.contextmanager
    def only(self, reach: str) -> Iterator[None]:
        """Within the block, every exchange moves only one group of peers: those on this rank's node
        (``"node"``) or those on the others (``"network"``), on that group's transport, the other group's halos
        left as they are; each part is enqueued from Python (no graph of the whole exchange). What a benchmark
        times to set a mixed exchange (``transports``: a transport per group) beside its groups alone.
        Collective: every rank names the same group. Not in validation mode, which checks every peer."""
        groups = [g for g in self._groups if g.reach == reach]
        if not groups:
            have = ", ".join(map(repr, self.reaches))
            raise ArgumentError(f"only({reach!r}): this {type(self).__name__}'s groups of peers are {have}")
        if self.validate:
            raise GridcommError("only() moves part of the peers, and validation mode checks every peer")
        if not self._handle.done:
            raise GridcommError(f"an exchange is in flight on this {type(self).__name__}; wait() for it first")
        saved = self._groups, self._lanes, self._replay, self._replayed, self._lean
        self._groups, self._lanes, self._replay, self._replayed, self._lean = groups, [None], False, None, None
        try:
            yield
        finally:
            self._groups, self._lanes, self._replay, self._replayed, self._lean = saved

    # -- running ----------------------------------------------------------------------------------------

    def start(self, stream: Any = None) -> ExchangeHandle:
        """Pack and post the exchange; returns a handle whose ``wait()`` completes it.

        For GPU fields everything is enqueued on ``stream`` (a CuPy stream; None: the current stream), and
        later work on that stream sees the received data once ``wait()`` has returned. Work that touches
        neither what is received nor what is sent may run in between (for GPU fields: on another stream).
        """
        lean = self._lean
        if lean is not None and self._handle.done and lean.timeout == self.timeout:  # the replay, fewest steps
            stream = stream if stream is not None else self._current_stream()
            if not stream.is_capturing():
                try:
                    for check in lean.checks:
                        check()
                except GridcommTimeout as error:
                    self._give_up(error)
                lean.graph.launch(stream)
                self.count += 1
                handle = self._handle
                handle.done, handle.stream, handle.replayed = False, stream, True
                return handle
        if self._closed:
            raise GridcommError(f"this {type(self).__name__} is closed; make a new one")
        if not self._handle.done and not self._abandoned:
            raise GridcommError(f"an exchange is already in flight on this {type(self).__name__}; wait() for it first")
        lanes = self._lanes  # host fields: None for every group
        if self.on_device:
            stream = stream if stream is not None else self.xp.cuda.get_current_stream()
            if self._replay and not stream.is_capturing():
                return self._start_replay(stream)
            lanes = [stream if lane is None else lane for lane in self._lanes]
            if len(lanes) > 1:  # every group's stream after what came before on the exchange's
                self._forked.record(stream)
                for lane in lanes[1:]:
                    lane.wait_event(self._forked)
        else:
            stream = None
        if self._validator is not None:
            self._validator.post(stream)
        if self._prepares:  # skipped where no channel prepares (mpi, cma: a sixth of an 8-byte host exchange)
            try:
                for group, lane in zip(self._groups, lanes, strict=True):
                    group.channel.before_pack(lane, self.timeout)
            except GridcommTimeout as error:
                self._give_up(error)
        # The peers on other nodes first: theirs is the longer trip, and the host drives some of their transports
        # (staged), whose copies then run while the node's group is enqueued.
        for group, lane in reversed(list(zip(self._groups, lanes, strict=True))):
            if lane is not None:  # GPU fields: the group's stream, which its packer enqueues on
                group.packer.stream = lane
            group.packer.pack()
            group.channel.start(lane)
        if self._local_copies or self._own_copier is not None:  # overlaps with the messages in flight
            self._copy_own(stream)
        self.count += 1
        self._handle.done, self._handle.stream = False, stream
        return self._handle

    def _start_replay(self, stream: Any) -> ExchangeHandle:
        """Launch the CUDA graph of one whole exchange (captured at the first call, again if the timeout the
        GPU-side waits were given has changed): one launch instead of a pack, a transfer and an unpack each
        marshalled from Python. The graph reads and writes the bound arrays, whose addresses never change."""
        if self._replayed is None or self._replayed[0] != self.timeout:
            if self._replayed is not None:
                self._replayed[1].close()
            self._replayed = (self.timeout, self.capture())
            self.count -= 1  # the capture enqueued nothing; the launch below is the exchange
        try:
            for group in self._groups:
                group.channel.before_pack(stream, self.timeout)
        except GridcommTimeout as error:
            self._give_up(error)
        self._replayed[1].launch(stream)
        if self._lean_parts is not None:
            self._lean = _LeanReplay(self.timeout, self._replayed[1]._graph, *self._lean_parts)
        self.count += 1
        self._handle.done, self._handle.stream, self._handle.replayed = False, stream, True
        return self._handle

    @property
    def _abandoned(self) -> bool:
        """Whether a transport gave up on the exchange in flight (nothing writes into its buffers any more)."""
        return any(group.channel.abandoned for group in self._groups)

    def _copy_own(self, stream: Any) -> None:
        if self._own_copier is not None:
            self._own_copier.copy()
            return
        with contextlib.nullcontext() if stream is None else stream:
            for dst, src in self._local_copies:
                self.xp.copyto(dst, src)

    def _complete(self, stream: Any) -> None:
        if self._handle.replayed:  # the graph unpacked and joined the lanes: wait for it on the host
            for group in self._groups:
                try:
                    group.channel.wait(self.timeout, self._in_flight, stream)
                except GridcommTimeout as error:
                    self._give_up(error)
            self._handle.replayed = False
            return
        lanes = self._lanes if stream is None else [stream if lane is None else lane for lane in self._lanes]
        for group, lane in zip(self._groups, lanes, strict=True):
            try:
                group.channel.wait(self.timeout, self._in_flight, lane)
            except GridcommTimeout as error:
                self._give_up(error)
            group.packer.unpack()
            group.channel.finish(lane)
        if self.on_device and len(lanes) > 1:  # the exchange's stream after every group's
            for lane, joined in zip(lanes[1:], self._joined[1:], strict=True):
                joined.record(lane)
                stream.wait_event(joined)

    def _validate(self, stream: Any) -> None:
        """Validation mode: compare what arrived with the peers' checksums (ValidationError on a mismatch)."""
        if self._validator is not None:
            try:
                self._validator.check(self.timeout, self._in_flight, stream)
            except GridcommTimeout as error:
                self._give_up(error)

    # -- GPU only --------------------------------------------------------------------------------------

    def capture(self, stream: Any = None) -> CapturedExchange:
        """Record one whole exchange in a CUDA graph (GPU arrays, nccl or ipc transport); replay it with
        ``graph.launch(stream)``. The graph reads and writes the same arrays every time it is replayed.

        Capturing ``start(stream)`` and ``wait()`` inside a graph of your own (a whole application step)
        works too; with ``nccl``, delete such graphs before closing the communicator (NCCL waits for them). A
        peer that falls silent while an nccl graph of yours replays hangs that replay: nothing watches it (the
        watchdog watches the exchanges started by ``start()``, the exchanger's own replays included)."""
        if self.validate:
            raise GridcommError(
                "validation mode checks each exchange on the host, which a CUDA graph cannot replay; build this "
                "exchanger with validate=False (or unset GRIDCOMM_VALIDATE) to capture it"
            )
        if not (self.on_device and self.transport.graph_capturable):
            raise GridcommError(
                f"transport {self.transport.name!r} needs the host during an exchange, so it cannot be captured "
                "in a CUDA graph; use transport='ipc' or 'nccl' with GPU fields"
            )
        stream = stream if stream is not None else self.xp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                self.start(stream).wait()
            finally:
                graph = stream.end_capture()
        captured = CapturedExchange(graph, self)
        self._graphs.add(captured)
        self.comm.graphs.add(captured)
        return captured

    def check(self) -> None:
        """Raise GridcommTimeout if a GPU-side wait gave up (ipc, nvshmem) in an exchange not yet reported: one
        of a replayed graph, or one whose ``wait()`` had returned before its wait gave up (those waits are
        stream-ordered). Call it after synchronising the stream to cover every exchange enqueued on it."""
        if self._closed:
            raise GridcommError(f"this {type(self).__name__} is closed; make a new one")
        try:
            for group in self._groups:
                group.channel.check(f"{self._what} (exchanger tag {self.tag}, check())")
        except GridcommTimeout as error:
            self._give_up(error)

    def exchange(self) -> None:
        """Run the whole exchange now: ``start().wait()``."""
        self.start().wait()

    @property
    def bytes_per_exchange(self) -> tuple[int, int]:
        """(bytes sent, bytes received) by this rank per exchange to and from other ranks, padding included."""
        return sum(m.nbytes for m in self.layout.sends), sum(m.nbytes for m in self.layout.recvs)

    def close(self) -> None:
        """Free requests, datatypes and buffers. The exchanger cannot be used afterwards."""
        if self._closed:
            return
        if not self._handle.done and not self._abandoned:
            raise GridcommError("close() while an exchange is in flight; wait() for it first")
        # GPU-side waits report a silent peer at the next call, and there is none after this one: once every
        # exchange enqueued is over, one that gave up is raised (or aborts the job) after the rest is freed.
        missed = self._gave_up_on_gpu() if self.on_device and self._groups else None
        self._lean = None
        for graph in self._graphs:
            graph.close()
        for group in self._groups:
            group.close()
        if self._own_copier is not None:
            self._own_copier.close()
        # Buffers (host, pinned, device), flag arrays, events and streams go now, not when the collector finds
        # this object.
        self._groups, self._lanes, self._validator = [], [], None
        self._local_copies, self._own_copier = [], None
        self._handle.stream = None  # the caller's stream: not ours to keep alive
        self._closed = True
        if missed is not None:
            self._give_up(missed)

    def _gave_up_on_gpu(self) -> GridcommTimeout | None:
        """After the device has finished what was enqueued: the timeout of a GPU-side wait not yet reported."""
        self.xp.cuda.Device().synchronize()
        try:
            for group in self._groups:
                group.channel.check(f"{self._what} (exchanger tag {self.tag}, before close())")
        except GridcommTimeout as error:
            return error
        return None

    def __enter__(self) -> Self:
        return self

    def __del__(self) -> None:
        # Freeing MPI requests, datatypes and (neighbor) communicators here is not safe (the last is collective),
        # so a dropped, unclosed exchanger leaks them until the process ends: say so where it happened.
        if getattr(self, "_closed", True) is False:
            warnings.warn(
                f"{type(self).__name__} (tag {self.tag}) was dropped without close(): its MPI requests and buffers "
                "stay allocated until the process ends; close it, or build it in a with block",
                ResourceWarning,
                stacklevel=2,
            )

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # An error (a timeout, say) that leaves an exchange in flight must reach the caller unchanged, and the
        # buffers must outlive the messages still aimed at them: the exchanger stays open, so the exchange can
        # still be completed with wait() and the exchanger closed afterwards.
        if exc_type is not None and not self._handle.done:
            return
        self.close()

    def __repr__(self) -> str:
        sent, received = self.bytes_per_exchange
        return (
            f"{type(self).__name__}({len(self.sources)} field(s), {len(self.layout.sends)} peer(s), transport="
            f"{self.transport.name!r}, {sent} B sent / {received} B received per exchange)"
        )


class HaloExchanger(BoundExchange):
    """Exchanges the halos of several fields at once: one message per peer rank per exchange.

    Construction is collective over the decomposition's communicator; it checks that every rank passes
    fields of the same dtypes and memory orders, plans the messages and makes every buffer and request
    once, so that an exchange allocates nothing.

    Args:
        decomposition: anything with ``comm`` and ``pattern()``, e.g. a CartesianDecomposition; or a sequence
            of them, one per field, on one communicator: fields of their own halos or staggering
            (``decomposition.field(halo=..., stagger=...)``), or an unstructured mesh's fields on different
            row sets. Every field's part of a message to a peer still travels in that one message.
        fields: one array or a sequence of arrays, each of its decomposition's local shape (with halo);
            dtypes and C/Fortran orders may differ between fields. NumPy, CuPy or any DLPack array.
        transport: ``"auto"``, a transport name (``gridcomm.transports.names()``), a configured Transport, or
            ``{"node": ..., "network": ...}``: the transport of the peers on this rank's node and of the others
            (each a name, a Transport or "auto"; "auto" alone picks one per group too). ``transports`` says
            which transport serves each peer.
        timeout: seconds to wait for a silent peer before GridcommTimeout (default: the communicator's).
        on_timeout: ``"abort"`` (print the timeout and abort every rank) or ``"raise"`` (raise GridcommTimeout
            for you to handle); default: the communicator's (``GRIDCOMM_ON_TIMEOUT``, else abort).
        validate: check every exchange against checksums of what the peers sent, raising ValidationError
            naming the field, peer and elements on a mismatch (costs a pass over every message; default
            ``GRIDCOMM_VALIDATE``, else off).
    """

    _what = "halo exchange"

    def __init__(
        self,
        decomposition: Any,
        fields: Any,
        transport: str | Transport = "auto",
        *,
        timeout: float | None = None,
        on_timeout: str | None = None,
        validate: bool | None = None,
    ) -> None:
        self._decompositions = _decomposition_list(decomposition)
        self.comm = self._decompositions[0].comm
        self.comm.rendezvous("HaloExchanger()")
        self._agree_on_arguments(fields, transport, (timeout, on_timeout, validate))
        full = self._field_patterns()
        # What a rank sends itself (periodic wrap over one rank) is copied field to field, not sent.
        self._split_own(full)
        self.transport = self._first_choice(transport)
        specs = self._agree_on_fields()  # also views the fields as arrays: self.fields
        self.sources = self.destinations = self.fields  # received halos are written into the fields themselves
        self.xp = array_module(self.fields[0])
        del self._raw, self._decompositions  # a closed exchanger keeps none of the caller's objects
        full.check_bounds()
        full.check_matches_peers(self.comm.mpi)
        self.layout = Layout.build(self.patterns, specs)
        self.tag = self.comm.new_tag()
        self._bind_transports(transport)
        self._ready()

    def _per_field(self) -> list[Any]:
        """The decomposition of each field (one given for all: that one for each)."""
        given = self._decompositions
        return given * len(self._raw) if len(given) == 1 else list(given)

    def _field_patterns(self) -> FieldPatterns:
        """Each field's pattern, one Pattern per decomposition given (fields of one decomposition share it)."""
        made: dict[int, Any] = {}
        for d in self._decompositions:
            made.setdefault(id(d), d.pattern())
        return FieldPatterns(tuple(made[id(d)] for d in self._per_field()))

    def _agree_on_arguments(self, fields: Any, transport: Any, options: tuple[Any, ...]) -> None:
        """Collective: the local checks of the field list (one decomposition, or one per field), the transport's
        name and the options, then that every rank passes fields in the same memory, asks for the same transport
        and built the same decomposition of each field (as far as its ``signature`` tells, if it has one). Every
        rank raises if any rank found a problem."""
        try:
            self._raw, asked = self._field_list(fields), requested(transport)
            if len(self._decompositions) not in (1, len(self._raw)):
                raise ArgumentError(
                    f"{len(self._decompositions)} decompositions for {len(self._raw)} fields; pass one decomposition "
                    "for every field, or one per field in the order of the fields"
                )
            self._set_options(*options)
            signatures, problem = tuple(getattr(d, "signature", None) for d in self._per_field()), None
        except Exception as error:  # whatever it is, every rank must hear of it (or the others would wait)
            self._raw, asked, signatures, problem = [], None, None, error
        self.on_device = bool(self._raw) and is_device_array(self._raw[0])
        everyone = gather_or_raise(self.comm.mpi, (self.on_device, asked, signatures), problem, "arguments")
        on_device, transports, decompositions = zip(*everyone, strict=True)
        check_same_memory(on_device)
        check_same_transport(transports)
        check_same_decompositions(decompositions)

    @staticmethod
    def _field_list(fields: Any) -> list[Any]:
        """``fields`` (one array or a sequence of them) as a list, all on the host or all on the GPU; FieldError
        otherwise. Local."""
        raw = array_list(fields, "fields")
        if not raw:
            raise FieldError("fields is empty; pass at least one array to exchange")
        on_device_alike([(f"field {i}", f) for i, f in enumerate(raw)], "fields")
        return raw

    def _check_fields(self) -> list[tuple[str, str, tuple[int, ...]]]:
        self.fields = [as_array(f, f"field {i}") for i, f in enumerate(self._raw)]
        rows = [self._check_field(i, f) for i, f in enumerate(self.fields)]
        if self.on_device:
            check_on_current_gpu(self.comm.rank, [(f"field {i}", f) for i, f in enumerate(self.fields)])
        return rows

    def _check_field(self, i: int, f: Any) -> tuple[str, str, tuple[int, ...]]:
        """(dtype, memory orders it can be read in, trailing shape) of field ``i``; FieldError if it does not fit."""
        what = f"field {i}"
        dtype = check_dtype(f.dtype, what)
        pattern = self.patterns.patterns[i]
        shape, expected = tuple(f.shape), pattern.local_shape
        fits = shape[: len(expected)] == expected if pattern.trailing_axes else shape == expected
        if not fits:
            more = " followed by any trailing axes (e.g. levels)" if pattern.trailing_axes else ""
            where = self._per_field()[i]
            raise FieldError(
                f"{what} has shape {shape} on rank {self.comm.rank}, but its decomposition's local arrays there "
                f"are {expected}{more} ({getattr(where, 'placement', 'every field of the decomposition')}); "
                "allocate it with that decomposition's empty(dtype) / zeros(dtype)"
            )
        memory_order(f, what)  # raises for a strided view
        check_writable(self._raw[i], f, what, "received halos")
        return dtype.str, _compatible_orders(f), shape[len(expected) :]


def _decomposition_list(decomposition: Any) -> list[Any]:
    """``decomposition`` (one, or a sequence of them: one per field) as a list, every one with a ``pattern()``
    and the same gridcomm Communicator; ArgumentTypeError or ArgumentError otherwise. Local."""
    if isinstance(decomposition, Sequence) and not isinstance(decomposition, str | bytes):
        given = list(decomposition)
        if not given:
            raise ArgumentError("decomposition is an empty sequence; pass one decomposition, or one per field")
    else:
        given = [decomposition]
    for d in given:
        if not isinstance(getattr(d, "comm", None), Communicator) or not callable(getattr(d, "pattern", None)):
            raise ArgumentTypeError(
                f"decomposition is a {type(d).__name__}; pass a CartesianDecomposition, a field of one "
                "(decomposition.field(...)) or an UnstructuredDecomposition (anything with a gridcomm Communicator "
                ".comm and .pattern()), or a sequence of them, one per field"
            )
    if len({id(d.comm) for d in given}) > 1:
        raise ArgumentError(
            "the fields' decompositions are built on different communicators; build every one on the same "
            "communicator (or its fields with decomposition.field(...))"
        )
    return given


def check_same_decompositions(signatures: Sequence[tuple[Any, ...]]) -> None:
    """PatternError unless every rank built the same decomposition of each field (``signatures``: each rank's
    signature of each field's decomposition, in rank order). Ranks that pass different numbers of fields are
    left to the check of the fields."""
    if len({len(per_field) for per_field in signatures}) > 1:
        return
    for i, differ in enumerate(zip(*signatures, strict=True)):
        if len(set(differ)) > 1:
            raise PatternError(
                f"ranks built different decompositions of field {i} ({by_value(differ)}); build each field's "
                "decomposition with the same arguments on every rank"
            )
