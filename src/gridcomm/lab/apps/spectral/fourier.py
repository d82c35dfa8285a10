"""The Fourier half of the spherical-harmonic transform: per latitude row, between the Fourier coefficients F_m
(batch, m, rows) and the grid values (batch, points), by a real FFT of the row's own length.

The half spectra of all rows lie side by side in one (batch, bins) array, row r's n_r / 2 + 1 bins from
``bin_offsets[r]``. A row of n points cannot hold m >= n / 2: those wavenumbers fold (alias) onto bin m mod n
(or its mirror), which the octahedral grid keeps small, as it must for T = N - 1 (on O640 their lambda_l^m reach
2.3e-5 near the poles, against 7.1 for the largest; they are kept, not dropped).

- inverse: *fold* (each bin of each row is the sum of the F_m and conj F_m landing on it, a short list per bin:
  ``FoldingPlan``), then per row an inverse real FFT from its bins straight into its points;
- direct: per row a real FFT from its points into its bins, then *pick* (the bin holding each F_m on each row,
  scaled by 1 / n and conjugated where it holds conj F_m).

On the host, fold and pick are NumPy gathers and the FFTs ``numpy.fft``. On the GPU, fold and pick are one
kernel launch each (``fourier.cu``, transposing through shared memory; the fold stages every m of a few rows
at once, so that a short row's folded terms are read from shared memory), and each row is one cuFFT call that
reads and writes the rows where they lie (its distance between fields is the points per field: no copy of the
grid values), one plan per row length shared by the rows of that length. That call is a *complex* FFT of half
the row's length: a row of n = 2h real points is h complex points x_2j + i x_2j+1, and its half spectrum follows
from theirs by one multiplication by the twiddles exp(2 pi i k / n) per bin, which the fold and the pick do as
they pass (``fourier.cu``; every row length of the octahedral grid is a multiple of 4). On one H100 (O640, batch
412, both rows of each length, ``benchmarks/tune_fft.py --per-length``, tune-fft-gpu-1r-20261127T090707Z) cuFFT's
complex transforms of half length took 13.4 ms per direction over the 640 row lengths against 17.1 ms for its real
transforms of full length. The rows are spread over a few CUDA streams by length (rows sharing a plan share its
work area, so they share a stream): as parallel branches of a CUDA graph, the small FFTs of different lengths
overlap. cuFFT per row length is what bounds the phase: on one H200 (O640, batch 412), cuFFT's real transforms
alone over the 640 row lengths took 15.5 ms per direction, 16.5 % of the HBM copy bandwidth for the fewest bytes
the phase must move.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import itertools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .... import kernels
from ....arguments import whole_number
from ....errors import ArgumentError

#: CUDA streams the GPU's row FFTs are spread over by default: on one H200 (O640, batch 412) one stream took
#: 23.3 ms per direction and four 14.7 ms, as CUDA graph replays.
GPU_FFT_STREAMS = 4
SOURCE = Path(__file__).with_name("fourier.cu")
TILE = 32  # fourier.cu's tile side (the pick)
THREADS = 256  # per block: 32 x 8 for the pick
BATCH_PER_BLOCK = 4  # fields a block does in turn (its index loads then hit L1)
#: The fold's shape (fourier.cu): rows per block at most, threads per block, fields per block, and shared memory
#: per block where a row of staged wavenumbers is smaller [bytes]. The fold of pairs of bins (for the half-length
#: complex FFTs) took 5.26-5.33 ms on one H100 (O640, batch 412) with 2 rows (24 KiB), 256 threads and 1 field,
#: against 5.69-5.90 ms with 4 rows (48 KiB) and 512 threads and 5.8-6.6 ms in 3 other shapes, in three runs
#: (``benchmarks/tune_fft.py``, tune-fft-gpu-1r-20261127T092610Z, ...T092407Z, ...T094503Z). The fold of single
#: bins before it was fastest with 4 rows and 512 threads: 3.32 ms on one H200 (...20261124T075953Z), against
#: 5.78 ms for the 32 x 32 tiles it replaced (...20261123T174002Z).
FOLD_GROUP = 8
FOLD_THREADS = 256
FOLD_BATCH_PER_BLOCK = 1
FOLD_SHARED_BYTES = 24 * 1024
DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory every launch may use without opting in
#: Plans kept per batch size seen (a transform usually sees one): cuFFT plans hold work areas on the device.
_BATCHES_KEPT = 2
#: Threads that make a transform's cuFFT plans, one per row length and direction, at its first run: cuFFT takes
#: about 20 ms to plan each of the awkward lengths (640 plans for O320 took 13 s one after another).
PLAN_THREADS = 8


@dataclass(frozen=True)
class RowGeometry:
    """Where each row lies: ``lengths`` (rows,) points, ``starts`` (rows,) its first point in the grid values,
    ``bin_offsets`` (rows + 1,) its first bin in the half spectra; ``bins`` all bins together."""

    lengths: np.ndarray
    starts: np.ndarray
    bin_offsets: np.ndarray

    @classmethod
    def of(cls, lengths: np.ndarray, first_point: int | np.ndarray = 0) -> RowGeometry:
        """Rows of ``lengths`` points one after the other in the grid values, from point ``first_point``; or,
        where ``first_point`` is an array, each row from its own first point."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if np.ndim(first_point):
            starts = np.asarray(first_point, dtype=np.int64)
        else:
            starts = first_point + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        bin_offsets = np.concatenate([[0], np.cumsum(lengths // 2 + 1)]).astype(np.int64)
        return cls(lengths, starts, bin_offsets)

    @property
    def bins(self) -> int:
        return int(self.bin_offsets[-1])


@dataclass(frozen=True)
class FoldingPlan:
    """The index arrays of both steps for one order of the M wavenumbers along the m axis.

    Fold: bin j of the half spectra sums the terms ``codes[first[j]:first[j + 1]]`` (at least one each), a code
    c meaning F_c for c < M, conj F_(c - M) for M <= c < 2M, and zero for c = 2M, all on the bin's row
    (``flat_terms``, host only: the same as positions in the host's (batch, (2M + 1) x rows) array of terms).
    ``simple`` (rows,) uint8 is 1 where each bin k of the row has the one term ``direct[k]``, ``direct`` (widest
    row's bins,) int32 being the position of m = k, or 2M where no m = k is there: every m of such a row lies
    below n / 2, so its pick is bin m scaled by 1 / n (``inverse_lengths``, (rows,)), and the GPU's fold and pick
    read no per-bin or per-m index arrays for it (``ms``, (M,) int32, the m at each position).
    Pick: ``picks`` the bin holding F_m on each row; ``factors`` what its real and imaginary parts are multiplied
    by, 1 / n and +-1 / n (- where the bin holds conj F_m, m mod n > n / 2): on the host (M, rows) and
    (M, 2 rows); on the GPU transposed, (rows, M) and (rows, 2M), as its kernel reads them.
    """

    first: Any
    codes: Any
    flat_terms: Any
    conjugates: bool
    picks: Any
    factors: Any
    simple: Any
    direct: Any
    ms: Any
    inverse_lengths: Any


def folding_table(ms: np.ndarray, length: int) -> list[np.ndarray]:
    """The codes (see FoldingPlan) adding up to each bin k = 0..n/2 of a row of n = ``length`` points.

    The row's full spectrum holds F_m at bin m mod n and, for m > 0, conj F_m (the -m of a real field) at bin
    -m mod n; the inverse real FFT implies the bins past n/2 from those below. Every m < n/2 lands on its own
    bin (one term); larger m fold onto bins that other m hold too (several terms); a bin no m reaches is zero.
    """
    count, half = len(ms), length // 2
    position = np.arange(count)
    direct, mirror = ms % length, (-ms) % length
    own, conjugate = direct <= half, (ms > 0) & (mirror <= half)
    bins = np.concatenate([direct[own], mirror[conjugate]])
    codes = np.concatenate([position[own], position[conjugate] + count])
    order = np.argsort(bins, kind="stable")
    bins, codes = bins[order], codes[order]
    split = np.searchsorted(bins, np.arange(half + 2))
    zero = np.array([2 * count])
    return [codes[a:b] if b > a else zero for a, b in itertools.pairwise(split)]


def plan_folding(rows: RowGeometry, ms: np.ndarray, xp: Any) -> FoldingPlan:
    """The fold and pick index arrays (FoldingPlan) for wavenumbers ``ms`` on ``rows``, on the device of ``xp``."""
    count, nrows = len(ms), len(rows.lengths)
    tables = {int(n): folding_table(ms, int(n)) for n in np.unique(rows.lengths)}
    per_bin = [codes for n in rows.lengths for codes in tables[int(n)]]
    sizes = np.array([len(c) for c in per_bin], dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    codes = np.concatenate(per_bin).astype(np.int64)
    bin_row = np.repeat(np.arange(nrows), rows.lengths // 2 + 1)
    picks = np.zeros((count, nrows), dtype=np.int64)
    factors = np.zeros((count, nrows, 2))  # (real, imaginary) per m and row
    for n in np.unique(rows.lengths):
        on = np.flatnonzero(rows.lengths == n)
        residue = ms % n
        upper = residue > n // 2  # bin n - residue holds conj F_m
        bins = np.where(upper, n - residue, residue)
        picks[:, on] = rows.bin_offsets[on][None, :] + bins[:, None]
        factors[:, on, 0] = 1.0 / n
        factors[:, on, 1] = np.where(upper, -1.0 / n, 1.0 / n)[:, None]
    on_gpu = xp is not np
    direct = np.full(int(np.max(rows.lengths, initial=0)) // 2 + 1, 2 * count, dtype=np.int32)
    within = ms < len(direct)
    direct[ms[within]] = np.flatnonzero(within)
    simple_length = {
        n: all(len(c) == 1 for c in table) and np.array_equal(np.concatenate(table), direct[: len(table)])
        for n, table in tables.items()
    }
    simple = np.array([simple_length[int(n)] for n in rows.lengths], dtype=np.uint8)
    return FoldingPlan(
        first=xp.asarray(first),
        codes=xp.asarray(codes.astype(np.int32)) if on_gpu else None,
        flat_terms=None if on_gpu else codes * nrows + np.repeat(bin_row, sizes),
        conjugates=bool(np.any((codes >= count) & (codes < 2 * count))),
        picks=xp.asarray(np.ascontiguousarray(picks.T) if on_gpu else picks),
        factors=xp.asarray(
            np.ascontiguousarray(factors.swapaxes(0, 1)).reshape(nrows, 2 * count)
            if on_gpu
            else factors.reshape(count, 2 * nrows)
        ),
        simple=xp.asarray(simple),
        direct=xp.asarray(direct),
        ms=xp.asarray(ms.astype(np.int32)),
        inverse_lengths=xp.asarray(1.0 / rows.lengths),
    )


class RowFFTs:
    """The Fourier half over ``rows`` for arrays of module ``xp``: fold, the row FFTs and pick (module doc).

    Args:
        rows: the rows' geometry.
        xp: numpy or cupy.
        streams: (CuPy) CUDA streams the row FFTs are spread over, forked from and joined back to the caller's
            stream (default GPU_FFT_STREAMS); ignored on the host.
    """

    def __init__(self, rows: RowGeometry, xp: Any, streams: int | None = None) -> None:
        self.rows, self.xp = rows, xp
        self.on_gpu = xp is not np
        if self.on_gpu and (np.any(rows.lengths % 2) or np.any(rows.starts % 2)):
            raise ArgumentError(
                "the GPU's row FFTs read a row's points in pairs: every row needs an even length and an even first "
                f"point (lengths {np.unique(rows.lengths % 2)} mod 2, first points {np.unique(rows.starts % 2)} mod 2)"
            )
        streams = GPU_FFT_STREAMS if streams is None else whole_number(streams, "fft_streams", least=1)
        self._lanes = [xp.cuda.Stream(non_blocking=True) for _ in range(streams)] if self.on_gpu and streams > 1 else []
        # Rows of one length share a cuFFT plan and its work area, so they share a lane (run one after another).
        lengths, lane_of = np.unique(rows.lengths, return_inverse=True)
        self._lane_of = lane_of.reshape(-1).tolist()
        self._lengths = lengths.tolist()  # each row length once: a cuFFT plan per length and direction
        self._bin_offsets = xp.asarray(rows.bin_offsets) if self.on_gpu else None
        self._plans: dict[int, dict[tuple[int, str], Any]] = {}  # batch -> (length, direction) -> cuFFT plan

    @property
    def streams(self) -> int:
        return max(1, len(self._lanes))

    # -- the two directions -----------------------------------------------------------------------------------

    def inverse(self, fourier: Any, plan: FoldingPlan, values: Any, spectra: Any) -> None:
        """(batch, M, rows) Fourier coefficients -> ``values`` (batch, points), through ``spectra`` (batch, bins)."""
        if not values.shape[0]:
            return  # no fields: nothing to plan or launch
        self._fold(fourier, plan, spectra)
        self._each_row("inverse", spectra, values)

    def direct(self, values: Any, plan: FoldingPlan, spectra: Any, out: Any) -> None:
        """(batch, points) grid values -> ``out`` (batch, M, rows) Fourier coefficients, through ``spectra``
        (``out`` None: the row FFTs alone, into ``spectra``, for a pick elsewhere: ``pick_operands``)."""
        if not values.shape[0]:
            return
        self._each_row("direct", values, spectra)
        if out is not None:
            self._pick(spectra, plan, out)

    def _each_row(self, direction: str, source: Any, target: Any) -> None:
        """Every row's FFT from ``source`` to ``target`` (inverse: bins to points; direct: points to bins)."""
        run = (self._cufft_rows if self.on_gpu else self._numpy_rows)(direction, source, target)
        inverse = direction == "inverse"
        with self._fanned_out() as lane:
            for r, (n, start, offset) in enumerate(self._row_table):
                with lane(self._lane_of[r]):
                    run(n, *((offset, start) if inverse else (start, offset)))

    # -- fold and pick ----------------------------------------------------------------------------------------

    def _fold(self, fourier: Any, plan: FoldingPlan, spectra: Any) -> None:
        batch, count, nrows = fourier.shape
        if self.on_gpu:
            if count == 0 or nrows == 0 or batch == 0:
                return
            group, shared = fold_group(count)
            kernel = cuda_kernel("gridcomm_fold")
            if shared > DEFAULT_SHARED_BYTES and kernel.max_dynamic_shared_size_bytes < shared:  # one row per block
                runtime = self.xp.cuda.runtime
                most = runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, runtime.getDevice())
                if shared > most:
                    raise ArgumentError(
                        f"{count} wavenumbers per row: the GPU fold stages {shared} bytes of them per block, more "
                        f"than this GPU's {most}; use a smaller truncation or the host path"
                    )
                kernel.max_dynamic_shared_size_bytes = shared
            grid = (-(-nrows // group), -(-batch // FOLD_BATCH_PER_BLOCK))
            kernel(grid, (FOLD_THREADS,), (
                fourier, np.int32(count), np.int32(nrows), np.int32(batch), np.int32(FOLD_BATCH_PER_BLOCK),
                np.int32(group), self._bin_offsets, plan.first, plan.codes, plan.simple, plan.direct,
                np.int64(self.rows.bins), spectra,
            ), shared_mem=shared)  # fmt: skip
            return
        terms = np.empty((batch, 2 * count + 1, nrows), np.complex128)  # F_m, conj F_m, zero
        terms[:, :count] = fourier
        if plan.conjugates:
            np.conjugate(fourier, out=terms[:, count : 2 * count])
        terms[:, 2 * count] = 0.0
        gathered = np.take(terms.reshape(batch, -1), plan.flat_terms, axis=1)
        np.add.reduceat(gathered, plan.first[:-1], axis=1, out=spectra)

    def pick_operands(self, spectra: Any, plan: FoldingPlan) -> tuple[Any, ...]:
        """(GPU) The leading arguments of fourier.cu's pick kernels for the half ``spectra`` (batch, bins) and the
        wavenumbers of ``plan``: up to the wavenumbers' and the rows' counts."""
        return (spectra, np.int64(self.rows.bins), plan.picks, plan.factors, plan.simple, self._bin_offsets, plan.ms,
                plan.inverse_lengths, np.int32(len(plan.ms)), np.int32(len(self.rows.lengths)))  # fmt: skip

    def _pick(self, spectra: Any, plan: FoldingPlan, out: Any) -> None:
        if self.on_gpu:
            batch, count, nrows = out.shape
            _launch_tiles("gridcomm_pick", count, nrows, batch, (
                *self.pick_operands(spectra, plan), np.int32(batch), np.int32(BATCH_PER_BLOCK), out,
            ))  # fmt: skip
            return
        picked = np.take(spectra, plan.picks, axis=1)  # (batch, M, rows)
        np.multiply(picked.view(np.float64), plan.factors, out=out.view(np.float64))

    # -- row FFTs ---------------------------------------------------------------------------------------------

    @functools.cached_property
    def _row_table(self) -> list[tuple[int, int, int]]:
        """(points, first point, first bin) of each row."""
        r = self.rows
        return list(zip(r.lengths.tolist(), r.starts.tolist(), r.bin_offsets[:-1].tolist(), strict=True))

    @staticmethod
    def _numpy_rows(direction: str, source: Any, target: Any) -> Callable[[int, int, int], None]:
        """``run(n, source offset, target offset)``: one row's FFT by numpy.fft (offsets within a field)."""

        def inverse(n: int, bins: int, points: int) -> None:
            half = source[:, bins : bins + n // 2 + 1]
            target[:, points : points + n] = np.fft.irfft(half, n=n, axis=-1, norm="forward")

        def direct(n: int, points: int, bins: int) -> None:
            target[:, bins : bins + n // 2 + 1] = np.fft.rfft(source[:, points : points + n], axis=-1)

        return inverse if direction == "inverse" else direct

    def _cufft_rows(self, direction: str, source: Any, target: Any) -> Callable[[int, int, int], None]:
        """``run(n, source offset, target offset)``: the cuFFT call of one row of n points from ``source`` to
        ``target`` (offsets in elements within a field), on the current stream. The row's plan reads and writes
        the fields' rows where they lie: its distance between fields is each array's length per field."""
        from cupy.cuda import cufft

        batch = source.shape[0]
        plans = self._plans_for(batch)
        inverse = direction == "inverse"
        source_at, target_at = source.data.ptr, target.data.ptr
        source_size, target_size = source.itemsize, target.itemsize
        source_field, target_field = _complex_points(source), _complex_points(target)
        sign = cufft.CUFFT_INVERSE if inverse else cufft.CUFFT_FORWARD

        missing = [n for n in self._lengths if (n, direction) not in plans]
        if missing:
            device = self.xp.cuda.Device().id  # current device is per thread in CuPy

            def make(n: int) -> tuple[int, Any]:
                with self.xp.cuda.Device(device):
                    return n, _cufft_plan(n, batch, source_field, target_field)

            with concurrent.futures.ThreadPoolExecutor(min(PLAN_THREADS, len(missing))) as pool:
                plans.update(((n, direction), plan) for n, plan in pool.map(make, missing))

        def run(n: int, source_offset: int, target_offset: int) -> None:
            plans[n, direction].fft(
                _At(source_at + source_offset * source_size), _At(target_at + target_offset * target_size), sign
            )

        return run

    def _plans_for(self, batch: int) -> dict[tuple[int, str], Any]:
        if batch not in self._plans:
            if len(self._plans) >= _BATCHES_KEPT:
                del self._plans[next(iter(self._plans))]
            self._plans[batch] = {}
        return self._plans[batch]

    @contextlib.contextmanager
    def _fanned_out(self) -> Iterator[Callable[[int], Any]]:
        """``lane(k)``: the context row k's FFT runs in. Without lanes, the caller's stream; with them, lane
        k mod L, forked from the caller's stream after everything enqueued so far and joined back to it on exit
        (each row writes its own part of the output)."""
        if not self._lanes:
            yield lambda k: contextlib.nullcontext()
            return
        cuda = self.xp.cuda
        caller = cuda.get_current_stream()
        fork = cuda.Event(block=False, disable_timing=True)
        fork.record(caller)
        for lane in self._lanes:
            lane.wait_event(fork)
        try:
            yield lambda k: self._lanes[k % len(self._lanes)]
        finally:
            for lane in self._lanes:
                joined = cuda.Event(block=False, disable_timing=True)
                joined.record(lane)
                caller.wait_event(joined)


class _At:
    """What a cuFFT plan reads of an array: its device address (``.data.ptr``)."""

    __slots__ = ("data",)

    def __init__(self, ptr: int) -> None:
        self.data = types.SimpleNamespace(ptr=ptr)


def _cufft_plan(n: int, batch: int, source_field: int, target_field: int) -> Any:
    """A cuFFT plan of ``batch`` double-precision complex transforms of length n / 2 (a real row of n points as
    n / 2 complex ones, module doc), unit strides, fields ``source_field`` and ``target_field`` complex elements
    apart in the source and the target; either direction."""
    from cupy.cuda import cufft

    half = n // 2
    return cufft.PlanNd([half], [half], 1, source_field, [half], 1, target_field, cufft.CUFFT_Z2Z, batch, "C", -1, None)


def _complex_points(array: Any) -> int:
    """The length of one field of the 2-D ``array`` (batch, length) in complex128 elements: real grid values
    hold two points per complex element."""
    size = array.shape[1] * array.itemsize
    if size % 16:
        raise ArgumentError(
            f"grid values of {array.shape[1]} points per field: the GPU's row FFTs read a field's points in pairs, "
            "so its length must be even"
        )
    return size // 16


def fold_group(count: int) -> tuple[int, int]:
    """(rows per block, shared memory per block [bytes]) of the fold kernel for ``count`` wavenumbers: as many rows
    as FOLD_GROUP allows whose staged F_m fit in FOLD_SHARED_BYTES, at least one."""
    row_bytes = (count | 1) * 16  # fourier.cu's staged rows: count rounded up to odd, complex128
    group = max(1, min(FOLD_GROUP, FOLD_SHARED_BYTES // row_bytes))
    return group, group * row_bytes


def _launch_tiles(name: str, across: int, rows: int, batch: int, args: tuple[Any, ...]) -> None:
    """Kernel ``name`` of fourier.cu on the current stream: one block per 32 x 32 tile of ``across`` (bins or
    wavenumbers) by ``rows``, and per BATCH_PER_BLOCK fields."""
    if across == 0 or rows == 0 or batch == 0:
        return
    grid = (-(-across // TILE), -(-rows // TILE), -(-batch // BATCH_PER_BLOCK))
    cuda_kernel(name)(grid, (TILE, THREADS // TILE), args)


def cuda_kernel(name: str) -> Any:
    """Kernel ``name`` of fourier.cu, compiled with this module's FOLD_GROUP, which sizes the fold's shared
    arrays (so that the group ``fold_group`` launches with always fits them)."""
    return kernels.function(SOURCE, name, ("-std=c++17", f"-DFOLD_GROUP={FOLD_GROUP}"))
