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
``pipeline``; one stage of all of them unpipelined) and then per rank q, the C-contiguous (batch, my m of c, q's
rows) array that goes to q (``operands.RowLayout``, one per stage), so that every message is one contiguous range
there, and one box of runs of c's m x my rows on the Fourier side (a 1-D range pairs with any box of as many
elements, also for ipc's direct copies: ``packing.geometry.paired_grids``). The Legendre half reads and writes the
blocks through the layouts' per-row tables. One rank keeps the plain (batch, m, 2N) array, which is its Fourier
side as well.

On the GPU each phase is a few array operations per wavenumber bucket and per row length, each a kernel launch
that Python issues in about 10 µs: with ``graphs=True`` the FFT phases (N row lengths, a few launches each) and
the transpositions are captured once in CUDA graphs on the transform's own stream and replayed. The Legendre
phases stay as they are: CuPy refuses cuBLAS calls during a capture, and they are a few launches per bucket.
"""

from __future__ import annotations

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
from .distribution import row_shares, wavenumber_sets
from .operands import RowLayout
from .transform import ProductClock, SpectralTransform, check_truncation, coefficient_index

PHASES = ("legendre", "fft", "transposition")
#: Thread blocks of ipc's transposition kernel in a pipelined transform with graphs, where ``"ipc"`` is named or
#: picked by ``"auto"``: its default, 6 per SM, holds every SM while its blocks wait for the peers and copy, and the
#: products it should hide behind wait for it. On 2 x H200 (TCo639, 4 stages, ms per step; one run each,
#: spectral-gpu-2r-20261127T105408Z and the call after it): 64 blocks 35.2, 132 32.4, 264 31.2, 792 31.6;
#: not pipelined 33.1.
PIPELINE_IPC_BLOCKS = 264
#: Stages of ``pipeline="auto"`` at most, where the transpositions can overlap the Legendre products: every batched
#: product its own stage where a rank has no more (8 per rank for TCo639 on 2 or 4 GPUs: MAX_BUCKETS_GPU).
AUTO_PIPELINE = 8


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
        pipeline: cut every rank's wavenumbers into at most this many stages, runs of its batched Legendre
            products (``SpectralTransform.legendre_parts``; as many stages on every rank), each moved by a
            transposition of its own: with ``graphs`` the transposition of a stage runs on a stream of its own
            (the highest priority; ipc's kernel there, named or picked by ``"auto"``, runs on PIPELINE_IPC_BLOCKS
            blocks) while the products of another stage run, so that the transpositions hide behind the Legendre
            phase (the FFTs, which need every wavenumber of a row, come after it in the inverse and before it in
            the direct transform). In the inverse the stages of the shortest wavenumbers (the cheapest products)
            go first, so that the first transposition starts early, and in the direct the longest, so that the
            last products to wait for their transposition are the cheapest. The products are the unpipelined
            transform's own, run in another order: the result is the same, bit for bit. Needs a transport a CUDA
            graph can replay (ipc, nccl). Without graphs, or with ``overlap`` False, the stages run one phase
            after the other, each phase timed (what a benchmark compares the overlap with). ``"auto"`` (the
            default): AUTO_PIPELINE stages at most with graphs on several ranks where the transport picked is one
            a CUDA graph replays, else 1 (one transposition of every wavenumber).

    ``inverse(a)``: this rank's coefficients (batch, ncoef) -> its grid values (batch, points);
    ``direct(values)`` the reverse. ``seconds`` accumulates the time of each phase (PHASES) on this rank, and
    ``products`` (a ProductClock) the part of the Legendre phase spent in its matrix products, and
    ``overlapped_seconds`` the time of the transforms whose phases overlapped.
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
        pipeline: int | str = "auto",
    ) -> None:
        batch = whole_number(batch, "batch", least=1)
        graphs = flag(graphs, "graphs")
        xp = resolve_array_module(xp, ArgumentError)
        if graphs and xp is np:
            raise ArgumentError("graphs=True captures CUDA graphs: pass xp=cupy (arrays on the GPU)")
        auto = pipeline == "auto"
        pipeline = pipeline_groups(pipeline, graphs)

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
        self.overlapped_seconds = 0.0
        self._to_rows: list[Any] = []
        self._to_waves: list[Any] = []
        self._closed = False
        self._replays: dict[str, tuple[Any, Any]] = {}  # phase -> (graph, its output array)
        self.graphs = graphs
        if not self._arrange(bands, sets, pipeline, transport, need_graphs=auto and pipeline > 1):
            self._arrange(bands, sets, 1, transport)  # "auto" picked a transport no graph replays
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.products = self.transform.product_clock = ProductClock(xp)
        stages = self.pipeline
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
        if stages > 1 and graphs:
            # The stream the stages' transpositions run on, and the events ordering the two streams. The highest
            # priority: a transposition's blocks start as soon as SMs free up, not after the products'.
            self.transposition_stream = xp.cuda.Stream(non_blocking=True, priority=HIGHEST_PRIORITY)
            self._computed = [xp.cuda.Event(block=False, disable_timing=True) for _ in range(stages)]
            self._moved = [xp.cuda.Event(block=False, disable_timing=True) for _ in range(stages)]

    def _arrange(
        self, bands: list[np.ndarray], sets: list[np.ndarray], pipeline: int, transport: Any, need_graphs: bool = False
    ) -> bool:
        """Cut every rank's wavenumbers into ``pipeline`` stages at most, lay out both sides and make the
        transposers (collective). With ``need_graphs``, stop (closing what was made) and return False where the
        transport picked is one a CUDA graph does not replay."""
        comm, batch, xp, t = self.comm, self.batch, self.xp, self.truncation
        mine = len(self.wavenumbers)
        #: Per stage, this rank's wavenumbers in it: (first, stop) on its m axis (of the Legendre side).
        self.stages: list[tuple[int, int]] = [(0, mine)]
        #: How the Legendre side lies in memory, per stage (operands.RowLayout): None for the plain (batch, my m,
        #: 2N) array; and each stage's part of the flat buffer.
        self.layouts: list[RowLayout | None] = [None]
        # One rank holds every wavenumber on every row, in the same order on both sides: one array, no
        # transposition (on one H200 that saves two copies of 5.4 GB per TCo639 step, 5.5 ms of 64).
        if comm.size == 1:
            requested(transport)  # a wrong name is still an error
            self.legendre_side = xp.zeros((batch, mine, 2 * self.grid.N), dtype=np.complex128)
            self.fourier_side = self.legendre_side
            self._regions = [self.legendre_side]
            return True
        # Every rank's products, cut into as many stages on every rank.
        everyone = comm.mpi.allgather(self.transform.legendre_parts(batch))
        count = max(1, min(pipeline, *(len(parts) for parts in everyone)))
        staged = [_merged(parts, count) for parts in everyone]
        self.stages = staged[comm.rank]
        # The Legendre side as one flat buffer of blocks, per stage and then per rank q the C-contiguous
        # (batch, my m of the stage, q's rows) array that goes to q: each message is one contiguous range of it.
        self.layouts = [RowLayout.blocked(batch, stop - first, bands) for first, stop in self.stages]
        edges = np.concatenate([[0], np.cumsum([layout.size for layout in self.layouts])]).astype(np.int64)
        self.legendre_side = xp.zeros(int(edges[-1]), dtype=np.complex128)
        self._regions = [self.legendre_side[a:b] for a, b in itertools.pairwise(edges.tolist())]
        # The Fourier side (batch, all m, my rows), the m in rank order.
        self.fourier_side = xp.zeros((batch, t + 1, len(self.rows)), dtype=np.complex128)
        overlapped = count > 1 and self.graphs  # ipc's kernel must leave the products their SMs
        if overlapped and transport == "ipc":
            transport = IpcTransport(blocks=PIPELINE_IPC_BLOCKS)
        m_start = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
        rows = len(self.rows)
        boxes = [
            (
                {q: Box((int(edges[c]) + a,), (int(edges[c]) + b,)) for q, (a, b) in enumerate(_spans(layout, bands))},
                {p: Box((0, int(m_start[p]) + parts[c][0], 0), (batch, int(m_start[p]) + parts[c][1], rows))
                 for p, parts in enumerate(staged)},
            )
            for c, layout in enumerate(self.layouts)
        ]  # fmt: skip
        return self._make_transposers(boxes, transport, overlapped and transport == "auto", need_graphs)

    def _make_transposers(
        self, boxes: list[tuple[dict, dict]], transport: Any, hold_ipc: bool = False, need_graphs: bool = False
    ) -> bool:
        """One Transposer each way per stage: ``boxes[c]`` = (on the Legendre side, per rank q: my wavenumbers of
        stage c on q's rows; on the Fourier side, per rank p: p's wavenumbers of stage c on my rows) (collective;
        on an error every one made is closed first). ``transport``: one for both ways, or a pair (to rows, to
        waves). The later stages take what the first stage's transposers picked each way (``"auto"`` measures
        once, and every rank picks the same). With ``hold_ipc``, a way where ``"auto"`` picked ipc's kernel on as
        many blocks as it likes (measured on one transposition alone, where every SM is its own) is made again on
        PIPELINE_IPC_BLOCKS blocks, as where ``"ipc"`` is named. With ``need_graphs``, where a way's transport is
        one a CUDA graph does not replay, every one made is closed and False returned."""
        from ....transpose import Transposer

        ways = transport if isinstance(transport, tuple) else (transport, transport)
        try:
            for c, (on_legendre, on_fourier) in enumerate(boxes):
                if c == 1:  # the first stage's picks, each way
                    picked = (self._to_rows[0].transport, self._to_waves[0].transport)
                    if need_graphs and not all(way.graph_capturable for way in picked):
                        self._close_transposers()
                        return False
                    if hold_ipc and any(_unheld_ipc_kernel(way) for way in picked):
                        self._close_transposers()
                        held = IpcTransport(blocks=PIPELINE_IPC_BLOCKS)
                        return self._make_transposers(
                            boxes, tuple(held if _unheld_ipc_kernel(w) else w for w in picked)
                        )
                    ways = picked
                sides = (self.legendre_side, self.fourier_side)
                self._to_rows.append(Transposer(self.comm, on_legendre, on_fourier, *sides, ways[0]))
                self._to_waves.append(Transposer(self.comm, on_fourier, on_legendre, *sides[::-1], ways[1]))
        except BaseException:
            self.close()
            raise
        return True

    def _close_transposers(self) -> None:
        for transposer in (*self._to_rows, *self._to_waves):
            transposer.close()
        self._to_rows, self._to_waves = [], []

    @property
    def transport(self) -> str:
        """The name of the transport the transpositions use ("none" on one rank, which has none)."""
        return self._to_rows[0].transport.name if self._to_rows else "none"

    @property
    def pipeline(self) -> int:
        """How many stages of wavenumbers are transposed apart (1: all at once)."""
        return len(self.stages)

    def _transpose(self, phase: str, transposer: Any, stream: Any = None) -> None:
        """Transposition ``phase`` by ``transposer`` (as a graph replay, on ``stream`` if given, where it can be
        captured)."""
        self._run(phase, transposer.exchange, transposer.transport.graph_capturable, stream)

    def _legendre_inverse(self, a: Any, c: int) -> None:
        """The Legendre products of stage ``c`` into its part of the Legendre side (a phase no graph captures)."""
        part = None if self.pipeline == 1 else self.stages[c]
        inverse = functools.partial(
            self.transform.legendre_inverse, a, out=self._regions[c], layout=self.layouts[c], part=part
        )
        self._run(f"legendre inverse {c}", inverse, False)

    def _legendre_direct(self, out: Any, c: int) -> None:
        """The quadrature of stage ``c``'s wavenumbers into ``out`` (their coefficients alone)."""
        part = None if self.pipeline == 1 else self.stages[c]
        direct = functools.partial(
            self.transform.legendre_direct, self._regions[c], out=out, layout=self.layouts[c], part=part
        )
        self._run(f"legendre direct {c}", direct, False)

    def inverse(self, coefficients: Any) -> Any:
        """This rank's coefficients (batch, ncoef) -> its grid values (batch, points)."""
        self._check_open()
        transform = self.transform
        with self._on_stream():
            a = self._fixed(self._coefficients, coefficients) if self.graphs else coefficients
            if self.pipeline > 1:  # the cheapest products first: the first transposition starts soonest
                order = range(self.pipeline - 1, -1, -1)
                self._pipelined(order, (functools.partial(self._legendre_inverse, a), "legendre"), "to rows", None)
            else:
                with self._timed("legendre"):
                    self._legendre_inverse(a, 0)
                if self._to_rows:
                    with self._timed("transposition"):
                        self._transpose("to rows", self._to_rows[0])
            with self._timed("fft"):
                out = self._values if self.graphs else None
                return self._run(
                    "fft inverse", lambda: transform.fourier_inverse(self.fourier_side, self.m_order, out=out)
                )

    def direct(self, values: Any) -> Any:
        """This rank's grid values (batch, points) -> its coefficients (batch, ncoef)."""
        self._check_open()
        transform = self.transform
        with self._on_stream():
            v = self._fixed(self._values, values) if self.graphs else values
            with self._timed("fft"):
                self._run("fft direct", lambda: transform.fourier_direct(v, self.m_order, out=self.fourier_side))
            shape = (self.batch, transform.ncoef)
            out = self._coefficients if self.graphs else self.xp.empty(shape, dtype=np.complex128)
            if self.pipeline > 1:  # the dearest products first: the last to wait for its transposition is cheapest
                order = range(self.pipeline)
                self._pipelined(order, None, "to waves", (functools.partial(self._legendre_direct, out), "legendre"))
                return out
            if self._to_waves:
                with self._timed("transposition"):
                    self._transpose("to waves", self._to_waves[0])
            with self._timed("legendre"):
                self._legendre_direct(out, 0)
            return out

    # -- the pipeline ----------------------------------------------------------------------------------------

    def _pipelined(
        self,
        order: range,
        before: tuple[Callable[[int], None], str] | None,
        name: str,
        after: tuple[Callable[[int], None], str] | None,
    ) -> None:
        """Per stage c, in ``order``: ``before(c)`` (compute, if any), its transposition (``name``: "to rows" or
        "to waves"), ``after(c)`` (compute, if any), each with its phase name. Overlapped (graphs and
        ``overlap``): the transposition of stage c runs on ``transposition_stream`` once ``before(c)`` is done,
        while the next stage's ``before`` or the previous stage's ``after`` run on the transform's stream, and
        ``after(c)`` waits for it. Otherwise the stages run one phase after the other, each phase timed."""
        moves = self._to_rows if name == "to rows" else self._to_waves
        if not (self.graphs and self.overlap):
            for c in order:
                if before is not None:
                    with self._timed(before[1]):
                        before[0](c)
                with self._timed("transposition"):
                    self._transpose(f"{name} {c}", moves[c])
                if after is not None:
                    with self._timed(after[1]):
                        after[0](c)
            return
        lane, stream = self.transposition_stream, self.stream
        _synchronize(self.xp)
        start = time.perf_counter()
        previous = None
        for c in order:
            if before is not None:
                before[0](c)
            self._computed[c].record(stream)
            lane.wait_event(self._computed[c])
            self._transpose(f"{name} {c}", moves[c], lane)
            self._moved[c].record(lane)
            if after is not None and previous is not None:
                stream.wait_event(self._moved[previous])
                after[0](previous)
            previous = c
        stream.wait_event(self._moved[previous])  # every transposition is in before what follows
        if after is not None:
            after[0](previous)
        _synchronize(self.xp)
        self.overlapped_seconds += time.perf_counter() - start

    # -- CUDA graphs --------------------------------------------------------------------------------------

    def _on_stream(self) -> Any:
        return self.stream if self.graphs else contextlib.nullcontext()

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


