"""Moving halos on the GPU: every selection of every field for every peer in one kernel launch.

A descriptor table, built once, lists each segment's source and destination run grids (runs.cuh):
a field, a message buffer, or a peer's field mapped by CUDA IPC. ``CudaPacker`` packs all messages (and
copies what a rank sends itself straight from field to field) in one launch and unpacks in another; the
``ipc`` transport builds its table with the same rows and moves everything in one kernel of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import kernels
from .layout import BufferedMessages, Layout
from .table import TABLE_WIDTH, UNITS, Descriptors, balanced_pieces

THREADS = 256
# The copy kernels' shape (measured by benchmarks/tune_copy.py on H200, see docs/design.md): units each
# thread keeps in flight, and blocks per SM, each copying an equal share of the table; the kernels are
# compiled with registers few enough for that many blocks to be resident at once (one wave).
UNROLL = 1
BLOCKS_PER_SM = 6
PIECE_UNITS = 1024  # units a block copies before the next block's turn (0: one contiguous share per block)


#: Where the copy kernels' sources lie: beside this module (pack.cu, and runs.cuh, their shared body).
FOLDER = Path(__file__).parent


def copy_kernel(source: Path, name: str) -> Any:
    """Kernel ``name`` of the CUDA file ``source`` built on the copy kernels' body (runs.cuh: the descriptor table,
    ``copy_pieces``), compiled once (``gridcomm.kernels``) for the current UNROLL and BLOCKS_PER_SM."""
    options = ("-std=c++17", f"-I{FOLDER}", f"-DUNROLL={UNROLL}", f"-DCOPY_THREADS={THREADS}",
               f"-DMIN_BLOCKS={BLOCKS_PER_SM}")  # fmt: skip
    return kernels.function(source, name, options)


@functools.cache
def _multiprocessors(device: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


def device_allocation(nbytes: int) -> Any:
    """A CuPy uint8 array on its own cudaMalloc allocation: pooled memory cannot be exported by CUDA IPC
    on its own (a handle names a whole allocation), so exported buffers are allocated apart from the pool."""
    import cupy

    memory = cupy.cuda.Memory(max(nbytes, 1))
    return cupy.ndarray((max(nbytes, 1),), dtype=np.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))


class RecordedLaunch:
    """A kernel launch whose arguments change only with a key (a GPU-side wait's time limit), replayed outside a
    capture from a one-kernel CUDA graph recorded at the first launch and again when the key changes: CuPy
    marshals a kernel's arguments at every launch, which cost 8.5 µs of host time for the copy kernel's and
    13 µs for the one-way ipc kernel's 20 (4 x H100), against a few for a graph launch. Inside a capture (a
    graph of the whole exchange), the kernel itself."""

    def __init__(self, kernel: Any, grid: int, threads: int | tuple[int, ...]) -> None:
        self._kernel, self._grid = kernel, grid
        self._threads = threads if isinstance(threads, tuple) else (threads,)
        self._graph: Any = None
        self._key: object = None

    def launch(self, args: Callable[[], tuple[Any, ...]], stream: Any, key: object = None) -> None:
        """Enqueue the kernel with ``args()`` on ``stream`` (None: the current stream); ``key``: what the
        arguments depend on beyond the arrays, whose addresses never change."""
        import cupy

        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        if stream.is_capturing():
            self._kernel((self._grid,), self._threads, args(), stream=stream)
            return
        if self._graph is None or key != self._key:
            self._graph, self._key = self._record(args()), key
        self._graph.launch(stream)

    def _record(self, args: tuple[Any, ...]) -> Any:
        """The launch as a CUDA graph, captured on a stream of its own (nothing runs)."""
        import cupy

        recorder = cupy.cuda.Stream(non_blocking=True)
        recorder.begin_capture()
        try:
            self._kernel((self._grid,), self._threads, args, stream=recorder)
        finally:
            graph = recorder.end_capture()
        return graph


class SegmentTable:
    """A descriptor table on the device and each block's pieces of it (``balanced_pieces`` with
    PIECE_UNITS and the rows' ``lanes``): BLOCKS_PER_SM blocks per SM of the current device (or at most
    ``blocks``), fewer where there are fewer than THREADS units per block to copy."""

    def __init__(self, rows: Descriptors, lanes: Sequence[int] | None = None, blocks: int | None = None) -> None:
        import cupy

        self._keep = rows.keep
        table = np.array(rows.rows, dtype=np.int64).reshape(-1, TABLE_WIDTH)
        units = table[:, UNITS]
        cap = blocks or BLOCKS_PER_SM * _multiprocessors(cupy.cuda.Device().id)
        self.grid = max(1, min(cap, -(-int(units.sum()) // THREADS)))
        pieces = balanced_pieces(units, self.grid, PIECE_UNITS, lanes)
        self.pieces = len(pieces[0])
        self.table = cupy.asarray(table)
        self._pieces = tuple(cupy.asarray(a) for a in pieces)
        # The kernel is found once, not at every launch; its arguments never change.
        self._launch = RecordedLaunch(copy_kernel(FOLDER / "pack.cu", "gridcomm_copy_runs"), self.grid, THREADS)

    @property
    def args(self) -> tuple[Any, ...]:
        """The table's kernel arguments (runs.cuh's copy_pieces)."""
        return (self.table, *self._pieces, np.int32(self.pieces))

    def copy(self, stream: Any) -> None:
        """Enqueue the copy of every row on ``stream`` (None: the current stream): a RecordedLaunch."""
        if self.pieces:
            self._launch.launch(lambda: self.args, stream)


class CudaPacker(BufferedMessages):
    """Packs all fields for all peers into one device send buffer in one launch, and unpacks likewise;
    what a rank sends itself is copied field to field in the pack launch.

    Args:
        layout: the byte layout of the messages to other ranks.
        fields: CuPy arrays sent from, in the layout's field order.
        local: the layout of what this rank sends itself (a one-peer Layout whose boxes pair one to one), or None.
        destinations: the CuPy arrays received into, field for field (a transposition's); None: ``fields``.
        recv_buffer: a uint8 CuPy array of at least ``layout.recv_nbytes`` to receive into (a transport's own
            memory); None: one is allocated.
    """

    copies_data = True

    def __init__(
        self,
        layout: Layout,
        fields: Sequence[Any],
        local: Layout | None = None,
        destinations: Sequence[Any] | None = None,
        recv_buffer: Any = None,
    ) -> None:
        import cupy

        self.xp = cupy
        self.layout = layout
        received = fields if destinations is None else destinations
        self.send_buffer = device_allocation(layout.send_nbytes)
        self.recv_buffer = device_allocation(layout.recv_nbytes) if recv_buffer is None else recv_buffer
        self.local_nbytes = local.send_nbytes if local is not None else 0
        self.sources, self.destinations, self._local = list(fields), list(received), local
        self._tables(frozenset(), frozenset())
        self.stream: Any = None

    def leave_out(self, sends: Collection[int], recvs: Collection[int]) -> None:
        """Pack no send message of index in ``sends`` and unpack no receive message of index in ``recvs``: the
        transport moves those from and into the arrays themselves (``table.message_range``)."""
        self._tables(frozenset(sends), frozenset(recvs))

    def _tables(self, sends: frozenset[int], recvs: frozenset[int]) -> None:
        import cupy

        layout = self.layout
        pack = Descriptors(cupy)
        packed = [m for i, m in enumerate(layout.sends) if i not in sends]
        pack.messages(packed, layout.fields, self.sources, self.send_buffer.data.ptr, into=True)
        pack.local(self._local, self.sources, self.destinations)
        unpack = Descriptors(cupy)
        unpacked = [m for i, m in enumerate(layout.recvs) if i not in recvs]
        unpack.messages(unpacked, layout.fields, self.destinations, self.recv_buffer.data.ptr, into=False)
        self._pack, self._unpack = SegmentTable(pack), SegmentTable(unpack)

    def pack(self) -> None:
        """Enqueue the pack launch on ``self.stream`` (None: the current stream)."""
        self._pack.copy(self.stream)

    def unpack(self) -> None:
        """Enqueue the unpack launch on ``self.stream``."""
        self._unpack.copy(self.stream)

    def close(self) -> None:
        self._pack = self._unpack = None
