"""Transport ``ipc``: within a node, every block written straight from this rank's fields into the peers'.

Each rank's destination arrays (for a halo exchange: its fields) and a small flag array are mapped once into
its peers with CUDA IPC. Per exchange, with method ``"kernel"``, one launch of ``gridcomm_ipc_exchange``
(ipc.cu) on the exchange's stream: tell the sources that this rank's destinations may be written,
wait until the destinations say the same, copy every selection of every field from this rank's sources into
the destinations' arrays over NVLink (and what this rank sends itself into its own), then flag the
destinations and wait for the sources' flags. With method ``"copy-engine"`` the copy engines move the same
blocks, one stream per destination (the seed's order: destination (rank + i) mod size), and small kernels
set and wait for the same flags. No buffers, no pack or unpack, one copy per byte, and no host involvement:
the exchange can be captured in a CUDA graph.

A block must land in a box of the extents it was sent as, or one of its sides must be one contiguous range
(a block of a 1-D buffer) of as many elements, which then takes the other side's runs: one copy cannot reshape
anything else. A transposition whose blocks do not pair so raises TransportError when bound
(``transport="auto"`` then takes the next transport).
A wait that outlasts the timeout records the silent peer in host-mapped memory and gives up instead of
hanging the GPU; ``wait()`` reports it as a GridcommTimeout.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..agreement import raise_if_any
from ..arguments import whole_number
from ..comm import Communicator
from ..device import libcuda
from ..errors import ArgumentError, TransportError
from ..gpu import all_peers_reachable
from ..packing.cuda import THREADS, RecordedLaunch, SegmentTable, copy_kernel, device_allocation
from ..packing.geometry import RunGrid, message_grid, paired_grids, run_grid
from ..packing.table import (
    DST,
    DST_INDEX,
    DST_STRIDE0,
    DST_STRIDE1,
    N1,
    SRC,
    SRC_INDEX,
    SRC_STRIDE0,
    SRC_STRIDE1,
    TABLE_WIDTH,
    UNIT,
    UNITS,
    UNITS_PER_RUN,
    Descriptors,
    address,
)
from .base import Channel, PackerKind, Transport, other_nodes
from .gpu_waits import GpuWaitChannel, GpuWaitReport

SOURCE = Path(__file__).with_name("ipc.cu")  # its kernels, built on the copy kernels' body (packing/runs.cuh)
MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction is read from the (unified) addresses

#: A selection whose runs would land in the peer as short pieces spread far apart (a column of a large 2-D field:
#: 8-byte runs a row apart) is written contiguously into the receiver's staging buffer, which the receiver then
#: unpacks into its field (one more launch). Scattered stores into another GPU's memory pay an address
#: translation for every page they touch: on 4 x H200, halos of 8-byte runs over 512 MiB of the receiving field
#: took 181.6 µs straight into the fields against 21.2 µs packed by NCCL's path, and 9.4 µs for rows of the
#: same bytes (benchmarks/tune_alltoall.py, tune-alltoall-gpu-4r-20261126T053819Z). Local gathers and scatters
#: do not pay that.
#: Messages up to this many bytes go one way (IpcTransport.one_way_bytes): one thread block per peer writes every
#: byte twice over (the lines' flags) and copies it twice more (pack, unpack), so the trip it saves stops paying
#: for larger messages (2 x H100, `bench p2p`, p2p-gpu-2r-20261126T204424Z: one way 5.8-6.6 µs up to 8 KiB against
#: 10.0-10.3 straight into the fields, 10.0 against 10.9 at 32 KiB, 23.5 against 11.1 at 128 KiB).
ONE_WAY_BYTES = 32 << 10
ONE_WAY_THREADS = 1024  # threads of a block of the one-way kernel (ipc.cu), each block one peer's message
LINE_DATA, LINE_BYTES = 8, 16  # a landing area's line: 8 bytes of data, each 4 of them beside a 4-byte flag
STAGE_RUN_BYTES = 128  # runs shorter than this ...
STAGE_SPAN_BYTES = 16 << 20  # ... spread over at least this many bytes of the destination array


def staged(grid: RunGrid) -> bool:
    """Whether a selection that lands as ``grid`` in its destination goes through the receiver's staging buffer
    (short runs spread over a wide span of memory) rather than straight into the destination."""
    if grid.run_bytes >= STAGE_RUN_BYTES or grid.n0 * grid.n1 < 2:
        return False
    offsets = grid.offsets()
    return int(offsets.max() - offsets.min()) + grid.run_bytes >= STAGE_SPAN_BYTES


@dataclass(frozen=True)
class IpcTransport(Transport):
    """CUDA IPC between the GPUs of one node: every block written straight into the peers' destinations.

    Args:
        method: ``"kernel"``: one kernel per exchange copies every block of every peer (and this rank's own)
            and signals the peers, all GPU-side; ``"copy-engine"``: the copy engines move the blocks
            (cudaMemcpy2DAsync, boxes only), one stream per destination in the order (rank + i) mod size,
            with small kernels signalling around them. ``gridcomm bench alltoall`` compares the two.
            Exchanges of at most ``one_way_bytes`` go one way with the kernel (below).
        blocks: (method ``"kernel"``) at most this many thread blocks of 256 for the exchange kernel (default:
            6 per SM, all of the GPU): fewer leave SMs free for work that runs beside the exchange (a pipelined
            transform), at the cost of bandwidth where few blocks cannot keep every link busy.
        one_way_bytes: (method ``"kernel"``) where no message to or from a peer (and no rank's copy to itself)
            is larger than this many bytes, the exchange makes one trip over NVLink instead of two: each message
            is written with its flags into a landing area of the destination, which copies it into its fields
            itself (ipc.cu, ``gridcomm_ipc_one_way``; one thread block per peer, so larger messages go straight
            into the fields). 0: never.
    """

    method: Literal["kernel", "copy-engine"] = "kernel"
    blocks: int | None = None
    one_way_bytes: int = ONE_WAY_BYTES
    name = "ipc"
    memories = frozenset({"device"})
    reach = "node"
    graph_capturable = True
    replayable = True

    def __post_init__(self) -> None:
        if self.method not in ("kernel", "copy-engine"):
            raise ArgumentError(f"IpcTransport(method={self.method!r}): use 'kernel' or 'copy-engine'")
        if self.blocks is not None:
            whole_number(self.blocks, "IpcTransport(blocks)", least=1, meaning="thread blocks of the exchange kernel")
        whole_number(self.one_way_bytes, "IpcTransport(one_way_bytes)", least=0, meaning="bytes (0: never one way)")

    def ranks_reason(self, comm: Communicator) -> str | None:
        if "ipc" not in comm.reasons:  # collective the first time
            comm.reasons["ipc"] = other_nodes(comm) or all_peers_reachable(comm)
        return comm.reasons["ipc"]

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "direct"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        if self.method == "copy-engine":
            return _CopyEngineChannel(comm, packer)
        if self.goes_one_way(comm, packer.layout, packer.local):
            return _OneWayChannel(comm, packer)
        return _KernelChannel(comm, packer, self.blocks)

    def goes_one_way(self, comm: Communicator, layout: Any, local: Any = None) -> bool:
        """Collective: whether an exchange of ``layout`` (and ``local``, what a rank sends itself, or None) goes
        one way with method ``"kernel"``: no message to or from a peer, and no rank's copy to itself, is larger
        than ``one_way_bytes`` (each is one thread block's work); every rank decides alike."""
        from mpi4py import MPI

        sizes = [m.nbytes for m in (*layout.sends, *layout.recvs)] + [local.send_nbytes if local else 0]
        return comm.mpi.allreduce(max(sizes), op=MPI.MAX) <= self.one_way_bytes


@functools.cache
def _address_range() -> Any:
    query = libcuda().cuMemGetAddressRange_v2
    query.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    return query


def _allocation_base(address: int) -> int:
    """Start of the cudaMalloc allocation that holds ``address`` (an IPC handle names a whole allocation)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    status = _address_range()(ctypes.byref(base), ctypes.byref(size), address)
    if status != 0:
        raise TransportError(f"cuMemGetAddressRange failed for a field at {address:#x} (CUresult {status})")
    return base.value


class _Mappings:
    """Peer allocations opened in this process, counted: CUDA lets a process open a handle only once."""

    def __init__(self) -> None:
        self._open: dict[bytes, list[int]] = {}  # handle -> [address, users]

    def open(self, handle: bytes) -> int:
        import cupy

        entry = self._open.get(handle)
        if entry is None:
            entry = self._open[handle] = [cupy.cuda.runtime.ipcOpenMemHandle(handle), 0]
        entry[1] += 1
        return entry[0]

    def close(self, handle: bytes) -> None:
        import cupy

        entry = self._open[handle]
        entry[1] -= 1
        if entry[1] == 0:
            cupy.cuda.runtime.ipcCloseMemHandle(entry[0])
            del self._open[handle]


_MAPPINGS = _Mappings()


def _export(address: int) -> tuple[bytes, int]:
    """(IPC handle of the allocation holding ``address``, offset of ``address`` in it)."""
    import cupy

    base = _allocation_base(address)
    try:
        return cupy.cuda.runtime.ipcGetMemHandle(base), address - base
    except cupy.cuda.runtime.CUDARuntimeError as error:
        raise TransportError(
            f"a field's memory cannot be shared by CUDA IPC ({error}); allocate fields with cudaMalloc (CuPy's "
            "default allocator, or torch without expandable segments) or use transport='nccl'"
        ) from None


def staged_receives(layout: Any, destinations: Sequence[Any]) -> Iterator[tuple[Any, RunGrid]]:
    """(segment, its run grid in its destination) of every received selection that is ``staged``."""
    for message in layout.recvs:
        for seg in message.segments:
            grid = run_grid(destinations[seg.field].shape, layout.fields[seg.field], seg.selection)
            if staged(grid):
                yield seg, grid


def unpack_rows(rows: Descriptors, layout: Any, destinations: Sequence[Any], buffer: int) -> None:
    """Rows copying every staged selection from the staging buffer at address ``buffer`` (laid out as ``layout``'s
    receive messages) into its destination."""
    for seg, grid in staged_receives(layout, destinations):
        rows.add(buffer, message_grid(grid, seg.offset), address(destinations[seg.field]), grid)


def peer_rows(
    rows: Descriptors, message: Any, sources: Sequence[Any], layout: Any, there: tuple[Any, Any, Any], staging: int
) -> None:
    """Rows copying the selections of ``message`` into the peer's destinations: selection by selection, which
    needs the peer to cut the block into as many selections, each of the same extents or paired with a
    contiguous range of as many elements (``paired_grids``). ``there``: the peer's destination shapes, the
    selections where this message lands in them, and their addresses (mapped here).

    A selection that lands there as short scattered runs (``staged``, decided alike on both sides) goes to the
    peer's staging buffer instead, packed as ``layout`` packs it: ``staging`` is the address of this message's
    byte 0 there."""
    shapes_there, selections_there, addresses = there
    if len(message.segments) != len(selections_there):
        raise ValueError(
            f"the block to rank {message.peer} is cut into {len(message.segments)} selections here but "
            f"{len(selections_there)} there; ipc copies a block into a box of the same extents"
        )
    for seg, (f, dst_sel) in zip(message.segments, selections_there, strict=True):
        spec, source = layout.fields[seg.field], sources[seg.field]
        if staged(run_grid(shapes_there[f], spec, dst_sel)):
            grid = run_grid(source.shape, spec, seg.selection)
            rows.add(address(source), grid, staging, message_grid(grid, seg.offset))
            continue
        src, dst = paired_grids(source.shape, seg.selection, shapes_there[f], dst_sel, spec)
        rows.add(address(source), src, addresses[f], dst)


class _PeerChannel(GpuWaitChannel):
    """What every ipc channel holds: this rank's flag array (int64 CLEAR[size] then DATA[size], written by the
    peers), its exchange counter on the device, the wait report, and the peers' memory mapped here."""

    def __init__(self, comm: Communicator, layout: Any) -> None:
        import cupy

        self._comm = comm
        self._flags = device_allocation(16 * comm.size)
        self._flags.fill(0)
        self._epoch = cupy.zeros(1, dtype=np.int64)
        self._waits = GpuWaitReport(comm.rank, "ipc")
        self._handles: list[bytes] = []
        self._destinations = [m.peer for m in layout.sends]
        self._sources = [m.peer for m in layout.recvs]

    def _publish(self, buffers: Sequence[Any]) -> list[Any]:
        """Collective: every rank's (flags, [each of its ``buffers``]) exported for CUDA IPC, by rank. A buffer
        that is None or empty (a rank that receives nothing) has no memory to share, and nothing lands in it:
        None."""
        import cupy

        cupy.cuda.Device().synchronize()
        problem, exported = None, None
        try:
            shared = [_export(b.data.ptr) if b is not None and b.size else None for b in buffers]
            exported = (_export(self._flags.data.ptr), shared)
        except TransportError as error:
            problem = str(error)
        raise_if_any(self._comm.mpi, problem, TransportError)
        return self._comm.mpi.allgather(exported)

    def _map_together(self, everyone: Sequence[Any], mapping: Callable[[], None]) -> None:
        """Collective: map the flags of every peer (of ``everyone``, from ``_publish``), then run ``mapping`` (the
        channel's own mappings); where either fails on any rank, every rank closes what it opened and raises
        TransportError."""
        import cupy

        comm = self._comm
        flag_addresses = np.zeros(comm.size, dtype=np.uint64)
        problem = None
        try:
            for r in sorted(set(self._destinations) | set(self._sources)):
                flag_addresses[r] = self._mapped(everyone[r][0])
            mapping()
        except ValueError as error:
            problem = f"rank {comm.rank}: {error}"
        except cupy.cuda.runtime.CUDARuntimeError as error:
            problem = f"rank {comm.rank}: CUDA could not map a peer's GPU memory ({error})"
            if "AlreadyMapped" in str(error):  # a CUDA-aware MPI maps the peers' buffers it moved, and keeps them
                problem += (
                    ": another library in this process mapped that allocation first, e.g. a CUDA-aware MPI that "
                    "moved these arrays (for Open MPI set OMPI_MCA_btl_smcuda_use_cuda_ipc=0, or keep the arrays "
                    "ipc moves out of MPI calls)"
                )
        raise_if_any(comm.mpi, problem, TransportError, self._unmap)
        self._peer_flags = cupy.asarray(flag_addresses)
        self._destination_ranks = cupy.asarray(np.array(self._destinations or [0], dtype=np.int32))
        self._source_ranks = cupy.asarray(np.array(self._sources or [0], dtype=np.int32))

    def _mapped(self, exported: tuple[bytes, int] | None) -> int:
        if exported is None:
            return 0
        handle, offset = exported
        address = _MAPPINGS.open(handle)  # raises where CUDA refuses: then there is nothing to close
        self._handles.append(handle)
        return address + offset

    def _unmap(self) -> None:
        for handle in self._handles:
            _MAPPINGS.close(handle)
        self._handles = []

    def close(self) -> None:
        import cupy

        cupy.cuda.Device().synchronize()
        self._comm.mpi.Barrier()  # no peer writes into our memory any more
        self._unmap()


class _IpcChannel(_PeerChannel):
    """What both methods of writing straight into the peers' destinations share: the rows to copy and the
    staging buffer.

    ``self._rows`` holds one descriptor row per selection: from this rank's sources (``packer.fields``) into
    the destinations of each peer (``packer.destinations``, mapped here) or, for a selection that lands as short
    scattered runs (``staged``), into the peer's staging buffer; then what this rank sends itself.
    ``self._rows_of[k]`` is the range of rows bound for ``self._destinations[k]``. ``self._unpack`` (or None)
    copies what the sources staged here into the destinations, after the exchange.
    """

    def __init__(self, comm: Communicator, packer: Any) -> None:
        import cupy

        layout, sources, destinations = packer.layout, packer.fields, packer.destinations
        super().__init__(comm, layout)
        self._staging, unpack = self._staging_here(layout, destinations)
        # Everyone publishes its flags, destinations and staging buffer and, per source, where that source's blocks
        # land: the selections in the destinations, and the offset of its message in the staging buffer.
        everyone = self._publish([*destinations, self._staging])
        wanted = {m.peer: ([(s.field, s.selection) for s in m.segments], m.offset) for m in layout.recvs}
        shapes = [tuple(d.shape) for d in destinations]
        their = comm.mpi.alltoall([(shapes, *wanted.get(r, (None, 0))) for r in range(comm.size)])
        self._rows = Descriptors(cupy)
        self._rows_of: list[range] = []
        #: By rank: the addresses of its destination arrays here (mapped, for a peer this rank writes into).
        self.destination_addresses = {comm.rank: [address(d) for d in destinations]}

        def mapping() -> None:
            for message in layout.sends:
                first = len(self._rows.rows)
                shapes_there, selections_there, offset_there = their[message.peer]
                *fields_there, staging_there = everyone[message.peer][1]
                addresses = self.destination_addresses[message.peer] = [self._mapped(pair) for pair in fields_there]
                staging = self._mapped(staging_there) + offset_there - message.offset
                peer_rows(self._rows, message, sources, layout, (shapes_there, selections_there, addresses), staging)
                self._rows_of.append(range(first, len(self._rows.rows)))
            self._rows.local(packer.local, sources, destinations)

        self._map_together(everyone, mapping)
        self._unpack = SegmentTable(unpack) if unpack.rows else None

    def _staging_here(self, layout: Any, destinations: Any) -> tuple[Any, Any]:
        """(this rank's staging buffer, laid out as ``layout``'s receive messages, or None where no selection is
        staged; the rows unpacking it into the destinations)."""
        import cupy

        unpack = Descriptors(cupy)
        if next(staged_receives(layout, destinations), None) is None:
            return None, unpack
        buffer = device_allocation(layout.recv_nbytes)
        unpack_rows(unpack, layout, destinations, buffer.data.ptr)
        return buffer, unpack

    def _lanes(self) -> list[int]:
        """Each row's lane for the kernel's pieces (``balanced_pieces``): its destination counted from this rank,
        (destination - rank) mod size, this rank's own rows 0. Pieces are interleaved lane by lane, so that every
        link is busy at once, and each rank starts on its next rank's: no destination receives from every rank
        first while the other links idle."""
        lanes = [0] * len(self._rows.rows)
        for peer, rows in zip(self._destinations, self._rows_of, strict=True):
            for i in rows:
                lanes[i] = (peer - self._comm.rank) % self._comm.size
        return lanes

    def close(self) -> None:
        super().close()
        self._staging = self._unpack = None


#: Columns of the one-way kernel's per-peer rows (ipc.cu): the peer, its rows in the pack (or unpack) table, its
#: message's offset in the scratch buffer, its lines, where it lands (the destination's half 0, mapped here, or
#: the offset in this rank's half) and the bytes of the destination's half.
PEER_RANK, ROW_FIRST, ROW_LAST, SCRATCH, LINES, LANDING, HALF, PEER_WIDTH = range(8)


def _lines(nbytes: int) -> int:
    """Lines of a landing area that a message of ``nbytes`` takes."""
    return -(-nbytes // LINE_DATA)


def _table(rows: Descriptors) -> Any:
    """``rows`` as a device table (one row of zeros where there is none: the kernel reads none of it)."""
    import cupy

    return cupy.asarray(np.array(rows.rows or [[0] * TABLE_WIDTH], dtype=np.int64).reshape(-1, TABLE_WIDTH))


def landing_places(nbytes: Sequence[int]) -> tuple[list[int], list[int], int, int]:
    """Where messages of ``nbytes`` lie, one after another, in a one-way exchange's scratch buffer (LINE_DATA
    bytes a line, each message from a line of its own) and in one half of a landing area (LINE_BYTES a line):
    (scratch offsets, landing offsets, scratch bytes, half bytes)."""
    scratch, landing, lines = [], [], 0
    for n in nbytes:
        scratch.append(lines * LINE_DATA)
        landing.append(lines * LINE_BYTES)
        lines += _lines(n)
    return scratch, landing, lines * LINE_DATA, lines * LINE_BYTES


@dataclass
class OneWayTables:
    """What a one-way exchange copies (ipc.cu, ``gridcomm_ipc_one_way``): the pack rows (fields into the send
    scratch buffer, message after message, then what the rank sends itself) and the unpack rows (the receive
    scratch buffer into the fields, message after message), with one PEER_WIDTH row per destination (``sends``:
    LANDING and HALF are filled in once the destinations' landing areas are mapped) and per source (``recvs``:
    LANDING is the message's offset in this rank's half); ``local``, the range of pack rows of what the rank
    sends itself; ``half``, the bytes of one half of this rank's landing area."""

    pack: Descriptors
    unpack: Descriptors
    sends: np.ndarray
    recvs: np.ndarray
    local: tuple[int, int]
    half: int


def one_way_tables(xp: Any, packer: Any, send_scratch: int, recv_scratch: int) -> OneWayTables:
    """The tables of a one-way exchange of ``packer`` (its layout, fields, destinations and local layout), for
    scratch buffers at addresses ``send_scratch`` and ``recv_scratch`` (``landing_places``' sizes), with arrays of
    module ``xp`` (CuPy, or NumPy where tests replay them on the host)."""
    layout = packer.layout
    send_at, _, _, _ = landing_places([m.nbytes for m in layout.sends])
    recv_at, land_at, _, half = landing_places([m.nbytes for m in layout.recvs])
    pack, unpack = Descriptors(xp), Descriptors(xp)
    sends = np.zeros((max(1, len(layout.sends)), PEER_WIDTH), dtype=np.int64)
    recvs = np.zeros((max(1, len(layout.recvs)), PEER_WIDTH), dtype=np.int64)
    for k, (m, at) in enumerate(zip(layout.sends, send_at, strict=True)):
        first = len(pack.rows)
        pack.messages([m], layout.fields, packer.fields, send_scratch + at - m.offset, into=True)
        sends[k, :LANDING] = (m.peer, first, len(pack.rows), at, _lines(m.nbytes))
    local_first = len(pack.rows)
    pack.local(packer.local, packer.fields, packer.destinations)
    for k, (m, at, land) in enumerate(zip(layout.recvs, recv_at, land_at, strict=True)):
        first = len(unpack.rows)
        unpack.messages([m], layout.fields, packer.destinations, recv_scratch + at - m.offset, into=False)
        recvs[k, :HALF] = (m.peer, first, len(unpack.rows), at, _lines(m.nbytes), land)
    return OneWayTables(pack, unpack, sends, recvs, (local_first, len(pack.rows)), half)


class _OneWayChannel(_PeerChannel):
    """Small exchanges in one trip over NVLink (ipc.cu, ``gridcomm_ipc_one_way``): each message packed here,
    written with its flags into the destination's landing area, and copied from there into the fields by the
    destination itself, in its stream order; thread block k sends message k and receives message k."""

    def __init__(self, comm: Communicator, packer: Any) -> None:
        import cupy

        layout = packer.layout
        super().__init__(comm, layout)
        _, _, send_bytes, _ = landing_places([m.nbytes for m in layout.sends])
        _, _, recv_bytes, half = landing_places([m.nbytes for m in layout.recvs])
        self._send_scratch = device_allocation(send_bytes)
        self._recv_scratch = device_allocation(recv_bytes)
        self._landing = device_allocation(2 * half)
        self._landing.fill(0)  # no line of exchange 1 or 2 there
        tables = one_way_tables(cupy, packer, self._send_scratch.data.ptr, self._recv_scratch.data.ptr)
        sends, recvs, self._half, self._local = tables.sends, tables.recvs, tables.half, tables.local
        everyone = self._publish([self._landing if self._half else None])
        place = {
            int(row[PEER_RANK]): (int(row[LANDING]), int(row[LINES]), self._half) for row in recvs[: len(layout.recvs)]
        }
        their = comm.mpi.alltoall([place.get(r) for r in range(comm.size)])

        def mapping() -> None:
            for k, m in enumerate(layout.sends):
                if their[m.peer] is None or their[m.peer][1] != sends[k, LINES]:
                    raise ValueError(
                        f"the message to rank {m.peer} is {m.nbytes} bytes here, but that rank expects "
                        f"{'none' if their[m.peer] is None else f'{their[m.peer][1]} lines of {LINE_DATA}'}"
                    )
                landing, _, half = their[m.peer]
                sends[k, LANDING] = self._mapped(everyone[m.peer][1][0]) + landing
                sends[k, HALF] = half

        self._map_together(everyone, mapping)
        self._keep = (tables.pack.keep, tables.unpack.keep)  # the index arrays of row selections
        self._pack, self._unpack = _table(tables.pack), _table(tables.unpack)
        self._sends, self._recvs = cupy.asarray(sends), cupy.asarray(recvs)
        local_rows = self._local[1] > self._local[0]
        grid = max(1, max(len(layout.sends), len(layout.recvs)) + local_rows)
        self._finished = cupy.zeros(1, dtype=np.uint32)
        self._exchange = RecordedLaunch(copy_kernel(SOURCE, "gridcomm_ipc_one_way"), grid, ONE_WAY_THREADS)
        comm.mpi.Barrier()  # every mapping is in place before anyone's first exchange

    def start(self, stream: Any = None) -> None:
        self._exchange.launch(self._arguments, stream, key=int(self._waits.limit_ns))

    def _arguments(self) -> tuple[Any, ...]:
        return (
            self._pack,
            self._unpack,
            self._sends,
            np.int32(len(self._destinations)),
            self._recvs,
            np.int32(len(self._sources)),
            np.int64(self._local[0]),
            np.int64(self._local[1]),
            self._send_scratch,
            self._recv_scratch,
            self._landing,
            np.int64(self._half),
            self._epoch,
            self._finished,
            self._flags,
            self._peer_flags,
            np.int32(self._comm.rank),
            np.int32(self._comm.size),
            self._waits.limit_ns,
            self._waits.address,
        )

    def close(self) -> None:
        super().close()
        self._landing = self._send_scratch = self._recv_scratch = None


class _KernelChannel(_IpcChannel):
    """One kernel per exchange: the copies and the flags (ipc.cu, gridcomm_ipc_exchange)."""

    def __init__(self, comm: Communicator, packer: Any, blocks: int | None = None) -> None:
        import cupy

        super().__init__(comm, packer)
        self._table = SegmentTable(self._rows, self._lanes(), blocks)
        self._finished = cupy.zeros(2, dtype=np.uint32)  # [blocks done, a block gave up]
        # Every exchange has a block (grid >= 1), even one with nothing to copy: the last block signals.
        self._exchange = RecordedLaunch(copy_kernel(SOURCE, "gridcomm_ipc_exchange"), self._table.grid, THREADS)
        self._body: tuple[Any, ...] = self._table.args  # the kernel's arguments before the flags'
        comm.mpi.Barrier()  # every mapping is in place before anyone's first exchange

    @property
    def blocks(self) -> int:
        """Thread blocks of the exchange kernel's copies."""
        return self._table.grid

    @property
    def stages(self) -> bool:
        """Whether some blocks land in this rank through its staging buffer (short scattered runs, ``staged``)."""
        return self._unpack is not None

    def write_with(
        self, kernel: Any, threads: tuple[int, ...], args: tuple[Any, ...], blocks: int | None = None
    ) -> None:
        """From now on, run ``kernel`` instead of the copies: a kernel of the caller's that writes every block of
        the exchange itself, into this rank's destinations and its peers' (``destination_addresses``), between
        ipc_exchange.cuh's ``ipc_exchange_open`` and ``ipc_exchange_close``, on ``blocks`` blocks (default: as
        many as the copies) of ``threads``, with ``args`` and then the flags' arguments (its parameters end with
        IPC_EXCHANGE_PARAMS). Only where no rank's exchange ``stages`` (the caller makes sure): the staged
        blocks would be unpacked over what the kernel wrote."""
        if self.stages:
            raise TransportError("this exchange stages some blocks at the receiver; a kernel cannot replace its copies")
        self._exchange = RecordedLaunch(kernel, blocks or self._table.grid, threads)
        self._body = tuple(args)

    def start(self, stream: Any = None) -> None:
        self._exchange.launch(self._arguments, stream, key=int(self._waits.limit_ns))
        if self._unpack is not None:  # the kernel has waited for every source: what they staged is here
            self._unpack.copy(stream)

    def _arguments(self) -> tuple[Any, ...]:
        return (
            *self._body,
            self._epoch,
            self._finished,
            self._flags,
            self._peer_flags,
            self._destination_ranks,
            np.int32(len(self._destinations)),
            self._source_ranks,
            np.int32(len(self._sources)),
            np.int32(self._comm.rank),
            np.int32(self._comm.size),
            self._waits.limit_ns,
            self._waits.address,
        )


class _CopyEngineChannel(_IpcChannel):
    """The copy engines move the blocks, one lane per destination in the order (rank + i) mod size; small kernels
    set and wait for the flags around them (ipc.cu). The first destination's lane is the exchange stream itself,
    its flag kernels merged with those that open and close the exchange (gridcomm_ipc_open_ready and
    gridcomm_ipc_sent_close); every other destination has a stream of its own, forked after the opening and
    joined before the closing."""

    def __init__(self, comm: Communicator, packer: Any) -> None:
        import cupy

        super().__init__(comm, packer)
        rows = np.array(self._rows.rows, dtype=np.int64).reshape(-1, TABLE_WIDTH)
        problem = None
        if (rows[:, [SRC_INDEX, DST_INDEX]] != 0).any():
            problem = "ipc with method='copy-engine' moves boxes only (row lists need method='kernel')"
        raise_if_any(comm.mpi, problem, TransportError, self._unmap)
        ordered = sorted(range(len(self._destinations)), key=lambda k: (self._destinations[k] - comm.rank) % comm.size)
        self._abandoned = cupy.zeros(max(len(ordered), 1), dtype=np.uint32)
        self._lanes = [
            (
                self._destination_ranks[k : k + 1],
                self._abandoned[i : i + 1],
                [c for row in rows[list(self._rows_of[k])] for c in _copies_2d(row)],
                cupy.cuda.Stream(non_blocking=True) if i else None,  # None: the exchange stream
                cupy.cuda.Event(block=False, disable_timing=True) if i else None,  # a lane's join (none for it)
            )
            for i, k in enumerate(ordered)
        ]
        mine = set(range(len(rows))) - {i for r in self._rows_of for i in r}
        self._own = [c for row in rows[sorted(mine)] for c in _copies_2d(row)]
        self._fork = cupy.cuda.Event(block=False, disable_timing=True)
        steps = ("open_ready", "ready", "sent", "sent_close")
        self._kernels = {step: copy_kernel(SOURCE, f"gridcomm_ipc_{step}") for step in steps}
        comm.mpi.Barrier()  # every mapping is in place before anyone's first exchange

    def start(self, stream: Any = None) -> None:
        one = ((1,), (1,))
        rank, size = np.int32(self._comm.rank), np.int32(self._comm.size)
        limit, error = self._waits.limit_ns, self._waits.address
        sources, nsrc = self._source_ranks, np.int32(len(self._sources))
        # The first lane's destination (or, with none, a placeholder that npeer = 0 leaves unread).
        first, abandoned = (self._lanes[0][0], self._lanes[0][1]) if self._lanes else (sources, self._abandoned)
        npeer = np.int32(1 if self._lanes else 0)
        self._kernels["open_ready"](
            *one,
            (self._epoch, self._peer_flags, sources, nsrc, rank, self._flags, first, npeer, abandoned, limit, error),
            stream=stream,
        )
        if len(self._lanes) > 1:
            self._fork.record(stream)
        for peer, abandoned_here, copies, lane, joined in self._lanes[1:]:
            lane.wait_event(self._fork)
            self._kernels["ready"](*one, (self._epoch, self._flags, peer, abandoned_here, limit, error), stream=lane)
            self._copy(copies, lane)
            self._kernels["sent"](*one, (self._epoch, self._peer_flags, peer, abandoned_here, rank, size), stream=lane)
            joined.record(lane)
        if self._lanes:
            self._copy(self._lanes[0][2], stream)
        self._copy(self._own, stream)
        for *_, joined in self._lanes[1:]:
            stream.wait_event(joined)
        self._kernels["sent_close"](
            *one,
            (self._epoch, self._peer_flags, first, npeer, abandoned, self._flags, sources, nsrc, rank, size, limit,
             error),
            stream=stream,
        )  # fmt: skip
        if self._unpack is not None:
            self._unpack.copy(stream)

    @staticmethod
    def _copy(copies: Sequence[tuple[int, int, int, int, int, int]], stream: Any) -> None:
        from cupy.cuda import runtime

        for args in copies:
            runtime.memcpy2DAsync(*args, MEMCPY_DEFAULT, stream.ptr)

    def close(self) -> None:
        super().close()
        self._lanes = self._own = []


def _copies_2d(row: np.ndarray) -> list[tuple[int, int, int, int, int, int]]:
    """A descriptor row of boxes as cudaMemcpy2DAsync's (dst, dpitch, src, spitch, width, height) argument
    tuples: one copy when its runs form a 2-D pattern (n0 or n1 is 1: every block of an all-to-all, most
    halos), else one per outer index (a box cut on two axes of a 3-D array)."""
    width = int(row[UNITS_PER_RUN] * row[UNIT])
    n1 = int(row[N1])
    n0 = int(row[UNITS]) // (int(row[UNITS_PER_RUN]) * n1)
    src, dst = int(row[SRC]), int(row[DST])
    if n1 == 1:  # the outer level only: n0 runs (or one)
        pitches = (int(row[DST_STRIDE0]), int(row[SRC_STRIDE0])) if n0 > 1 else (width, width)
        return [(dst, pitches[0], src, pitches[1], width, n0)]
    step_dst, step_src = int(row[DST_STRIDE0]), int(row[SRC_STRIDE0])
    return [
        (dst + i * step_dst, int(row[DST_STRIDE1]), src + i * step_src, int(row[SRC_STRIDE1]), width, n1)
        for i in range(n0)
    ]
