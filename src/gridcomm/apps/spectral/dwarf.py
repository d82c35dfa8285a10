"""The spectral-transform dwarf distributed over ranks: Legendre work by wavenumber, Fourier work by latitude
band, and a transposition in between (gridcomm.Transposer), as in ECMWF's ectrans.

Each rank owns the wavenumbers ``wavenumber_sets(T, P)[rank]`` (spectral space: their coefficients, their
Legendre products over all rows) and the rows ``row_bands(nlon, P)[rank]`` (grid-point space: their points,
their FFTs over all wavenumbers). Between the halves the Fourier coefficients F_m(row) move:

- inverse: (batch, my m, all rows) on the Legendre side -> (batch, all m, my rows) on the Fourier side, the
  m in rank order (every block is then one contiguous slab on both sides);
- direct: the way back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...grids.octahedral import OctahedralGrid
from ...pattern import Box
from .distribution import row_bands, wavenumber_sets
from .transform import SpectralTransform, coefficient_index

PHASES = ("legendre", "fft", "transposition")


class DistributedTransform:
    """One rank's part of the spherical-harmonic transform of ``batch`` fields (collective construction).

    Args:
        comm: a gridcomm Communicator.
        grid: OctahedralGrid, name or N; truncation: T <= N - 1 (default N - 1).
        batch: fields times levels transformed together.
        transport: the Transposer's transport ("auto" or a name).
        xp: numpy (cupy on the GPU, with the GPU half of the Transposer).

    ``inverse(a)``: this rank's coefficients (batch, ncoef) -> its grid values (batch, points);
    ``direct(values)`` the reverse. ``seconds`` accumulates the time of each phase (PHASES) on this rank.
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
    ) -> None:
        from ...transpose import Transposer

        self.comm = comm
        grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
        t = grid.N - 1 if truncation is None else int(truncation)
        bands = row_bands(grid.nlon, comm.size)
        sets = wavenumber_sets(t, comm.size) if 0 <= t <= grid.N - 1 else None
        self.transform = SpectralTransform(
            grid, t, wavenumbers=None if sets is None else sets[comm.rank], rows=bands[comm.rank], xp=xp
        )
        self.grid, self.truncation, self.batch, self.xp = grid, t, batch, xp
        self.wavenumbers, self.rows = self.transform.wavenumbers, self.transform.rows
        self.m_order = np.concatenate(sets)  # the m along axis 1 of the Fourier side
        m_start = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
        n_rows, mine = 2 * grid.N, len(self.wavenumbers)
        self.legendre_side = xp.zeros((batch, mine, n_rows), dtype=np.complex128)
        self.fourier_side = xp.zeros((batch, t + 1, len(self.rows)), dtype=np.complex128)
        # Rank q's rows of my wavenumbers <-> rank p's wavenumbers on my rows.
        on_legendre = {q: Box((0, 0, int(b[0])), (batch, mine, int(b[-1]) + 1)) for q, b in enumerate(bands)}
        on_fourier = {
            p: Box((0, int(m_start[p]), 0), (batch, int(m_start[p + 1]), len(self.rows))) for p in range(comm.size)
        }
        self._to_rows = Transposer(comm, on_legendre, on_fourier, self.legendre_side, self.fourier_side, transport)
        self._to_waves = Transposer(comm, on_fourier, on_legendre, self.fourier_side, self.legendre_side, transport)
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @property
    def transport(self) -> str:
        """The name of the transport the transpositions use."""
        return self._to_rows.transport.name

    def inverse(self, coefficients: Any) -> Any:
        """This rank's coefficients (batch, ncoef) -> its grid values (batch, points)."""
        with self._timed("legendre"):
            self.legendre_side[...] = self.transform.legendre_inverse(coefficients)
        with self._timed("transposition"):
            self._to_rows.exchange()
        with self._timed("fft"):
            return self.transform.fourier_inverse(self.fourier_side, wavenumbers=self.m_order)

    def direct(self, values: Any) -> Any:
        """This rank's grid values (batch, points) -> its coefficients (batch, ncoef)."""
        with self._timed("fft"):
            self.fourier_side[...] = self.transform.fourier_direct(values, wavenumbers=self.m_order)
        with self._timed("transposition"):
            self._to_waves.exchange()
        with self._timed("legendre"):
            return self.transform.legendre_direct(self.legendre_side)

    def local_coefficients(self, coefficients: Any) -> Any:
        """This rank's share (batch, ncoef) of global coefficients (batch, (T+1)(T+2)/2) in m-major order."""
        t = self.truncation
        index = np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in self.wavenumbers] or [[]])
        return self.xp.asarray(coefficients)[:, self.xp.asarray(index.astype(np.int64))]

    def close(self) -> None:
        self._to_rows.close()
        self._to_waves.close()

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
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` of (inverse + direct) transforms of ``fields`` fields on ``levels`` levels plus a surface
    field, distributed over the ranks of ``comm`` (collective). Returns, on every rank: the round-trip error
    (largest |a - direct(inverse(a))| over largest |a|, all ranks), the time per step of the slowest rank and
    its split (legendre, fft, transposition; seconds per step, the slowest rank per phase)."""
    grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
    if levels < 1 or fields < 1 or steps < 1:
        raise ValueError(f"levels, fields and steps must be at least 1, got {levels}, {fields}, {steps}")
    batch = fields * levels + 1
    with DistributedTransform(comm, grid, truncation, batch=batch, transport=transport) as dist:
        a = random_coefficients(dist.truncation, dist.wavenumbers, batch)
        values = dist.inverse(a)  # warm-up: caches, first-touch, connections
        dist.seconds = dict.fromkeys(PHASES, 0.0)
        comm.mpi.Barrier()
        start = time.perf_counter()
        for step in range(steps):
            values = dist.inverse(a)
            back = dist.direct(values)
            if progress is not None:
                progress(step + 1, steps)
        elapsed = time.perf_counter() - start
        error = float(np.max(np.abs(back - a), initial=0.0))
        scale = float(np.max(np.abs(a), initial=0.0))
        mpi = comm.mpi
        from mpi4py import MPI

        return {
            "grid": grid.name,
            "truncation": dist.truncation,
            "points": grid.size,
            "ranks": comm.size,
            "levels": levels,
            "fields": fields,
            "batch": batch,
            "steps": steps,
            "transport": dist.transport,
            "round_trip_error": mpi.allreduce(error, op=MPI.MAX) / mpi.allreduce(scale, op=MPI.MAX),
            "time_per_step_s": mpi.allreduce(elapsed, op=MPI.MAX) / steps,
            "split_s": {k: mpi.allreduce(v, op=MPI.MAX) / steps for k, v in dist.seconds.items()},
        }
