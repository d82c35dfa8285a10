"""The spectral-transform dwarf distributed over ranks: Legendre work by wavenumber, Fourier work by latitude
rows, and a transposition in between (gridcomm.Transposer), as in ECMWF's ectrans.

Each rank owns the wavenumbers ``wavenumber_sets(T, P)[rank]`` (spectral space: their coefficients, their Legendre
products over all rows) and the rows ``row_shares(nlon, P)[rank]`` (grid-point space: their points, their FFTs over
all wavenumbers; as many rows and points on every rank, in a few bands each). Between the halves the Fourier
coefficients F_m(row) move:

- inverse: (batch, my m, all rows) on the Legendre side -> (batch, all m, my rows) on the Fourier side, the
  m in rank order;
- direct: the way back.

The Legendre side is one flat buffer of blocks: per stage c (a run of this rank's Legendre products,
``pipeline``; one stage of all of them unpipelined), then per group g of rows and per rank q, the C-contiguous
(batch, my m of c, q's rows of g) array that goes to q (``operands.RowLayout``, one per stage), so that every
message is one contiguous range there, and one box of runs of c's m x my rows of g on the Fourier side (an array
per group; a 1-D range pairs with any box of as many elements, also for ipc's direct copies:
``packing.geometry.paired_grids``). The Legendre half reads and writes the blocks through the layouts' per-row
tables. One rank keeps the plain (batch, m, 2N) array, which is its Fourier side as well. Where ipc's kernel moves
the blocks, each transposition runs the pass before it instead (``peer_writes``): the inverse's unfold of the
Legendre products (left in the Legendre side's place of the blocks) and the direct's pick of the FFTs' coefficients
(left as the FFTs' half spectra) write straight into the rank that owns each element; the phases' times then count
that pass in the transposition.

On the GPU each phase is a few array operations per wavenumber bucket and per row length, each a kernel launch
that Python issues in about 10 µs: with ``graphs=True`` the FFT phases (N row lengths, a few launches each) and
the transpositions are captured once in CUDA graphs on the transform's own stream and replayed. The Legendre
phases stay as they are: CuPy refuses cuBLAS calls during a capture, and they are a few launches per bucket.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ....arguments import flag, whole_number
from ....arrays import resolve_array_module, to_host
from ....comm import Communicator
from ....device import HIGHEST_PRIORITY, cupy_or_none
from ....errors import ArgumentError, DeviceError, GridcommError
from ....graphs import capture
from ....grids.octahedral import OctahedralGrid
from ....pattern import Box
from ....transports import IpcTransport, requested
from . import peer_writes
from .distribution import row_groups, row_shares, wavenumber_sets
from .fourier import RowGeometry
from .operands import RowLayout
from .transform import ProductClock, SpectralTransform, check_truncation, coefficient_index

PHASES = ("legendre", "fft", "transposition")
#: Thread blocks of ipc's transposition kernel in a pipelined transform with graphs, where ``"ipc"`` is named or
#: picked by ``"auto"``, by the number of ranks (more than the largest listed: the last): its default, 6 per SM,
#: holds every SM while its blocks wait for the peers and copy, and the products it should hide behind wait for it.
#: On 2 x H200 (TCo639, 4 stages, ms per step; one run each, spectral-gpu-2r-20261127T105408Z and the call after
#: it): 64 blocks 35.2, 132 32.4, 264 31.2, 792 31.6; not pipelined 33.1. On 4 x H200 (8 x 2, the host running
#: ahead; spectral-gpu-4r-20261127T154827Z and ...T154855Z, one call): 132 blocks 16.41 and 16.46, 198 16.53 and
#: 16.93, 264 16.79 and 16.66; in the timeline probe of the call before (probe-spectral-timeline-gpu-4r-...T154654Z)
#: 66 17.73, 132 16.49, 264 16.78, 528 17.86.
PIPELINE_IPC_BLOCKS = {2: 264, 4: 132}
#: The pipeline of ``pipeline="auto"``: (stages of wavenumbers at most, groups of rows at most), where the
#: transpositions can overlap the Legendre products and the FFTs: every batched product its own stage where a rank
#: has no more (8 per rank for TCo639 on 2 or 4 GPUs: MAX_BUCKETS_GPU), and 2 groups of rows. TCo639 on 4 x H200
#: (ipc, ms per step, one call, spectral-gpu-4r-20261127T113911Z): 8 x 1 17.37, 8 x 2 16.78, 8 x 4 17.05, 4 x 4
#: 17.23; 8 groups of rows alone 17.75 (the pipeline before, ...T113923Z).
AUTO_PIPELINE = (8, 2)
#: ``DistributedTransform.inverse_lag``'s default by the number of ranks (as PIPELINE_IPC_BLOCKS): on 4 and more, group
#: g of rows moves 8 g Legendre stages late in the inverse, so with AUTO_PIPELINE's 8 stages the groups after the
#: first move once the last stage is done, beside the first group's FFTs. TCo639, 8 x 2, ms per step: on 4 x H100,
#: in three calls (probe-spectral-timeline-gpu-4r-20261127T194544Z, ...T194705Z, ...T195009Z) lag 0 18.56, 18.56,
#: 18.43, 18.51, 18.44, 18.41; 2: 18.39, 18.38, 18.30, 18.30, 18.36, 18.40; 4: 18.32, 18.31; 8: 18.26, 18.30,
#: 18.21, 18.20, 18.20 (on 4 x H200, before ipc's kernel ran on 132 blocks, holding them so took 17.75, 16.98 and
#: 16.28 ms against 17.10, 16.60 and 16.47). On 2 GPUs of a 4 x H100 machine
#: (probe-spectral-timeline-gpu-2r-20261127T195427Z) lag 0 32.54 and 32.60, 8 32.88 and 32.91: there the
#: transposition of each stage already hides behind the next.
INVERSE_LAG = {2: 0, 4: 8}
#: Whether the inverse's transpositions to the rows, where ipc's kernel runs them, unfold the Legendre products
#: straight into the Fourier sides (``peer_writes``; False: the Legendre stages unfold them into blocks, copied),
#: and whether the direct's to the wavenumbers pick the FFTs' coefficients straight into the Legendre sides (False:
#: the FFT groups pick them into the Fourier side, copied). TCo639 on 4 x H100, 8 x 2, ms per step in one call
#: (probe-spectral-timeline-gpu-4r-20261127T212608Z): both 17.29 and 17.27, the unfold alone 16.81, neither 18.19 and
#: 18.22: the pick, on the transpositions' 132 blocks, took 2.1 ms longer than their copies, and the compute waited.
#: On twice as many blocks (``peer_writes.PICK_BLOCKS``) both took 16.46 ms, the unfold alone 16.87 and 16.78
#: (...T212919Z).
UNFOLD_INTO_PEERS = True
PICK_INTO_PEERS = True


class DistributedTransform:
    """One rank's part of the spherical-harmonic transform of ``batch`` fields (collective construction).

    Args:
        comm: a gridcomm Communicator, an mpi4py communicator, or None for COMM_WORLD.
        grid: OctahedralGrid, name or N; truncation: T <= N - 1 (default N - 1).
        batch: fields times levels transformed together.
        transport: the Transposer's transport ("auto", a name or a configured Transport); one rank has no
            transposition: its Legendre and Fourier sides are one array, and ``transport`` is "none".
        xp: numpy, or cupy for arrays on this rank's current GPU (the Transposer then moves device arrays).
        graphs: (CuPy only) capture each phase in a CUDA graph on first use and replay it afterwards; a
            transposition whose transport needs the host (staged, mpi) runs as it is between the graphs.
        fft_streams: (CuPy) CUDA streams the row FFTs are spread over (SpectralTransform; default 4).
        pipeline: (stages, groups), or stages alone (groups 1): cut every rank's wavenumbers into at most ``stages``
            stages, runs of its batched Legendre products (``SpectralTransform.legendre_parts``), and its latitude rows
            into at most ``groups`` groups (``distribution.row_groups``: as many rows as points would say in each), as
            many of each on every rank; each (stage, group) is moved by a transposition of its own. With ``graphs`` the
            transpositions run on a stream of their own (the highest priority; ipc's kernel there, named or picked by
            ``"auto"``, runs on ``pipeline_ipc_blocks`` blocks): in the inverse each stage's transpositions run while
            the next stage's products do (group g's ``inverse_lag`` x g stages later), and the last stage's, group by
            group, while the FFTs of the groups already moved; in the direct each group's transpositions run while the
            next group's FFTs do, and the last group's, stage by stage, while the products of the stages already moved.
            In the inverse the stages of the shortest wavenumbers (the cheapest products) go first, so that the first
            transposition starts early, and in the direct the longest, so that the last products to wait for their
            transposition are the cheapest. The products and the row FFTs are the unpipelined transform's own, run in
            another order: the result is the same, bit for bit. Needs a transport a CUDA graph can replay (ipc, nccl).
            Overlapped (pipelined, or on one rank, with graphs), a transform only queues its work on the device: the
            host goes on (to the next transform, say) while the device works, and the caller's stream waits for what it
            returns. Without graphs, or with ``overlap`` False, the phases run one after the other, each timed (what a
            benchmark compares the overlap with). ``"auto"`` (the default): AUTO_PIPELINE with graphs on several ranks
            where the transport picked is one a CUDA graph replays, else (1, 1) (one transposition of everything).

    ``inverse(a)``: this rank's coefficients (batch, ncoef) -> its grid values (batch, points);
    ``direct(values)`` the reverse. ``seconds`` accumulates the time of each phase (PHASES) on this rank, and
    ``products`` (a ProductClock) the part of the Legendre phase spent in its matrix products (of the transforms
    whose phases did not overlap).
    With graphs, or pipelined, the arrays returned are the transform's own: the next ``inverse`` or ``direct``
    may overwrite them, so copy what must be kept. Handing them back as they are (``direct(inverse(a))``, or
    values updated in place) costs no copy with graphs.
    """

    def __init__(
        self,
        comm: Any,
        grid: OctahedralGrid | str | int,
        truncation: int | None = None,
        *,
        batch: int = 1,
        transport: str | Any = "auto",
        xp: Any = np,
        graphs: bool = False,
        fft_streams: int | None = None,
        pipeline: int | tuple[int, int] | str = "auto",
    ) -> None:
        batch = whole_number(batch, "batch", least=1)
        graphs = flag(graphs, "graphs")
        xp = resolve_array_module(xp, ArgumentError)
        if graphs and xp is np:
            raise ArgumentError("graphs=True captures CUDA graphs: pass xp=cupy (arrays on the GPU)")
        auto = isinstance(pipeline, str) and pipeline.strip() == "auto"
        pipeline = pipeline_shape(pipeline, graphs)

        self.comm = comm = Communicator.wrap(comm)
        grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
        t = check_truncation(truncation, grid)
        bands = row_shares(grid.nlon, comm.size)  # each rank's rows
        sets = wavenumber_sets(t, comm.size)
        m_order = np.concatenate(sets)  # the m along axis 1 of the Fourier side
        self.transform = SpectralTransform(
            grid,
            t,
            wavenumbers=sets[comm.rank],
            rows=bands[comm.rank],
            fourier_order=m_order,
            xp=xp,
            fft_streams=fft_streams,
        )
        self.grid, self.truncation, self.batch, self.xp = grid, t, batch, xp
        self.wavenumbers, self.rows = self.transform.wavenumbers, self.transform.rows
        self.m_order = m_order
        self.overlap = True
        #: Overlapped (pipelined, with graphs), how many Legendre stages late the inverse moves each group of rows
        #: after the first, times the group's index (at most until the last stage is done; by default INVERSE_LAG's
        #: for this many ranks; 0: every group of a stage right after it): the first group's rows then arrive
        #: sooner, and their FFTs run while the other groups still move.
        self.inverse_lag = _by_ranks(INVERSE_LAG, comm.size)
        #: A list to record what each stream runs when (``timeline_ms``), or None (the default: nothing recorded).
        self.timeline: list[tuple[str, str, Any, Any]] | None = None
        self._to_rows: dict[tuple[int, int], Any] = {}  # (stage, group) -> Transposer
        self._to_waves: dict[tuple[int, int], Any] = {}
        self._closed = False
        self._replays: dict[str, tuple[Any, Any]] = {}  # phase -> (graph, its output array)
        self.graphs = graphs
        if not self._arrange(bands, sets, pipeline, transport, need_graphs=auto and pipeline != (1, 1)):
            self._arrange(bands, sets, (1, 1), transport)  # "auto" picked a transport no graph replays
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.products = self.transform.product_clock = ProductClock(xp)
        if graphs:
            # The graphs' temporaries come from a pool of their own, so nothing else is ever handed memory a
            # graph writes; the compute graphs replay one after the other on one stream, so they may share
            # temporaries (a pipeline's transposition graphs, on a stream of their own, allocate none).
            self.stream = xp.cuda.Stream(non_blocking=True)
            self._pool = xp.cuda.MemoryPool()
            # One buffer each for the coefficients and the grid values, what the caller hands in and what the
            # transform hands out alike: a step that gives direct() the values inverse() returned, or inverse()
            # the coefficients direct() returned, copies nothing (TCo639 on 4 GPUs: 1.4 GB of values and 0.34 GB
            # of coefficients per rank and step).
            self._coefficients = xp.zeros((batch, self.transform.ncoef), dtype=np.complex128)
            self._values = xp.zeros((batch, self.transform.points), dtype=np.float64)
            # Where the caller's stream and the transform's meet (inverse and direct: no host synchronisation).
            self._handover = [xp.cuda.Event(block=False, disable_timing=True) for _ in range(2)]
            if self.pipeline > 1:
                # The stream the transpositions run on, and the events ordering the two streams. The highest
                # priority: a transposition's blocks start as soon as SMs free up, not after the compute's.
                self.transposition_stream = xp.cuda.Stream(non_blocking=True, priority=HIGHEST_PRIORITY)
                count = max(len(self.stages), len(self.groups))
                self._computed = [xp.cuda.Event(block=False, disable_timing=True) for _ in range(count)]
                self._moved = [xp.cuda.Event(block=False, disable_timing=True) for _ in range(count)]

    def _arrange(
        self,
        bands: list[np.ndarray],
        sets: list[np.ndarray],
        pipeline: tuple[int, int],
        transport: Any,
        need_graphs: bool = False,
    ) -> bool:
        """Cut every rank's wavenumbers into stages and its rows into groups (``pipeline``, at most), lay out both
        sides and make the transposers (collective). With ``need_graphs``, stop (closing what was made) and
        return False where the transport picked is one a CUDA graph does not replay."""
        comm, grid, batch, xp, t = self.comm, self.grid, self.batch, self.xp, self.truncation
        mine = len(self.wavenumbers)
        #: Per stage, this rank's wavenumbers in it: (first, stop) on its m axis (of the Legendre side).
        self.stages: list[tuple[int, int]] = [(0, mine)]
        #: Per group, this rank's rows in it (ascending).
        self.groups: list[np.ndarray] = [self.rows]
        #: How the Legendre side lies in memory, per stage (operands.RowLayout): None for the plain (batch, my m,
        #: 2N) array; and each stage's part of the flat buffer.
        self.layouts: list[RowLayout | None] = [None]
        self._group_transforms = [self.transform]
        #: Whether the transpositions to the rows unfold the Legendre products themselves, and those to the
        #: wavenumbers pick the FFTs' coefficients themselves (``peer_writes``).
        self.unfolds_into_peers = self.picks_into_peers = False
        # One rank holds every wavenumber on every row, in the same order on both sides: one array, no
        # transposition (on one H200 that saves two copies of 5.4 GB per TCo639 step, 5.5 ms of 64).
        if comm.size == 1:
            requested(transport)  # a wrong name is still an error
            self.legendre_side = xp.zeros((batch, mine, 2 * grid.N), dtype=np.complex128)
            self._fourier_sides = [self.legendre_side]
            self._regions = [self.legendre_side]
            return True
        # Every rank's products cut into as many stages, and its rows into as many groups, on every rank.
        everyone = comm.mpi.allgather(self.transform.legendre_parts(batch))
        staged = [_merged(parts, max(1, min(pipeline[0], *(len(p) for p in everyone)))) for parts in everyone]
        cut = [row_groups(band, grid.nlon, pipeline[1]) for band in bands]
        count = min(len(c) for c in cut)
        cut = cut if all(len(c) == count for c in cut) else [row_groups(band, grid.nlon, count) for band in bands]
        self.stages, self.groups = staged[comm.rank], cut[comm.rank]
        # The Legendre side as one flat buffer of blocks, per stage, then per group of rows and rank q the
        # C-contiguous (batch, my m of the stage, q's rows of the group) array that goes to q: each message is one
        # contiguous range of it.
        blocks = [rows[g] for g in range(count) for rows in cut]
        self.layouts = [RowLayout.blocked(batch, stop - first, blocks) for first, stop in self.stages]
        edges = np.concatenate([[0], np.cumsum([layout.size for layout in self.layouts])]).astype(np.int64)
        self.legendre_side = xp.zeros(int(edges[-1]), dtype=np.complex128)
        self._regions = [self.legendre_side[a:b] for a, b in itertools.pairwise(edges.tolist())]
        # Per group, the Fourier side of its rows (batch, all m, the group's rows), the m in rank order: an array
        # of its own, so that each group's FFTs read one contiguous array.
        self._fourier_sides = [xp.zeros((batch, t + 1, len(rows)), dtype=np.complex128) for rows in self.groups]
        if count > 1:
            self._group_transforms = self._fourier_groups()
        overlapped = self.graphs and len(self.stages) * count > 1  # ipc's kernel must leave the compute its SMs
        if overlapped and transport == "ipc":
            transport = IpcTransport(blocks=pipeline_ipc_blocks(comm.size))
        m_start = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
        moves = {}
        for c, layout in enumerate(self.layouts):
            for g, rows in enumerate(self.groups):
                spans = [layout.span(int(rows_q[g][0])) for rows_q in cut]  # q's block of group g
                on_legendre = {q: Box((int(edges[c]) + a,), (int(edges[c]) + b,)) for q, (a, b) in enumerate(spans)}
                on_fourier = {p: Box((0, int(m_start[p]) + parts[c][0], 0), (batch, int(m_start[p]) + parts[c][1],
                                     len(rows))) for p, parts in enumerate(staged)}  # fmt: skip
                moves[c, g] = (on_legendre, on_fourier)
        made = self._make_transposers(moves, transport, overlapped and transport == "auto", need_graphs)
        if made and self._write_into_peers(UNFOLD_INTO_PEERS, self._to_rows):
            self._unfold_into_peers(cut, int(m_start[comm.rank]))
        if made and self._write_into_peers(PICK_INTO_PEERS, self._to_waves):
            self._pick_into_peers(staged, cut, m_start)
        return made

    def _write_into_peers(self, wanted: bool, transposers: dict[tuple[int, int], Any]) -> bool:
        """Whether, ``wanted``, every rank's ``transposers`` are ipc kernel channels that a pass may run in place of
        their copies (``peer_writes``; none stages a block, none validates; collective)."""
        from mpi4py import MPI

        able = wanted and self.xp is not np and all(map(_writes_itself, transposers.values()))
        return self.comm.mpi.allreduce(able, op=MPI.LAND)

    def _unfold_into_peers(self, cut: list[list[np.ndarray]], m_first: int) -> None:
        """Have the transpositions to the rows unfold the Legendre products straight into the Fourier sides
        (``peer_writes``; ``m_first``: where this rank's wavenumbers start on their m axis), and the Legendre stages
        leave the products in their regions of the Legendre side instead of unfolding them."""
        for (c, g), transposer in self._to_rows.items():
            part = None if len(self.stages) == 1 else self.stages[c]  # one stage: every wavenumber, maybe none
            positions = self.transform.product_positions(self.batch, part)
            peer_writes.unfold_into(
                transposer.channel, self._regions[c], positions, [rows[g] for rows in cut], self._fourier_sides[g],
                -m_first, self.truncation + 1, (self.grid.N, self.batch),
            )  # fmt: skip
        self.unfolds_into_peers = True

    def _pick_into_peers(self, staged: list[list[tuple[int, int]]], cut: list[list[np.ndarray]], m_start: Any) -> None:
        """Have the transpositions to the wavenumbers pick the Fourier coefficients from the FFTs' half spectra
        straight into the Legendre sides (``peer_writes``), and the FFT groups leave them unpicked. ``staged``:
        every rank's stages, ``cut``: every rank's groups of rows, ``m_start``: where each rank's wavenumbers start
        on the Fourier sides' m axis."""
        shape = (self.batch, 2 * self.grid.N)
        for (c, g), transposer in self._to_waves.items():
            blocks = peer_writes.legendre_blocks(staged, cut, m_start, (self.comm.rank, g, c), shape)
            picking = self._group_transforms[g].pick_operands(self.batch, self.m_order)
            peer_writes.pick_into(transposer.channel, picking, blocks, self.legendre_side, self.batch)
        self.picks_into_peers = True

    def _make_transposers(
        self, moves: dict[tuple[int, int], tuple[dict, dict]], transport: Any, hold_ipc: bool = False,
        need_graphs: bool = False,
    ) -> bool:  # fmt: skip
        """One Transposer each way per (stage c, group g): ``moves[c, g]`` = (on the Legendre side, per rank q: my
        wavenumbers of c on q's rows of g; on the Fourier side, per rank p: p's wavenumbers of c on my rows of g)
        (collective; on an error every one made is closed first). ``transport``: one for both ways, or a pair (to
        rows, to waves). The later ones take what the first pair picked each way (``"auto"`` measures once, and
        every rank picks the same). With ``hold_ipc``, a way where ``"auto"`` picked ipc's kernel on as many
        blocks as it likes (measured on one transposition alone, where every SM is its own) is made again on
        ``pipeline_ipc_blocks`` blocks, as where ``"ipc"`` is named. With ``need_graphs``, where a way's transport is
        one a CUDA graph does not replay, every one made is closed and False returned."""
        from ....transpose import Transposer

        ways = transport if isinstance(transport, tuple) else (transport, transport)
        try:
            for k, ((c, g), (on_legendre, on_fourier)) in enumerate(moves.items()):
                if k == 1:  # the first pair's picks, each way
                    picked = (self._to_rows[0, 0].transport, self._to_waves[0, 0].transport)
                    if need_graphs and not all(way.graph_capturable for way in picked):
                        self._close_transposers()
                        return False
                    if hold_ipc and any(_unheld_ipc_kernel(way) for way in picked):
                        self._close_transposers()
                        held = IpcTransport(blocks=pipeline_ipc_blocks(self.comm.size))
                        return self._make_transposers(
                            moves, tuple(held if _unheld_ipc_kernel(w) else w for w in picked)
                        )
                    ways = picked
                sides = (self.legendre_side, self._fourier_sides[g])
                self._to_rows[c, g] = Transposer(self.comm, on_legendre, on_fourier, *sides, ways[0])
                self._to_waves[c, g] = Transposer(self.comm, on_fourier, on_legendre, *sides[::-1], ways[1])
        except BaseException:
            self.close()
            raise
        return True

    def _close_transposers(self) -> None:
        for transposer in (*self._to_rows.values(), *self._to_waves.values()):
            transposer.close()
        self._to_rows, self._to_waves = {}, {}

    def _fourier_groups(self) -> list[SpectralTransform]:
        """The Fourier half of each group of this rank's rows: no wavenumbers of its own (no Legendre tables),
        reading and writing its rows' points where they lie in grid values of all of this rank's rows."""
        starts = RowGeometry.of(self.grid.nlon[self.rows]).starts  # each of this rank's rows (ascending)
        return [
            SpectralTransform(
                self.grid, self.truncation, wavenumbers=np.zeros(0, np.int64), rows=rows,
                fourier_order=self.m_order, xp=self.xp, fft_streams=self.transform.fft_streams,
                values_layout=(starts[np.searchsorted(self.rows, rows)], self.transform.points),
            )
            for rows in self.groups
        ]  # fmt: skip

    @property
    def transport(self) -> str:
        """The name of the transport the transpositions use ("none" on one rank, which has none)."""
        return self._to_rows[0, 0].transport.name if self._to_rows else "none"

    @property
    def pipeline_shape(self) -> tuple[int, int]:
        """(stages of wavenumbers, groups of rows) transposed apart: (1, 1) all at once."""
        return len(self.stages), len(self.groups)

    @property
    def pipeline(self) -> int:
        """How many transpositions each way moves (stages x groups; 1: all at once)."""
        return len(self.stages) * len(self.groups)

    def _transpose(self, phase: str, transposer: Any, stream: Any = None) -> None:
        """Transposition ``phase`` by ``transposer`` (as a graph replay, on ``stream`` if given, where it can be
        captured)."""
        self._run(phase, transposer.exchange, transposer.transport.graph_capturable, stream)

    def _legendre_inverse(self, a: Any, c: int) -> None:
        """The Legendre products of stage ``c`` into its part of the Legendre side (a phase no graph captures)."""
        part = None if len(self.stages) == 1 else self.stages[c]
        inverse = functools.partial(
            self.transform.legendre_inverse, a, out=self._regions[c], layout=self.layouts[c], part=part,
            unfold=not self.unfolds_into_peers,
        )  # fmt: skip
        self._run(f"legendre inverse {c}", inverse, False)

    def _legendre_direct(self, out: Any, c: int) -> None:
        """The quadrature of stage ``c``'s wavenumbers into ``out`` (their coefficients alone)."""
        part = None if len(self.stages) == 1 else self.stages[c]
        direct = functools.partial(
            self.transform.legendre_direct, self._regions[c], out=out, layout=self.layouts[c], part=part
        )
        self._run(f"legendre direct {c}", direct, False)

    def _fft_inverse(self, values: Any, g: int) -> None:
        """The FFTs of group ``g``'s rows, into their points of ``values``."""
        half, fourier = self._group_transforms[g], self._fourier_sides[g]
        self._run(f"fft inverse {g}", lambda: half.fourier_inverse(fourier, self.m_order, out=values))

    def _fft_direct(self, values: Any, g: int) -> None:
        """The FFTs of group ``g``'s rows, from their points of ``values``."""
        half, fourier = self._group_transforms[g], self._fourier_sides[g]
        pick = not self.picks_into_peers
        self._run(f"fft direct {g}", lambda: half.fourier_direct(values, self.m_order, out=fourier, pick=pick))

    def _overlapped(self) -> bool:
        """Whether the phases are queued without the host waiting for any: with graphs and ``overlap``, pipelined
        (the transpositions on their own stream beside the compute) or on one rank (none)."""
        return self.overlap and self.runs_ahead

    @property
    def runs_ahead(self) -> bool:
        """Whether, with ``overlap``, a transform only queues its work on the device (``_overlapped``); with
        ``overlap`` False its phases still run one after the other, each timed."""
        return self.graphs and (self.pipeline > 1 or not self._to_rows)

    def inverse(self, coefficients: Any) -> Any:
        """This rank's coefficients (batch, ncoef) -> its grid values (batch, points)."""
        self._check_open()
        with self._on_stream():
            a = self._fixed(self._coefficients, coefficients) if self.graphs else coefficients
            values = self._values if self.graphs else self.xp.empty((self.batch, self.transform.points), np.float64)
            stages = range(len(self.stages) - 1, -1, -1)  # the cheapest products first
            self._phases(
                (functools.partial(self._legendre_inverse, a), "legendre", stages),
                ("to rows", self._to_rows, lambda c, g: (c, g)),
                (functools.partial(self._fft_inverse, values), "fft", range(len(self.groups))),
                self.inverse_lag,
            )
            return values

    def direct(self, values: Any) -> Any:
        """This rank's grid values (batch, points) -> its coefficients (batch, ncoef)."""
        self._check_open()
        with self._on_stream():
            v = self._fixed(self._values, values) if self.graphs else values
            shape = (self.batch, self.transform.ncoef)
            out = self._coefficients if self.graphs else self.xp.empty(shape, dtype=np.complex128)
            self._phases(
                (functools.partial(self._fft_direct, v), "fft", range(len(self.groups))),
                ("to waves", self._to_waves, lambda g, c: (c, g)),
                (functools.partial(self._legendre_direct, out), "legendre", range(len(self.stages))),  # dearest first
            )
            return out

    def _phases(
        self,
        first: tuple[Callable[[int], None], str, range],
        moves: tuple[str, dict[tuple[int, int], Any], Callable[[int, int], tuple[int, int]]],
        last: tuple[Callable[[int], None], str, range],
        lag: int = 0,
    ) -> None:
        """A transform's three phases: ``first`` (compute, phase name, its units: stages or groups), the
        transpositions (name, transposers by (stage, group), the key of (unit of first, unit of last)), ``last``
        (compute, name, its units). Overlapped (``_overlapped``): the transpositions of each unit of
        ``first`` run on ``transposition_stream`` once it is done, beside the next unit of ``first``; each unit of
        ``last`` waits for its last transposition, beside the transpositions still to come; the transpositions to
        unit j of ``last`` wait ``lag`` x j units of ``first`` longer (the inverse's ``inverse_lag``), so that the
        first units of ``last`` start sooner. (Groups of uneven sizes did not pay: docs/spectral.md.) Otherwise the
        phases run one after another, each unit timed."""
        (compute, phase, units), (name, transposers, key), (finish, end_phase, ends) = first, moves, last
        trace = self._traced
        if not self._overlapped():
            for u in units:
                with self._timed(phase), trace(f"{phase} {u}"):
                    compute(u)
            for u in units:
                for e in ends if transposers else ():
                    with self._timed("transposition"), trace(f"{name} {key(u, e)}", lane="transposition"):
                        self._transpose(f"{name} {key(u, e)}", transposers[key(u, e)])
            for e in ends:
                with self._timed(end_phase), trace(f"{end_phase} {e}"):
                    finish(e)
            return
        lane, stream = getattr(self, "transposition_stream", None), self.stream

        # Nothing here waits on the host: a unit of ``first`` whose launches the host issues one by one (the
        # Legendre stages) then runs while the device is still busy with what came before, at the device's pace.
        # By the index of the unit of ``first`` after which they are queued (unit i + j x ``lag``, or the last), the
        # transpositions (u, e) still to queue, as (index j of e in ``ends``, index i of u in ``units``, u, e): the
        # first units of ``last`` first.
        due: dict[int, list[tuple[int, int, int, int]]] = collections.defaultdict(list)
        for i, u in enumerate(units):
            with trace(f"{phase} {u}"):
                compute(u)
            if transposers:
                self._computed[u].record(stream)
                lane.wait_event(self._computed[u])
                for j, e in enumerate(ends):
                    due[min(i + j * lag, len(units) - 1)].append((j, i, u, e))
            for _, _, done, e in sorted(due.pop(i, ())):
                with trace(f"{name} {key(done, e)}", lane, "transposition"):
                    self._transpose(f"{name} {key(done, e)}", transposers[key(done, e)], lane)
                self._moved[e].record(lane)  # after the last unit of ``first``: all of e's transpositions done
        for e in ends:
            if transposers:
                stream.wait_event(self._moved[e])
            with trace(f"{end_phase} {e}"):
                finish(e)

    def _traced(self, label: str, stream: Any = None, lane: str = "compute") -> Any:
        """Where ``timeline`` is a list: a context recording CUDA events on ``stream`` (default: the current one)
        before and after what it holds, kept in ``timeline`` as (label, ``lane``, start, end) for
        ``timeline_ms``; else nothing."""
        if self.timeline is None or self.xp is np:
            return contextlib.nullcontext()
        return _Traced(self, label, stream, lane)

    def timeline_ms(self) -> list[dict[str, Any]]:
        """What ``timeline`` recorded (after the device is done with it): per span its label, its stream
        ("compute" or "transposition") and its start and end [ms] from the earliest start; ``timeline`` emptied."""
        spans, self.timeline = self.timeline or [], []
        if not spans:
            return []
        spans[-1][3].synchronize()
        elapsed = self.xp.cuda.get_elapsed_time
        origin = min(spans, key=lambda s: elapsed(spans[0][2], s[2]))[2]
        return [
            {"label": label, "stream": lane, "start_ms": elapsed(origin, a), "end_ms": elapsed(origin, b)}
            for label, lane, a, b in spans
        ]

    # -- CUDA graphs --------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _on_stream(self) -> Any:
        """With graphs: the transform's own stream made current, after the work the caller's stream queued (the
        arrays it hands in), and the caller's stream then made to wait for what the transform queued (the arrays
        it hands out), all on the device."""
        if not self.graphs:
            yield
            return
        caller, (given, done) = self.xp.cuda.get_current_stream(), self._handover
        given.record(caller)
        self.stream.wait_event(given)
        with self.stream:
            yield
        done.record(self.stream)
        caller.wait_event(done)

    @staticmethod
    def _fixed(buffer: Any, given: Any) -> Any:
        """``buffer`` holding ``given`` (a graph reads the same memory at every replay)."""
        if given is not buffer:
            buffer[...] = given
        return buffer

    def _run(self, phase: str, work: Callable[[], Any], capturable: bool = True, stream: Any = None) -> Any:
        """``work()``, or with graphs the replay of its graph on ``stream`` (default: the transform's), captured on
        the first call, after one run that makes its FFT plans, work arrays and pool blocks: the graph's output
        array is returned each time. A phase CuPy will not capture (NotImplementedError) runs as it is from then
        on."""
        if not (self.graphs and capturable):
            return work()
        if phase not in self._replays:
            self._replays[phase] = self._capture(work)
        replay = self._replays[phase]
        if replay is None:
            return work()
        graph, output = replay
        graph.launch(self.stream if stream is None else stream)
        return output

    def _capture(self, work: Callable[[], Any]) -> tuple[Any, Any] | None:
        """(graph, output array) of ``work`` captured on ``self.stream``, or None where CuPy refuses."""
        with self.xp.cuda.using_allocator(self._pool.malloc):
            work()
            self.stream.synchronize()
            try:  # launched on one stream or another: at that stream's priority
                return capture(self.stream, work, node_priorities=False)
            except NotImplementedError:  # e.g. a library call CuPy does not allow in a capture
                return None

    @property
    def captured(self) -> list[str]:
        """The phases replayed as CUDA graphs."""
        return sorted(phase for phase, replay in self._replays.items() if replay is not None)

    def local_coefficients(self, coefficients: Any) -> Any:
        """This rank's share (batch, ncoef) of global coefficients (batch, (T+1)(T+2)/2) in m-major order."""
        t = self.truncation
        index = np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in self.wavenumbers] or [[]])
        return self.xp.asarray(coefficients)[:, self.xp.asarray(index.astype(np.int64))]

    def _check_open(self) -> None:
        if self._closed:
            raise GridcommError("this DistributedTransform is closed; make a new one")

    def close(self) -> None:
        self._closed = True
        self._replays.clear()  # graphs first: they use the transposers' mappings (and NCCL waits for them)
        self._close_transposers()

    def __enter__(self) -> DistributedTransform:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _timed(self, phase: str) -> _Timer:
        return _Timer(self, phase)


