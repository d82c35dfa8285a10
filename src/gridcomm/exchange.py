"""Halo exchange: a pattern, its fields, a packer and a transport bound into a reusable, asynchronous step.

``BoundExchange`` is that binding for any pattern whose sends are read from source arrays and whose
receives are written into destination arrays; ``HaloExchanger`` is the case destination = source, and
``Transposer`` (all-to-all(v)) the case of separate destinations.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar, NoReturn, Self

import numpy as np

from .arrays import array_list, array_module, as_array, check_dtype, check_writable, is_device_array, memory_order
from .comm import Communicator, check_on_timeout, check_timeout, gather_or_raise, give_up
from .errors import ArgumentTypeError, FieldError, GridcommError, GridcommTimeout, PatternError, TransportError
from .packing import CopyPacker, DatatypePacker, DirectPacker, FieldSpec, Layout, OwnCopier, local_copies
from .packing.cuda import CudaPacker
from .pattern import Pattern, PeerPlan
from .transports import Transport, auto, auto_choice_reason, available, choose, requested
from .transports.auto import auto_measurement
from .validate import ExchangeValidator, check_validate


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


class ExchangeHandle:
    """An exchange in flight: ``wait()`` completes it (received data is in place when it returns)."""

    def __init__(self, exchanger: BoundExchange) -> None:
        self._exchanger = exchanger
        self.done = True
        self.stream: Any = None

    def wait(self) -> None:
        """Block until this exchange is complete; raise GridcommTimeout if a peer stays silent.

        After a timeout the exchange is still in flight and ``wait()`` may be called again: with host-side
        waits (mpi, staged, cma) that completes it once the peer answers. ``nccl`` aborts its communicator
        (NCCL's kernels would spin forever): the exchanger then raises on every use; make a new one. GPU-side
        waits (ipc, nvshmem) give up on the GPU: that exchange is over with its halos undefined (the next
        ``wait()`` returns, and the next exchange may start at once), the peers are told, and the next exchange
        is right once the silent peer has caught up.
        """
        if not self.done:
            self._exchanger._complete(self.stream)
            self.done = True
            self._exchanger._validate(self.stream)


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


class BoundExchange:
    """A pattern, its fields, a packer and a transport bound into a reusable, asynchronous step: what
    ``HaloExchanger`` and ``Transposer`` share.

    Sends are read from ``sources`` and receives written into ``destinations`` (field i of one into field i
    of the other; the same list for a halo exchange). What a rank sends itself is copied source box to
    destination box while the messages are in flight. A subclass's constructor sets ``comm``, ``sources``,
    ``destinations``, ``on_device``, ``transport`` and ``xp``, says what fits in ``_check_fields``, then runs
    ``_agree_on_fields``, the pattern's ``check_matches_peers``, ``_split_own``, ``Layout.build``, ``_bind``
    and ``_ready``: each collective step raises on every rank if any rank found a problem.
    """

    #: How a timeout names one run of this kind, e.g. "halo exchange #3 (...)".
    _what: ClassVar[str] = "exchange"
    #: What another rank's error says it rejected ("rank 2 rejected its fields: ...").
    _checked: ClassVar[str] = "fields"
    #: True where some selection cannot be described as memory runs: "auto" then measures no transport that
    #: copies between the arrays directly.
    _packed_only = False

    comm: Communicator
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

    def _split_own(self, full: Pattern) -> None:
        """``self.pattern``: ``full`` without what this rank sends itself, which goes to ``self._own`` (or None)."""
        rank = self.comm.rank
        self.pattern = Pattern(
            full.local_shape, tuple(p for p in full.peers if p.rank != rank), full.trailing_axes, full.recv_shape
        )
        self._own: PeerPlan | None = next((p for p in full.peers if p.rank == rank), None)

    def _own_layout(self) -> Layout | None:
        """The layout of what this rank sends itself when the GPU kernels (or the ipc copies) can copy it source
        to destination in the same launch as the rest: on the GPU, when its boxes pair one to one with equal
        extents (a periodic wrap, a transposition's diagonal block). Otherwise None: ``_bind`` then copies it
        through ``local_copies``."""
        own = self._own
        if own is None or not self.on_device:
            return None
        if len(own.send) != len(own.recv) or any(s.shape != r.shape for s, r in zip(own.send, own.recv, strict=True)):
            return None
        alone = Pattern(self.pattern.local_shape, (own,), recv_shape=self.pattern.recv_shape)
        return Layout.build(alone, self.layout.fields)

    def _bind(self) -> None:
        """Make the packer the transport reads and writes through, and the transport's channel (collective)."""
        kind = self.transport.packer_kind(self.on_device)
        specs = self.layout.fields
        own = self._own_layout()
        # What this rank sends itself and no kernel copies: on the host, packed and unpacked a cache-sized chunk at a
        # time (a call or two per exchange); on the GPU, view to view on the exchange's stream, through a scratch
        # array where the boxes are cut differently on the two sides.
        copied = self._own is not None and own is None
        self._local_copies: list[tuple[Any, Any]] = (
            local_copies(self._own, specs, self.sources, self.destinations, self.xp)
            if copied and self.on_device
            else []
        )
        self._own_copier = (
            OwnCopier(specs, self.sources, self.destinations, self._own) if copied and not self.on_device else None
        )
        # Bytes copied outside the transport's kernels from this rank to itself per exchange.
        own_items = self._own.recv_size if copied else 0
        self.local_copy_nbytes = sum(own_items * spec.row_items * spec.dtype.itemsize for spec in specs)
        if self.on_device and kind == "direct":
            self.packer = DirectPacker(self.layout, self.sources, own, self.destinations)
        elif self.on_device:
            received = self.transport.receive_buffer(self.comm, self.layout.recv_nbytes)
            self.packer = CudaPacker(self.layout, self.sources, own, self.destinations, received)
        elif kind == "datatype":
            self.packer = DatatypePacker(self.layout, self.sources, self.destinations)
        elif kind == "direct":
            self.packer = DirectPacker(self.layout, self.sources, destinations=self.destinations)
        else:
            self.packer = CopyPacker(self.layout, self.sources, self.destinations)
        self.channel = self.transport.bind(self.comm, self.packer, self.tag)

    def _bind_or_fall_back(self, transport: str | Transport) -> None:
        """``_bind``. With ``"auto"``, where several candidates can move these fields: the fastest for this plan,
        measured (transports/auto.py; not in validation mode, whose checks would be timed too). Otherwise where
        ``"auto"`` picked ipc and ipc cannot map or pair these arrays (every rank raised together), the next best
        transport. ``self.transport_reason`` says which and why."""
        self.transport_reason = f"{self.transport.name}: asked for"
        if transport == "auto":
            measuring = not self.validate and auto_measurement()
            self.transport_reason = auto_choice_reason(available(self.comm, self.on_device), self.on_device, measuring)
            if measuring and self._bind_measured():
                return
        try:
            self._bind()
        except TransportError:
            if transport != "auto" or self.transport.name != "ipc":
                raise
            self.transport = choose("auto", self.comm, self.on_device, exclude=("ipc",))
            self.transport_reason = f"{self.transport.name}: ipc cannot pair these blocks (a block must land in a " \
                "box of the extents it was sent as)"
            self._bind()

    def _bind_measured(self) -> bool:
        """Collective: bind each usable candidate of ``auto.candidates`` in turn, time the plan's own exchange and
        keep the fastest (or the one remembered for a plan of this shape); False where fewer than two candidates
        can move these fields (the order of preference decides then)."""
        usable = auto.usable_candidates(available(self.comm, self.on_device), self.on_device)
        if self._packed_only:
            usable = {
                label: candidate
                for label, candidate in usable.items()
                if choose(candidate, self.comm, self.on_device).packer_kind(self.on_device) != "direct"
            }
        if len(usable) < 2:
            return False
        key = auto.plan_shape(self.comm, self.layout)
        label = auto.remembered(self.comm, key)
        if label is not None:
            self.transport = choose(usable[label], self.comm, self.on_device)
            self._bind()
            self.transport_reason = f"{label}: measured fastest before for a plan of this shape on these ranks"
            return True
        seconds = {}
        for label, candidate in usable.items():
            self.transport = choose(candidate, self.comm, self.on_device)
            try:
                self._bind()
            except TransportError:  # raised on every rank together: this candidate cannot move this plan
                continue
            self._ready()
            seconds[label] = auto.time_exchanges(self.comm, self.exchange, self._synchronize)
            self._unbind()
        measured = auto.pick(seconds, list(usable))
        auto.remember(self.comm, key, measured.chosen)
        self.transport = choose(usable[measured.chosen], self.comm, self.on_device)
        self._bind()
        self.transport_reason = measured.reason
        if self.comm.rank == 0:
            auto.log.info("%s: %s", type(self).__name__, measured.reason)
        return True

    def _unbind(self) -> None:
        """Free what ``_bind`` made (requests, datatypes, buffers)."""
        self.channel.close()
        self.packer.close()
        if self._own_copier is not None:
            self._own_copier.close()

    def _synchronize(self) -> None:
        """Wait until this rank's exchanges have finished (the device, for GPU fields)."""
        if self.on_device:
            self.xp.cuda.Device().synchronize()

    def _ready(self) -> None:
        """The state of a bound exchange with nothing in flight."""
        plans = [*self.pattern.peers, *([self._own] if self._own is not None else [])]
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

    # -- running ----------------------------------------------------------------------------------------

    def start(self, stream: Any = None) -> ExchangeHandle:
        """Pack and post the exchange; returns a handle whose ``wait()`` completes it.

        For GPU fields everything is enqueued on ``stream`` (a CuPy stream; None: the current stream), and
        later work on that stream sees the received data once ``wait()`` has returned. Work that touches
        neither what is received nor what is sent may run in between (for GPU fields: on another stream).
        """
        name = type(self).__name__
        if self._closed:
            raise GridcommError(f"this {name} is closed; make a new one")
        if not self._handle.done and not self.channel.abandoned:
            raise GridcommError(f"an exchange is already in flight on this {name}; wait() for it first")
        if self.on_device:
            stream = stream if stream is not None else self.xp.cuda.get_current_stream()
            self.packer.stream = stream
        else:
            stream = None
        if self._validator is not None:
            self._validator.post(stream)
        try:
            self.channel.before_pack(stream, self.timeout)
        except GridcommTimeout as error:
            self._give_up(error)
        self.packer.pack()
        self.channel.start(stream)
        if self._local_copies or self._own_copier is not None:  # overlaps with the messages in flight
            self._copy_own(stream)
        self.count += 1
        self._handle.done, self._handle.stream = False, stream
        return self._handle

    def _copy_own(self, stream: Any) -> None:
        if self._own_copier is not None:
            self._own_copier.copy()
            return
        with contextlib.nullcontext() if stream is None else stream:
            for dst, src in self._local_copies:
                self.xp.copyto(dst, src)

    @property
    def _operation(self) -> str:
        """How a timeout or a validation error names the exchange in flight."""
        return f"{self._what} #{self.count} (exchanger tag {self.tag}, {len(self.sources)} field(s))"

    def _complete(self, stream: Any) -> None:
        try:
            self.channel.wait(self.timeout, self._operation, stream)
        except GridcommTimeout as error:
            self._give_up(error)
        self.packer.unpack()
        self.channel.finish(stream)

    def _validate(self, stream: Any) -> None:
        """Validation mode: compare what arrived with the peers' checksums (ValidationError on a mismatch)."""
        if self._validator is not None:
            try:
                self._validator.check(self.timeout, self._operation, stream)
            except GridcommTimeout as error:
                self._give_up(error)

    # -- GPU only --------------------------------------------------------------------------------------

    def capture(self, stream: Any = None) -> CapturedExchange:
        """Record one whole exchange in a CUDA graph (GPU arrays, nccl or ipc transport); replay it with
        ``graph.launch(stream)``. The graph reads and writes the same arrays every time it is replayed.

        Capturing ``start(stream)`` and ``wait()`` inside a graph of your own (a whole application step)
        works too; with ``nccl``, delete such graphs before closing the communicator (NCCL waits for them)."""
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
        """Raise GridcommTimeout if a GPU-side wait of a replayed graph gave up (ipc); call it after the
        stream that replays the graph has been synchronised. Exchanges run with ``wait()`` check themselves."""
        if self._closed:
            raise GridcommError(f"this {type(self).__name__} is closed; make a new one")
        try:
            self.channel.check(f"{self._what} (exchanger tag {self.tag}, replayed graph)")
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
        if not self._handle.done and not self.channel.abandoned:
            raise GridcommError("close() while an exchange is in flight; wait() for it first")
        for graph in self._graphs:
            graph.close()
        self._unbind()
        # Buffers (host, pinned, device), flag arrays and events go now, not when the collector finds this object.
        self.channel = self.packer = self._validator = None  # type: ignore[assignment]
        self._local_copies, self._own_copier = [], None
        self._handle.stream = None  # the caller's stream: not ours to keep alive
        self._closed = True

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
        decomposition: anything with ``comm`` and ``pattern()``, e.g. a CartesianDecomposition.
        fields: one array or a sequence of arrays, each of the decomposition's local shape (with halo);
            dtypes and C/Fortran orders may differ between fields. NumPy, CuPy or any DLPack array.
        transport: ``"auto"``, a transport name (``gridcomm.transports.names()``) or a configured Transport.
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
        self.comm = getattr(decomposition, "comm", None)
        if not isinstance(self.comm, Communicator) or not callable(getattr(decomposition, "pattern", None)):
            raise ArgumentTypeError(
                f"decomposition is a {type(decomposition).__name__}; pass a CartesianDecomposition or an "
                "UnstructuredDecomposition (anything with a gridcomm Communicator .comm and .pattern())"
            )
        self.comm.rendezvous("HaloExchanger()")
        full = decomposition.pattern()
        # What a rank sends itself (periodic wrap over one rank) is copied field to field, not sent.
        self._split_own(full)
        self._agree_on_arguments(decomposition, fields, transport, (timeout, on_timeout, validate))
        self.transport = choose(transport, self.comm, self.on_device)
        specs = self._agree_on_fields()  # also views the fields as arrays: self.fields
        self.sources = self.destinations = self.fields  # received halos are written into the fields themselves
        self.xp = array_module(self.fields[0])
        del self._raw
        full.check_bounds()
        full.check_matches_peers(self.comm.mpi)
        self.layout = Layout.build(self.pattern, specs)
        self.tag = self.comm.new_tag()
        self._bind_or_fall_back(transport)
        self._ready()

    def _agree_on_arguments(self, decomposition: Any, fields: Any, transport: Any, options: tuple[Any, ...]) -> None:
        """Collective: the local checks of the field list, the transport's name and the options, then that every
        rank passes fields in the same memory, asks for the same transport and built the same decomposition (as
        far as its ``signature`` tells, if it has one). Every rank raises if any rank found a problem."""
        try:
            self._raw, asked = self._field_list(fields), requested(transport)
            self._set_options(*options)
            problem = None
        except Exception as error:  # whatever it is, every rank must hear of it (or the others would wait)
            self._raw, asked, problem = [], None, error
        self.on_device = bool(self._raw) and is_device_array(self._raw[0])
        mine = (self.on_device, asked, getattr(decomposition, "signature", None))
        everyone = gather_or_raise(self.comm.mpi, mine, problem, "arguments")
        on_device, transports, decompositions = zip(*everyone, strict=True)
        check_same_memory(on_device)
        check_same_transport(transports)
        if len(set(decompositions)) > 1:
            raise PatternError(
                f"ranks built different decompositions ({dict(enumerate(decompositions))}); build it with the same "
                "arguments on every rank"
            )

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
        shape, expected = tuple(f.shape), self.pattern.local_shape
        fits = shape[: len(expected)] == expected if self.pattern.trailing_axes else shape == expected
        if not fits:
            more = " followed by any trailing axes (e.g. levels)" if self.pattern.trailing_axes else ""
            raise FieldError(
                f"{what} has shape {shape} on rank {self.comm.rank}, but the decomposition's local arrays there "
                f"are {expected}{more}; allocate fields with decomposition.empty(dtype) / zeros(dtype)"
            )
        memory_order(f, what)  # raises for a strided view
        check_writable(self._raw[i], f, what, "received halos")
        return dtype.str, _compatible_orders(f), shape[len(expected) :]
