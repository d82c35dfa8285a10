"""The spectral-transform dwarf distributed over ranks: Legendre work by wavenumber, Fourier work by latitude
band, and a transposition in between (gridcomm.Transposer), as in ECMWF's ectrans.

Each rank owns the wavenumbers ``wavenumber_sets(T, P)[rank]`` (spectral space: their coefficients, their
Legendre products over all rows) and the rows ``row_bands(nlon, P)[rank]`` (grid-point space: their points,
their FFTs over all wavenumbers). Between the halves the Fourier coefficients F_m(row) move:

- inverse: (batch, my m, all rows) on the Legendre side -> (batch, all m, my rows) on the Fourier side, the
  m in rank order (every block is then one contiguous slab on both sides);
- direct: the way back.

On the GPU each phase is a few array operations per wavenumber bucket and per row length, each a kernel launch
that Python issues in about 10 µs: with ``graphs=True`` the FFT phases (N row lengths, a few launches each) and
the transpositions are captured once in CUDA graphs on the transform's own stream and replayed. The Legendre
phases stay as they are: CuPy refuses cuBLAS calls during a capture, and they are a few launches per bucket.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...arguments import flag, whole_number
from ...arrays import cupy_or_none, resolve_array_module, to_host
from ...comm import Communicator
from ...errors import ArgumentError, DeviceError, GridcommError
from ...grids.octahedral import OctahedralGrid
from ...pattern import Box
from ...transports import requested
from .distribution import row_bands, wavenumber_sets
from .transform import ProductClock, SpectralTransform, check_truncation, coefficient_index

PHASES = ("legendre", "fft", "transposition")


class DistributedTransform:
    """One rank's part of the spherical-harmonic transform of ``batch`` fields (collective construction).

    Args:
        comm: a gridcomm Communicator, an mpi4py communicator, or None for COMM_WORLD.
        grid: OctahedralGrid, name or N; truncation: T <= N - 1 (default N - 1).
        batch: fields times levels transformed together.
        transport: the Transposer's transport ("auto" or a name); one rank has no transposition: its Legendre
            and Fourier sides are one array, and ``transport`` is "none".
        xp: numpy, or cupy for arrays on this rank's current GPU (the Transposer then moves device arrays).
        graphs: (CuPy only) capture each phase in a CUDA graph on first use and replay it afterwards; a
            transposition whose transport needs the host (staged, mpi) runs as it is between the graphs.
        fft_streams: (CuPy) CUDA streams the row FFTs are spread over (SpectralTransform; default 4).

    ``inverse(a)``: this rank's coefficients (batch, ncoef) -> its grid values (batch, points);
    ``direct(values)`` the reverse. ``seconds`` accumulates the time of each phase (PHASES) on this rank, and
    ``products`` (a ProductClock) the part of the Legendre phase spent in its matrix products.
    With graphs, the arrays returned are the graphs' own outputs: the next ``inverse`` (``direct``) overwrites
    them, so copy what must be kept.
    """

    def __init__(
        self,
        comm: Any,
        grid: OctahedralGrid | str | int,
        truncation: int | None = None,
        *,
        batch: int = 1,
        transport: str = "auto",
        xp: Any = np,
        graphs: bool = False,
        fft_streams: int | None = None,
    ) -> None:
        from ...transpose import Transposer

        batch = whole_number(batch, "batch", least=1)
        graphs = flag(graphs, "graphs")
        xp = resolve_array_module(xp, ArgumentError)
        if graphs and xp is np:
            raise ArgumentError("graphs=True captures CUDA graphs: pass xp=cupy (arrays on the GPU)")

        self.comm = comm = Communicator.wrap(comm)
        grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
        t = check_truncation(truncation, grid)
        bands = row_bands(grid.nlon, comm.size)
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
        m_start = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
        n_rows, mine = 2 * grid.N, len(self.wavenumbers)
        self.legendre_side = xp.zeros((batch, mine, n_rows), dtype=np.complex128)
        # One rank holds every wavenumber on every row, in the same order on both sides: one array, no
        # transposition (on one H200 that saves two copies of 5.4 GB per TCo639 step, 5.5 ms of 64).
        if comm.size == 1:
            requested(transport)  # a wrong name is still an error
            self.fourier_side = self.legendre_side
            self._to_rows = self._to_waves = None
        else:
            self.fourier_side = xp.zeros((batch, t + 1, len(self.rows)), dtype=np.complex128)
            # Rank q's rows of my wavenumbers <-> rank p's wavenumbers on my rows.
            on_legendre = {q: Box((0, 0, int(b[0])), (batch, mine, int(b[-1]) + 1)) for q, b in enumerate(bands)}
            on_fourier = {
                p: Box((0, int(m_start[p]), 0), (batch, int(m_start[p + 1]), len(self.rows))) for p in range(comm.size)
            }
            sides = (self.legendre_side, self.fourier_side)
            self._to_rows = Transposer(comm, on_legendre, on_fourier, *sides, transport)
            self._to_waves = Transposer(comm, on_fourier, on_legendre, *sides[::-1], transport)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.products = self.transform.product_clock = ProductClock(xp)
        self._closed = False
        self.graphs = graphs
        self._replays: dict[str, tuple[Any, Any]] = {}  # phase -> (graph, its output array)
        if graphs:
            # The graphs' temporaries come from a pool of their own, so nothing else is ever handed memory a
            # graph writes; the graphs replay one after the other on one stream, so they may share temporaries.
            self.stream = xp.cuda.Stream(non_blocking=True)
            self._pool = xp.cuda.MemoryPool()
            self._coefficients_in = xp.zeros((batch, self.transform.ncoef), dtype=np.complex128)
            self._values_in = xp.zeros((batch, self.transform.points), dtype=np.float64)

    @property
    def transport(self) -> str:
        """The name of the transport the transpositions use ("none" on one rank, which has none)."""
        return "none" if self._to_rows is None else self._to_rows.transport.name

    def _transpose(self, phase: str, transposer: Any) -> None:
        """Transposition ``phase`` by ``transposer`` (as a graph replay where it can be captured); nothing on one
        rank."""
        if transposer is not None:
            self._run(phase, transposer.exchange, transposer.transport.graph_capturable)

    def inverse(self, coefficients: Any) -> Any:
        """This rank's coefficients (batch, ncoef) -> its grid values (batch, points)."""
        self._check_open()
        transform = self.transform
        with self._on_stream():
            with self._timed("legendre"):
                a = self._fixed(self._coefficients_in, coefficients) if self.graphs else coefficients
                self._run("legendre inverse", lambda: transform.legendre_inverse(a, out=self.legendre_side), False)
            with self._timed("transposition"):
                self._transpose("to rows", self._to_rows)
            with self._timed("fft"):
                return self._run("fft inverse", lambda: transform.fourier_inverse(self.fourier_side, self.m_order))

    def direct(self, values: Any) -> Any:
        """This rank's grid values (batch, points) -> its coefficients (batch, ncoef)."""
        self._check_open()
        transform = self.transform
        with self._on_stream():
            with self._timed("fft"):
                v = self._fixed(self._values_in, values) if self.graphs else values
                self._run("fft direct", lambda: transform.fourier_direct(v, self.m_order, out=self.fourier_side))
            with self._timed("transposition"):
                self._transpose("to waves", self._to_waves)
            with self._timed("legendre"):
                return self._run("legendre direct", lambda: transform.legendre_direct(self.legendre_side), False)

    # -- CUDA graphs --------------------------------------------------------------------------------------

    def _on_stream(self) -> Any:
        return self.stream if self.graphs else contextlib.nullcontext()

    @staticmethod
    def _fixed(buffer: Any, given: Any) -> Any:
        """``buffer`` holding ``given`` (a graph reads the same memory at every replay)."""
        if given is not buffer:
            buffer[...] = given
        return buffer

    def _run(self, phase: str, work: Callable[[], Any], capturable: bool = True) -> Any:
        """``work()``, or with graphs the replay of its graph (captured on the first call, after one run that
        makes its FFT plans, work arrays and pool blocks): the graph's output array is returned each time. A
        phase CuPy will not capture (NotImplementedError) runs as it is from then on."""
        if not (self.graphs and capturable):
            return work()
        if phase not in self._replays:
            self._replays[phase] = self._capture(work)
        replay = self._replays[phase]
        if replay is None:
            return work()
        graph, output = replay
        graph.launch(self.stream)
        return output

    def _capture(self, work: Callable[[], Any]) -> tuple[Any, Any] | None:
        """(graph, output array) of ``work`` captured on ``self.stream``, or None where CuPy refuses."""
        with self.xp.cuda.using_allocator(self._pool.malloc):
            work()
            self.stream.synchronize()
            self.stream.begin_capture()
            try:
                output = work()
            except NotImplementedError:  # e.g. a library call CuPy does not allow in a capture
                with contextlib.suppress(Exception):
                    self.stream.end_capture()
                return None
            except BaseException:
                with contextlib.suppress(Exception):
                    self.stream.end_capture()
                raise
            return self.stream.end_capture(), output

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
        for transposer in (self._to_rows, self._to_waves):
            if transposer is not None:
                transposer.close()

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
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` of (inverse + direct) transforms of ``fields`` fields on ``levels`` levels plus a surface
    field, distributed over the ranks of ``comm`` (collective). With ``gpu`` the arrays live on each rank's
    current GPU (CuPy; call ``gridcomm.gpu.use_local_gpu`` first): the coefficients are drawn on the host, moved
    there once, and the error is measured back on the host; ``graphs`` (default: with ``gpu``) replays each
    phase as a CUDA graph, and ``fft_streams`` spreads the row FFTs over that many streams
    (DistributedTransform).

    Returns, on every rank: the round-trip error (largest |a - direct(inverse(a))| over largest |a|, all ranks),
    the time per step of the slowest rank [s], its split per phase (``split_s``: legendre, fft, transposition;
    seconds per step, each phase on its own slowest rank, so they may add up to more than the step), the slowest
    rank's own split (``slowest_rank``, ``slowest_rank_split_s``: the phases and ``other``, the time between
    them, adding up to its step), ``legendre_products_s`` (the slowest rank's seconds per step in the Legendre phase's
    matrix products alone; the rest of that phase moves their operands), ``gpu``, and the GPUs' energy per step
    [J] (``joules_per_step``, None off the GPU; ``energy``: gridcomm.bench.energy's record), measured after the
    timed steps over steps of its own that last at least ``bench.energy.ENERGY_REGION_S``."""
    grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
    levels, fields, steps = (
        whole_number(v, k, least=1) for v, k in ((levels, "levels"), (fields, "fields"), (steps, "steps"))
    )
    xp = _array_module(gpu)
    graphs = gpu if graphs is None else graphs
    batch = fields * levels + 1
    options = {"batch": batch, "transport": transport, "xp": xp, "graphs": graphs, "fft_streams": fft_streams}
    with DistributedTransform(comm, grid, truncation, **options) as dist:
        comm = dist.comm
        host = random_coefficients(dist.truncation, dist.wavenumbers, batch)
        a = xp.asarray(host)
        dist.direct(dist.inverse(a))  # warm-up step: caches, first touch of work arrays, connections, FFT plans
        dist.seconds = dict.fromkeys(PHASES, 0.0)
        dist.products.reset()
        comm.mpi.Barrier()
        start = time.perf_counter()
        for step in range(steps):
            values = dist.inverse(a)
            back = dist.direct(values)
            if progress is not None:
                progress(step + 1, steps)
        elapsed = time.perf_counter() - start  # each phase ends synchronised with the device (_Timer)
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
            **_splits(mpi, elapsed, dist.seconds, steps),
            "legendre_products_s": mpi.allreduce(dist.products.seconds(), op=MPI.MAX) / steps,
        }
        from ...bench.energy import GPUS_ONLY, Energy, energy_of_steps

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