class _Timer:
    def __init__(self, owner: DistributedTransform, phase: str) -> None:
        self.owner, self.phase = owner, phase

    def __enter__(self) -> None:
        _synchronize(self.owner.xp)
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        _synchronize(self.owner.xp)
        self.owner.seconds[self.phase] += time.perf_counter() - self.start


class _Traced:
    """Events around a span of work on a stream (DistributedTransform._traced)."""

    def __init__(self, owner: DistributedTransform, label: str, stream: Any, lane: str) -> None:
        self.owner, self.label, self.stream, self.lane = owner, label, stream, lane

    def __enter__(self) -> None:
        xp = self.owner.xp
        self.events = (xp.cuda.Event(), xp.cuda.Event())
        self.events[0].record(self.stream)

    def __exit__(self, *exc: object) -> None:
        self.events[1].record(self.stream)
        self.owner.timeline.append((self.label, self.lane, *self.events))


def pipeline_ipc_blocks(ranks: int) -> int:
    """Thread blocks of ipc's transposition kernel in a pipelined transform on ``ranks`` ranks (PIPELINE_IPC_BLOCKS)."""
    return _by_ranks(PIPELINE_IPC_BLOCKS, ranks)


def _by_ranks(table: dict[int, int], ranks: int) -> int:
    """``table``'s value for ``ranks`` ranks: that of the largest count listed up to ``ranks``, or of the smallest."""
    counts = sorted(table)
    return table[max((c for c in counts if c <= ranks), default=counts[0])]