def pipeline_groups(pipeline: int | str, graphs: bool) -> int:
    """The stages that ``pipeline`` asks for at most (DistributedTransform): a whole number at least 1, or
    ``"auto"``: AUTO_PIPELINE with ``graphs`` (where the transpositions can overlap the products), else 1."""
    if pipeline == "auto":
        return AUTO_PIPELINE if graphs else 1
    if isinstance(pipeline, str):
        raise ArgumentError(f"pipeline={pipeline!r}: pass a whole number of stages (at least 1) or 'auto'")
    meaning = "stages of wavenumbers whose transpositions overlap the Legendre products of the others"
    return whole_number(pipeline, "pipeline", least=1, meaning=meaning)


def _merged(parts: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """``parts`` (runs of wavenumbers, in order) merged into ``count`` runs of as many parts as they allow."""
    cuts = np.array_split(np.arange(len(parts)), count)
    return [(int(parts[run[0]][0]), int(parts[run[-1]][1])) for run in cuts]


def _spans(layout: RowLayout, bands: list[np.ndarray]) -> list[tuple[int, int]]:
    """(start, stop) in ``layout``'s buffer [elements] of each band's block of rows."""
    return [layout.span(int(band[0])) for band in bands]


def _unheld_ipc_kernel(transport: Any) -> bool:
    """Whether ``transport`` is ipc's kernel on as many blocks as it likes."""
    return isinstance(transport, IpcTransport) and transport.method == "kernel" and transport.blocks is None


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
    pipeline: int | str = "auto",
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` of (inverse + direct) transforms of ``fields`` fields on ``levels`` levels plus a surface
    field, distributed over the ranks of ``comm`` (collective). With ``gpu`` the arrays live on each rank's
    current GPU (CuPy; call ``gridcomm.gpu.use_local_gpu`` first): the coefficients are drawn on the host, moved
    there once, and the error is measured back on the host; ``graphs`` (default: with ``gpu``) replays each
    phase as a CUDA graph, and ``fft_streams`` spreads the row FFTs over that many streams
    (DistributedTransform). Pipelined (``pipeline`` stages, with graphs) the steps are timed twice: the stages one
    phase after the other (the split), then with each stage's transposition overlapping the other stages'
    Legendre products (the time per step).

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
        pipelined = dist.pipeline > 1 and dist.graphs  # the transpositions can overlap the FFTs
        for overlap in (True, False) if pipelined else (True,):
            dist.overlap = overlap  # warm-up steps: caches, first touch of work arrays, connections, FFT plans
            dist.direct(dist.inverse(a))

        def timed_steps(count: int, done: int = 0) -> tuple[float, Any]:
            """Seconds of ``count`` steps (each ends synchronised with the device) and the last step's result."""
            comm.mpi.Barrier()
            start, back = time.perf_counter(), None
            for step in range(count):
                back = dist.direct(dist.inverse(a))
                if progress is not None:
                    progress(done + step + 1, (2 if pipelined else 1) * steps)
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
            # Pipelined: the same steps with the stages one phase after the other (where the split comes from).
            "sequential_step_s": mpi.allreduce(sequential, op=MPI.MAX) / steps if pipelined else None,
        }
        # The transposition time left over once the compute is done: the step beyond Legendre and FFT together.
        split = timed["split_s"]
        timed["exposed_transposition_s"] = max(0.0, timed["time_per_step_s"] - split["legendre"] - split["fft"])
        from ...measure.energy import GPUS_ONLY, Energy, energy_of_steps

        if not gpu:
            return {**timed, "joules_per_step": None, "energy": Energy(None, 0.0, 0, GPUS_ONLY).as_dict()}

        def run_steps(count: int) -> None:  # each step ends synchronised with the device (_Timer)
            for _ in range(count):
                dist.direct(dist.inverse(a))

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