def pipeline_shape(pipeline: int | tuple[int, int] | str, graphs: bool) -> tuple[int, int]:
    """(stages, groups) that ``pipeline`` asks for at most (DistributedTransform): a whole number of stages at least
    1 (one group), a pair of them, either as text ("8", "8x2": what the command line and the benchmarks pass), or
    ``"auto"``: AUTO_PIPELINE with ``graphs`` (where the transpositions can overlap the compute), else (1, 1)."""
    if isinstance(pipeline, str):
        text = pipeline.strip()
        if text == "auto":
            return AUTO_PIPELINE if graphs else (1, 1)
        numbers = text.split("x")
        if not (1 <= len(numbers) <= 2 and all(n.strip().isdigit() for n in numbers)):
            raise ArgumentError(
                f"pipeline={pipeline!r}: pass a whole number of stages, stages x groups of rows (a pair, or text "
                "such as '8x4'), or 'auto'"
            )
        pipeline = int(numbers[0]) if len(numbers) == 1 else (int(numbers[0]), int(numbers[1]))
    if isinstance(pipeline, tuple | list) and len(pipeline) == 2:
        stages, groups = pipeline
    else:
        stages, groups = pipeline, 1
    meaning = "stages of wavenumbers whose transpositions overlap the Legendre products of the others"
    stages = whole_number(stages, "pipeline", least=1, meaning=meaning)
    groups = whole_number(groups, "pipeline's groups", least=1, meaning="groups of latitude rows")
    return stages, groups


def _merged(parts: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """``parts`` (runs of wavenumbers, in order) merged into ``count`` runs of as many parts as they allow."""
    cuts = np.array_split(np.arange(len(parts)), count)
    return [(int(parts[run[0]][0]), int(parts[run[-1]][1])) for run in cuts]


def _unheld_ipc_kernel(transport: Any) -> bool:
    """Whether ``transport`` is ipc's kernel on as many blocks as it likes."""
    return isinstance(transport, IpcTransport) and transport.method == "kernel" and transport.blocks is None


def _writes_itself(transposer: Any) -> bool:
    """Whether ``transposer``'s exchanges can be run by a kernel of the dwarf's (``peer_writes``): one ipc kernel
    channel, staging nothing, no validation (which checks the blocks the copies read)."""
    try:
        channel = transposer.channel
    except GridcommError:  # peers served by several transports
        return False
    return hasattr(channel, "write_with") and not channel.stages and not transposer.validate


def _synchronize(xp: Any) -> None:
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def round_trip_error(comm: Communicator, back: np.ndarray, a: np.ndarray) -> float:
    """How far ``back`` = direct(inverse(a)) came from ``a`` (host arrays): the largest |back - a| over the
    largest |a|, each over every rank of ``comm`` (0 where every a is 0). Collective."""
    from mpi4py import MPI

    error = comm.mpi.allreduce(float(np.max(np.abs(back - a), initial=0.0)), op=MPI.MAX)
    scale = comm.mpi.allreduce(float(np.max(np.abs(a), initial=0.0)), op=MPI.MAX)
    return error / scale if scale else 0.0


def random_coefficients(truncation: int, ms: np.ndarray, batch: int, seed: int = 0) -> np.ndarray:
    """Coefficients (batch, sum over ms of T - m + 1) of real fields, drawn per wavenumber m from a generator
    seeded by (seed, m): the same global coefficients on any number of ranks. Amplitudes fall as 1 / (l + 1)."""
    runs = []
    for m in ms:
        rng = np.random.default_rng([seed, int(m)])
        n = truncation - int(m) + 1
        run = rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))
        run /= np.arange(m + 1, truncation + 2)
        if m == 0:
            run = run.real.astype(np.complex128)
        runs.append(run)
    return np.concatenate(runs, axis=1) if runs else np.zeros((batch, 0), dtype=np.complex128)


def run_spectral(
    comm: Any,
    grid: str | int | OctahedralGrid = "O160",
    *,
    truncation: int | None = None,
    levels: int = 10,
    fields: int = 3,
    steps: int = 20,
    transport: str = "auto",
    gpu: bool = False,
    graphs: bool | None = None,
    fft_streams: int | None = None,
    pipeline: int | tuple[int, int] | str = "auto",
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` of (inverse + direct) transforms of ``fields`` fields on ``levels`` levels plus a surface
    field, distributed over the ranks of ``comm`` (collective). With ``gpu`` the arrays live on each rank's
    current GPU (CuPy; call ``gridcomm.gpu.use_local_gpu`` first): the coefficients are drawn on the host, moved
    there once, and the error is measured back on the host; ``graphs`` (default: with ``gpu``) replays each
    phase as a CUDA graph, and ``fft_streams`` spreads the row FFTs over that many streams
    (DistributedTransform). Where a transform runs ahead of the host (``DistributedTransform.runs_ahead``: with
    graphs, pipelined or on one rank) the steps are timed twice: the phases one after another, each timed (the
    split), then queued without the host waiting for the device, the transpositions overlapping the compute (the
    time per step).

    Returns, on every rank: the round-trip error (largest |a - direct(inverse(a))| over largest |a|, all ranks),
    the time per step of the slowest rank [s], its split per phase (``split_s``: legendre, fft, transposition;
    seconds per step, each phase on its own slowest rank, so they may add up to more than the step), the slowest
    rank's own split (``slowest_rank``, ``slowest_rank_split_s``: the phases and ``other``, the time between
    them, adding up to its step), ``legendre_products_s`` (the slowest rank's seconds per step in the Legendre phase's
    matrix products alone; the rest of that phase moves their operands), ``gpu``, and the GPUs' energy per step
    [J] (``joules_per_step``, None off the GPU; ``energy``: gridcomm.lab.measure.energy's record), measured after the
    timed steps over steps of its own that last at least ``lab.measure.energy.ENERGY_REGION_S``."""
    grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
    levels, fields, steps = (
        whole_number(v, k, least=1) for v, k in ((levels, "levels"), (fields, "fields"), (steps, "steps"))
    )
    xp = _array_module(gpu)
    graphs = gpu if graphs is None else graphs
    batch = fields * levels + 1
    options = {"batch": batch, "transport": transport, "xp": xp, "graphs": graphs, "fft_streams": fft_streams,
               "pipeline": pipeline}  # fmt: skip
    with DistributedTransform(comm, grid, truncation, **options) as dist:
        comm = dist.comm
        host = random_coefficients(dist.truncation, dist.wavenumbers, batch)
        a = xp.asarray(host)
        pipelined = dist.runs_ahead  # the phases can be queued without the host waiting, and overlap
        for overlap in (True, False) if pipelined else (True,):
            dist.overlap = overlap  # warm-up steps: caches, first touch of work arrays, connections, FFT plans
            dist.direct(dist.inverse(a))

        def timed_steps(count: int, done: int = 0) -> tuple[float, Any]:
            """Seconds of ``count`` steps (the last ends synchronised with the device) and the last step's result."""
            comm.mpi.Barrier()
            start, back = time.perf_counter(), None
            for step in range(count):
                back = dist.direct(dist.inverse(a))
                if progress is not None:
                    progress(done + step + 1, (2 if pipelined else 1) * steps)
            _synchronize(xp)  # the caller's stream: it waits for the transform's (DistributedTransform._on_stream)
            return time.perf_counter() - start, back

        dist.seconds = dict.fromkeys(PHASES, 0.0)
        dist.products.reset()
        elapsed, back = timed_steps(steps)  # pipelined: the stages one phase after the other, each phase timed
        # The split is of these steps alone: the overlapped steps below time their Legendre phase too (it runs
        # the same way), which added it twice to the split of every pipelined run before 2026-11-26.
        sequential, products, split_seconds = elapsed, dist.products.seconds(), dict(dist.seconds)
        if pipelined:
            dist.overlap = True
            elapsed, back = timed_steps(steps, steps)
        mpi = comm.mpi
        from mpi4py import MPI

        timed = {
            "grid": grid.name,
            "truncation": dist.truncation,
            "points": grid.size,
            "ranks": comm.size,
            "levels": levels,
            "fields": fields,
            "batch": batch,
            "steps": steps,
            "gpu": gpu,
            "graphs": dist.captured,
            "fft_streams": dist.transform.fft_streams,
            "transport": dist.transport,
            "round_trip_error": round_trip_error(comm, to_host(back), host),
            **_splits(mpi, sequential, split_seconds, steps),  # pipelined: of the steps one phase after another
            "time_per_step_s": mpi.allreduce(elapsed, op=MPI.MAX) / steps,
            "legendre_products_s": mpi.allreduce(products, op=MPI.MAX) / steps,
            "pipeline": dist.pipeline,
            "pipeline_shape": list(dist.pipeline_shape),  # (stages of wavenumbers, groups of rows)
            # Run ahead: the same steps with the phases one after the other (where the split comes from).
            "sequential_step_s": mpi.allreduce(sequential, op=MPI.MAX) / steps if pipelined else None,
        }
        # The transposition time left over once the compute is done: the step beyond Legendre and FFT together.
        split = timed["split_s"]
        timed["exposed_transposition_s"] = max(0.0, timed["time_per_step_s"] - split["legendre"] - split["fft"])
        from ...measure.energy import GPUS_ONLY, Energy, energy_of_steps

        if not gpu:
            return {**timed, "joules_per_step": None, "energy": Energy(None, 0.0, 0, GPUS_ONLY).as_dict()}

        def run_steps(count: int) -> None:  # the last step ends synchronised with the device
            for _ in range(count):
                dist.direct(dist.inverse(a))
            _synchronize(xp)

        # Energy over steps of their own, at least ENERGY_REGION_S of them: NVML's counter moves every few tens
        # of ms, so the few steps timed above (13 ms each at O640, batch 31) would read as nothing or a jump.
        energy, region_steps = energy_of_steps(comm, run_steps, timed["time_per_step_s"])
        return {
            **timed,
            "joules_per_step": energy.per(region_steps),
            "energy": {**energy.as_dict(), "steps": region_steps},
        }


def _splits(mpi: Any, elapsed: float, seconds: dict[str, float], steps: int) -> dict[str, Any]:
    """Collective: the step time of the slowest rank and the split of the steps into phases [s per step], as
    ``run_spectral`` returns them (``elapsed``: this rank's seconds for ``steps`` steps; ``seconds``: its
    seconds per phase). Each phase on its own slowest rank (``split_s``) tells where the ranks wait; the
    slowest rank's own split (with ``other``, what no phase timed) adds up to the step."""
    everyone = mpi.allgather((elapsed, dict(seconds)))
    slowest = max(range(len(everyone)), key=lambda r: everyone[r][0])
    step, own = everyone[slowest]
    return {
        "time_per_step_s": step / steps,
        "split_s": {k: max(s[k] for _, s in everyone) / steps for k in seconds},
        "slowest_rank": slowest,
        "slowest_rank_split_s": {
            **{k: v / steps for k, v in own.items()},
            "other": max(step - sum(own.values()), 0.0) / steps,
        },
    }


def _array_module(gpu: bool) -> Any:
    """numpy, or cupy when ``gpu`` (a DeviceError naming what is missing when it cannot be had)."""
    if not gpu:
        return np
    cupy = cupy_or_none()
    if cupy is None:
        raise DeviceError("the spectral dwarf on the GPU needs CuPy: pip install 'gridcomm[gpu]'")
    return cupy
