"""Spherical-harmonic transforms between the octahedral grid O-N and complex coefficients a_lm.

Conventions (those of ducc0, healpy and libsharp):

- a real field f(theta, phi) = sum_l [a_l0 Y_l0 + 2 Re sum_{m=1..l} a_lm Y_lm], with orthonormal
  Y_lm = lambda_l^m(cos theta) e^{i m phi} (Condon-Shortley phase; ``legendre.legendre_functions``);
- coefficients of one field are complex, in m-major triangular order: a_lm at index
  m (2T + 1 - m) / 2 + l for 0 <= m <= l <= T (``coefficient_index``); a_l0 is real;
- grid values follow ``OctahedralGrid``'s point order: rows north to south, each row from longitude 0
  eastwards; the truncation T is at most N - 1 (TCo(N-1) for O-N by default).

Each transform has two halves, so that a distributed transform can transpose in between:

- Legendre (per zonal wavenumber m, over all latitude rows): F_m(row) = sum_l a_lm lambda_l^m(x_row), split by
  the parity of l - m and done on the northern rows only (the southern rows follow from
  lambda_l^m(-x) = (-1)^(l+m) lambda_l^m(x)). The products keep the fields fastest: per m and parity, the
  table (N rows by the degrees) times the coefficients (degrees by the fields, real and imaginary parts as
  neighbouring columns), so that one real product does a complex field's work and cuBLAS reads and writes its
  operands where they lie; ``operands.py`` moves the caller's arrays (fields slowest) to and from that layout
  in one pass, adding the parities into northern and southern rows on the way (the Fourier coefficients either
  as a (batch, m, 2N) array or, given an ``operands.RowLayout``, in blocks of rows of a flat buffer, which is
  how the distributed dwarf keeps one block per peer). Wavenumbers of similar length T - m + 1 are bucketed,
  their tables zero-padded to the bucket's longest and stacked, so that each bucket is one batched product
  (both parities), on the GPU in chunks that bound the work arrays;
- Fourier (per latitude row, over all m): f(row, phi_k) from the F_m by an inverse real FFT of the row's own
  length, reading and writing the rows where they lie; wavenumbers m >= n / 2 fold (alias) onto the bins of a
  row of n points, which the octahedral grid keeps small (at most 2.3e-5 against 7.1 on O640), as T = N - 1 needs
  (``fourier.py``: one fold and one pick launch on the GPU, one cuFFT call per row).

Every index array is built once (``__init__``, or the first call with a new order of wavenumbers), on the
device of ``xp``: a transform costs a few array operations per bucket and one FFT call per row, which on the
GPU a CUDA graph replays. NumPy and CuPy run the same code but for the FFTs, fold and pick.

The direct transform is the Gauss quadrature of the same sums (rows are Gaussian latitudes): exact up to that
aliasing, so ``direct(inverse(a))`` returns ``a`` to round-off.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ....arguments import index_set, whole_number
from ....arrays import resolve_array_module
from ....errors import ArgumentError, FieldError
from ....grids.octahedral import OctahedralGrid
from . import operands
from .fourier import FoldingPlan, RowFFTs, RowGeometry, plan_folding
from .legendre import legendre_functions
from .operands import Chunk, RowLayout, make_chunk

#: The wavenumbers of a transform are cut into at most this many buckets of similar length T - m + 1, each padded
#: to its longest: padding costs about 1 / MAX_BUCKETS more Legendre work when the m are spread evenly (0..T, or a
#: rank's pairs m and T - m). On the host, smaller products stay in cache; on the GPU each bucket costs 6 launches,
#: which small transforms feel: on one H200, O640, both Legendre halves took 1.72 / 2.02 / 7.39 ms at batch 31 and
#: 18.2 / 17.8 / 19.6 ms at batch 412 with at most 4 / 16 / 64 buckets (tune-buckets-gpu-1r-20261123T232658Z).
#: The GPU's buckets are also the pipelined dwarf's stages (one batched product each at batch 412): with 8 instead
#: of 4, TCo639 took 49.45 ms per step on one H200 against 50.45 (its Legendre phase 17.6 against 18.5 ms), and
#: 30.99 ms on 2 x H200 with 8 stages against 31.14 with 4 in the same call, 9.6 % of the step not hidden against
#: 14.1 % (spectral-gpu-1r-20261127T110024Z, spectral-gpu-2r-20261127T110004Z, ...T105940Z).
MAX_BUCKETS = 16
MAX_BUCKETS_GPU = 8


def max_buckets(xp: Any) -> int:
    """The bucket limit for arrays of module ``xp``: MAX_BUCKETS on the host, MAX_BUCKETS_GPU on the GPU."""
    return MAX_BUCKETS if xp is np else MAX_BUCKETS_GPU


#: The largest product of one batched call on the GPU [bytes]: a bucket whose products would be larger runs in
#: chunks of fewer wavenumbers, which bounds the work arrays. Smaller chunks cost launches, not bandwidth: on one
#: H200 (O640, batch 412, both Legendre halves, 16 buckets) 16 / 64 / 256 / 4096 MiB took 96.6 / 19.7 / 18.1 /
#: 17.8 ms (``benchmarks/tune_buckets.py``, tune-buckets-gpu-1r-20261123T232658Z; products still in L2 gained
#: nothing). On the host a bucket runs whole.
GPU_PRODUCT_BYTES = 2**30


def chunk_wavenumbers(n: int, batch: int, xp: Any) -> int | None:
    """Wavenumbers per batched product on rows 0..N-1 for ``batch`` fields: whole buckets (None) on the host;
    on the GPU as many as keep one call's products (2 parities x N x batch complex) within GPU_PRODUCT_BYTES."""
    if xp is np:
        return None
    return max(1, GPU_PRODUCT_BYTES // (2 * n * max(1, batch) * 16))


#: Orders of wavenumbers along the Fourier arrays' m axis whose index arrays a transform keeps.
_FOURIER_PLANS_KEPT = 4


def coefficient_count(truncation: int) -> int:
    """Number of complex coefficients a_lm of one field, 0 <= m <= l <= T."""
    return (truncation + 1) * (truncation + 2) // 2


def coefficient_index(l: int | np.ndarray, m: int | np.ndarray, truncation: int) -> Any:  # noqa: E741 (l is the degree)
    """Position of a_lm in the m-major triangular order: m (2T + 1 - m) / 2 + l."""
    return m * (2 * truncation + 1 - m) // 2 + l


class SpectralTransform:
    """Spherical-harmonic transforms on the octahedral grid, for all or some wavenumbers and rows.

    Args:
        grid: an OctahedralGrid or its name ("O160") or N.
        truncation: T, at most N - 1 (default N - 1).
        wavenumbers: the zonal wavenumbers m whose Legendre work this object does (default 0..T), e.g. one
            rank's share (``distribution.wavenumber_sets``); its coefficient arrays hold those m in this order.
        rows: the latitude rows whose Fourier work this object does (default all), e.g. one rank's band.
        fourier_order: the order of the wavenumbers along axis 1 of the Fourier arrays that ``fourier_inverse``
            and ``fourier_direct`` will be given (default 0..T): its index arrays are built here, those of any
            other order on first use.
        xp: the array module (numpy, or cupy for arrays on the GPU): every table and index array lives there.
        fft_streams: (CuPy) CUDA streams the row FFTs are spread over, forked from and joined back to the
            caller's stream: small FFTs of different lengths then run side by side (in a captured CUDA graph, as
            parallel branches). Default ``fourier.GPU_FFT_STREAMS`` (4); 1: all on the caller's stream.
        values_layout: (first point, points per field) of the grid-value arrays the Fourier half reads and
            writes: its rows' points lie from that point on, in arrays holding more points per field (another
            transform's rows, e.g. a group of a rank's band whose FFTs run apart from the rest); or (each row's
            first point, points per field), the rows anywhere in the field. Default (0, the points of ``rows``).

    Arrays are batched on their first axis (fields times levels): coefficients (batch, ncoef) complex,
    grid values (batch, points of ``rows``) real, Fourier coefficients (batch, m, rows) complex.
    Memory: the Legendre tables twice (once weighted and transposed for the direct transform), about
    16 N ncoef bytes, plus index arrays of about the size of one field's coefficients and grid values.
    """

    def __init__(
        self,
        grid: OctahedralGrid | str | int,
        truncation: int | None = None,
        *,
        wavenumbers: Sequence[int] | np.ndarray | None = None,
        rows: Sequence[int] | np.ndarray | None = None,
        fourier_order: Sequence[int] | np.ndarray | None = None,
        xp: Any = np,
        fft_streams: int | None = None,
        values_layout: tuple[int | Sequence[int] | np.ndarray, int] | None = None,
    ) -> None:
        self.grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
        n = self.grid.N
        self.truncation = check_truncation(truncation, self.grid)
        self.xp = resolve_array_module(xp, ArgumentError)
        t = self.truncation
        self.wavenumbers = index_set(wavenumbers, "wavenumbers", t + 1, f"wavenumbers m in 0..T = 0..{t}")
        self.rows = index_set(rows, "rows", 2 * n, f"latitude rows in 0..{2 * n - 1}")
        if not len(self.rows):
            raise ArgumentError("rows=[]: give at least one latitude row (None: all of them)")
        self.ncoef = int(np.sum(t - self.wavenumbers + 1))
        self.points = int(np.sum(self.grid.nlon[self.rows]))
        first_point, self.field_points = _values_layout(values_layout, self.grid.nlon[self.rows])
        self._scratch_arrays: dict[Any, Any] = {}
        self._retired: list[Any] = []  # scratch buffers outgrown (``_scratch``)
        self._row_ffts = RowFFTs(RowGeometry.of(self.grid.nlon[self.rows], first_point), self.xp, fft_streams)
        self._fourier_plans: dict[bytes, FoldingPlan] = {}
        self._plain_layouts: dict[tuple[int, int], RowLayout] = {}  # per (batch, wavenumbers) of a Legendre call
        #: Times the Legendre products apart from the moves around them where set (a ProductClock); None: untimed.
        self.product_clock: ProductClock | None = None
        self._set_up_legendre()
        self._fourier_plan(self._fourier_wavenumbers(fourier_order, "fourier_order"))

    @property
    def fft_streams(self) -> int:
        """CUDA streams the row FFTs are spread over (1 on the host)."""
        return self._row_ffts.streams

    # -- set-up ---------------------------------------------------------------------------------------------

    def _set_up_legendre(self) -> None:
        """Buckets of wavenumbers, longest first: the stacked products (``operands.Chunk`` each)."""
        t, lengths = self.truncation, self.truncation - self.wavenumbers + 1
        self._coef_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        order = np.argsort(-lengths, kind="stable")
        # Quadrature on the northern rows; the southern ones mirror them (exact symmetry in OctahedralGrid).
        n = self.grid.N
        x, sin_theta = np.sin(self.grid.latitudes[:n]), np.cos(self.grid.latitudes[:n])
        weights = 2.0 * np.pi * self.grid.weights[:n]
        depths = (t - self.wavenumbers[order] + 2) // 2  # l of one parity: (T - m + 2) // 2 of them (even l - m)
        bands = _bands(depths, max_buckets(self.xp))
        self._bucket_positions = [order[start:stop] for start, stop in bands]  # on the m axis (host)
        self._pieces_made: dict[int, list[tuple[Chunk, np.ndarray]]] = {}
        self._buckets = [self._bucket(positions, x, sin_theta, weights) for positions in self._bucket_positions]

    def _bucket(self, positions: np.ndarray, x: np.ndarray, sin_theta: np.ndarray, weights: np.ndarray) -> Chunk:
        """The padded tables of the wavenumbers at ``positions`` (longest first) and where their data lie."""
        t, n = self.truncation, self.grid.N
        depth = (t - int(self.wavenumbers[positions[0]]) + 2) // 2
        tables = np.zeros((len(positions), 2, depth, n))
        for i, p in enumerate(positions):
            table = legendre_functions(int(self.wavenumbers[p]), t, x, sin_theta=sin_theta)  # row l - m
            for parity in (0, 1):
                part = table[parity::2]
                tables[i, parity, : len(part)] = part
        lengths = t - self.wavenumbers[positions] + 1
        return make_chunk(self.xp, self._coef_offsets[positions], lengths, positions, tables, weights)

    def _pieces(self, batch: int) -> list[tuple[Chunk, np.ndarray]]:
        """The buckets cut into the chunks that one batched product each does for ``batch`` fields, each with its
        positions on the m axis (a host array); made once per batch size (a pipelined transform asks at every
        stage, and the Legendre phase is issued from Python)."""
        pieces = self._pieces_made.get(batch)
        if pieces is None:
            size, pieces = chunk_wavenumbers(self.grid.N, batch, self.xp), []
            for bucket, positions in zip(self._buckets, self._bucket_positions, strict=True):
                step = size or bucket.count
                for first in range(0, bucket.count, step):
                    whole = step >= bucket.count
                    pieces.append(
                        (bucket if whole else bucket.part(first, first + step), positions[first : first + step])
                    )
            kept = list(self._pieces_made.items())[-1:]  # the last batch size seen before, and this one
            self._pieces_made = {**dict(kept), batch: pieces}
        return pieces

    def _chunks(self, batch: int, part: tuple[int, int] | None = None) -> Iterator[Chunk]:
        """The chunks of ``_pieces``; with ``part`` (first, stop, checked by ``_part``), those at positions
        first..stop-1 of the m axis."""
        for chunk, positions in self._pieces(batch):
            if part is None or part[0] <= positions[0] < part[1]:
                yield chunk

    def legendre_parts(self, batch: int) -> list[tuple[int, int]]:
        """(first, stop) on the m axis of each batched product for ``batch`` fields, in order: the runs of
        wavenumbers that ``legendre_inverse`` and ``legendre_direct`` may be given as ``part`` (one part or several
        in a row), so that a pipelined transform can transpose the wavenumbers of one part while the products of
        the next run. The products follow the m axis where the wavenumbers ascend (each rank's share does); where
        they do not, one part of every wavenumber."""
        positions = [p for _, p in self._pieces(batch)]
        if not positions:  # no wavenumbers (a rank of more ranks than pairs m, T - m): one empty part
            return [(0, 0)]
        runs = [(int(p[0]), int(p[0]) + len(p)) for p in positions]
        ends = [0] + [stop for _, stop in runs]
        contiguous = all(np.array_equal(p, np.arange(*run)) for p, run in zip(positions, runs, strict=True))
        if contiguous and all(first == ends[k] for k, (first, _) in enumerate(runs)):
            return runs
        return [(0, len(self.wavenumbers))]

    def _part(self, part: Any, batch: int, what: str) -> tuple[int, int]:
        """``part`` as (first, stop) positions on the m axis, checked to be a run of whole products (None: all)."""
        if part is None:
            return 0, len(self.wavenumbers)
        parts = self.legendre_parts(batch)
        edges = {0, len(self.wavenumbers), *(first for first, _ in parts)}  # where a part may start or stop
        first, stop = (int(v) for v in part)
        if not (0 <= first < stop <= len(self.wavenumbers) and first in edges and stop in edges):
            raise ArgumentError(
                f"{what}: part={tuple(part)} must start and end where this transform's products do for {batch} "
                f"fields, at positions {sorted(edges)} of its {len(self.wavenumbers)} wavenumbers (legendre_parts)"
            )
        return first, stop

    def _operand(self, shape: str, chunk: Chunk, batch: int) -> Any:
        """A (chunk, 2, rows, batch) complex work array (contents undefined), a view of a kept buffer: rows = N
        for ``shape`` "wide" (products and sums on the northern rows), the chunk's depth for "narrow"."""

        def rows(c: Chunk) -> int:
            return self.grid.N if shape == "wide" else c.depth

        size = chunk.count * 2 * rows(chunk) * batch
        buffer = self._scratch_arrays.get(shape)
        if buffer is None or buffer.size < size:
            # Sized for the largest chunk of this batch at once, so that it is allocated once per batch size.
            most = max(c.count * 2 * rows(c) for c in self._chunks(batch)) * batch
            buffer = self._scratch_arrays[shape] = self.xp.empty(max(size, most), np.complex128)
        return buffer[:size].reshape(chunk.count, 2, rows(chunk), batch)

    def _fourier_plan(self, ms: np.ndarray) -> FoldingPlan:
        """The fold and pick index arrays for wavenumbers ``ms`` along the m axis, built on first use and kept."""
        key = ms.tobytes()
        plan = self._fourier_plans.get(key)
        if plan is None:
            if len(self._fourier_plans) >= _FOURIER_PLANS_KEPT:
                del self._fourier_plans[next(iter(self._fourier_plans))]
            plan = self._fourier_plans[key] = plan_folding(self._row_ffts.rows, ms, self.xp)
        return plan

    # -- Legendre half ----------------------------------------------------------------------------------------

    def _product(self) -> Any:
        """A context around one Legendre matrix product: timed by ``product_clock`` where one is set."""
        return contextlib.nullcontext() if self.product_clock is None else self.product_clock.timed()

    def product_positions(self, batch: int, part: Any = None) -> np.ndarray:
        """The positions on the m axis of the wavenumbers whose products ``legendre_inverse(..., unfold=False)``
        leaves, in the order it leaves them (``part`` as there)."""
        first, stop = self._part(part, batch, "product_positions")
        kept = [p for _, p in self._pieces(batch) if first <= p[0] < stop]
        return np.concatenate(kept).astype(np.int64) if kept else np.zeros(0, np.int64)

    def legendre_inverse(
        self,
        coefficients: Any,
        out: Any = None,
        *,
        layout: RowLayout | None = None,
        part: Any = None,
        unfold: bool = True,
    ) -> Any:
        """(batch, ncoef) coefficients of this object's wavenumbers -> (batch, m, 2N) Fourier coefficients
        F_m(row) on every row (written into ``out``, C-contiguous, when given).

        ``layout``: the Fourier coefficients go instead into a flat (size,) complex buffer laid out by this
        ``operands.RowLayout`` (e.g. blocks of rows per peer, as the distributed dwarf keeps them); ``out``, when
        given, is that buffer. ``part`` (first, stop): only the wavenumbers at positions first..stop-1 of the m
        axis, a run of whole products (``legendre_parts``), whose Fourier coefficients alone make the output:
        (batch, stop - first, 2N), or the layout of as many. ``unfold`` False: the output holds the matrix
        products themselves, F's even and odd parts on the northern rows, (count, 2, N, batch) per wavenumber
        in ``product_positions`` order (as many elements), for a kernel that unfolds them elsewhere (the
        distributed dwarf's, straight into the peers: ``peer_writes.unfold_into``)."""
        xp = self.xp
        a = self._coefficients(coefficients)
        batch = a.shape[0]
        first, stop = self._part(part, batch, "legendre_inverse")
        if layout is None:
            shape = (batch, stop - first, 2 * self.grid.N)
            out = xp.empty(shape, np.complex128) if out is None else _output(out, shape, "legendre_inverse")
            flat, layout = out.reshape(-1), self._plain_layout(batch, stop - first)
        else:
            self._check_layout(layout, batch, stop - first, "legendre_inverse")
            out = xp.empty(layout.size, np.complex128) if out is None else out
            flat = _output(out, (layout.size,), "legendre_inverse")
        done = 0  # products left in ``flat`` so far [elements]
        for chunk in self._chunks(batch, (first, stop)):
            operand = self._operand("narrow", chunk, batch)
            operands.gather(a, chunk, operand)
            if unfold:
                product = self._operand("wide", chunk, batch)  # (m, parity, N, batch): even and odd parts
            else:
                size = chunk.count * 2 * self.grid.N * batch
                product = flat[done : done + size].reshape(chunk.count, 2, self.grid.N, batch)
                done += size
            with self._product():
                xp.matmul(chunk.tables, _real(operand), out=_real(product))
            if unfold:
                operands.unfold(product, chunk, flat, layout, first)
        return out

    def legendre_direct(
        self, fourier: Any, out: Any = None, *, layout: RowLayout | None = None, part: Any = None
    ) -> Any:
        """(batch, m, 2N) Fourier coefficients on every row -> (batch, ncoef) coefficients by Gauss quadrature
        (written into ``out``, C-contiguous, when given).

        ``layout``: ``fourier`` is instead a flat (size,) complex128 buffer laid out by this
        ``operands.RowLayout``, as ``legendre_inverse`` writes it. ``part`` (first, stop): ``fourier`` holds only
        the wavenumbers at positions first..stop-1 (a run of whole products, ``legendre_parts``), and only their
        coefficients are written (the others in ``out`` are left as they are; zero in a new array)."""
        xp, n = self.xp, self.grid.N
        f = _numbers(xp.asarray(fourier), "Fourier coefficients", complex_allowed=True)
        if layout is None:
            first, stop = self._part(part, f.shape[0] if f.ndim == 3 else 0, "legendre_direct")
            count = stop - first
            if f.ndim != 3 or f.shape[1:] != (count, 2 * n):
                raise FieldError(f"Fourier coefficients of shape {tuple(f.shape)}: expected (batch, {count}, {2 * n})")
            f = xp.ascontiguousarray(f.astype(np.complex128, copy=False))  # the GPU's moves read rows, as for a_lm
            layout = self._plain_layout(f.shape[0], count)
        else:
            first, stop = self._part(part, layout.batch, "legendre_direct")
            self._check_layout(layout, layout.batch, stop - first, "legendre_direct")
            if f.shape != (layout.size,) or f.dtype != np.complex128 or not f.flags.c_contiguous:
                raise FieldError(
                    f"Fourier coefficients of shape {tuple(f.shape)} and dtype {f.dtype}: expected the C-contiguous "
                    f"({layout.size},) complex128 buffer of the row layout given"
                )
        batch = layout.batch
        shape = (batch, self.ncoef)
        whole = (first, stop) == (0, len(self.wavenumbers))
        if out is None:
            out = (xp.empty if whole else xp.zeros)(shape, dtype=np.complex128)
        else:
            out = _output(out, shape, "legendre_direct")
        flat = f.reshape(-1)
        for chunk in self._chunks(batch, (first, stop)):
            # North + south rows for l - m even, north - south for odd; the weights are in the tables.
            sums = self._operand("wide", chunk, batch)
            operands.fold(flat, chunk, sums, layout, first)
            product = self._operand("narrow", chunk, batch)
            with self._product():
                xp.matmul(chunk.weighted, _real(sums), out=_real(product))
            operands.scatter(product, chunk, out)
        return out

    def _plain_layout(self, batch: int, count: int) -> RowLayout:
        """The (batch, count, 2N) array's row layout, made once per shape (its tables are copied to the GPU)."""
        layout = self._plain_layouts.get((batch, count))
        if layout is None:
            if len(self._plain_layouts) >= _FOURIER_PLANS_KEPT:
                del self._plain_layouts[next(iter(self._plain_layouts))]
            layout = self._plain_layouts[batch, count] = RowLayout.plain(batch, count, 2 * self.grid.N)
        return layout

    def _check_layout(self, layout: Any, batch: int, count: int, what: str) -> None:
        """ArgumentError unless ``layout`` is a RowLayout; FieldError unless it is of ``batch`` fields, ``count``
        wavenumbers and every row."""
        if not isinstance(layout, RowLayout):
            raise ArgumentError(f"{what}: layout is a {type(layout).__name__}; give an operands.RowLayout or None")
        want = (batch, count, 2 * self.grid.N)
        if (layout.batch, layout.count, layout.rows) != want:
            raise FieldError(
                f"{what}: the row layout holds (batch, m, rows) = {(layout.batch, layout.count, layout.rows)}, "
                f"expected {want}"
            )

    # -- Fourier half -----------------------------------------------------------------------------------------

    def fourier_inverse(
        self, fourier: Any, wavenumbers: Sequence[int] | np.ndarray | None = None, out: Any = None
    ) -> Any:
        """(batch, m, rows) Fourier coefficients -> (batch, points) grid values of this object's rows (written into
        ``out``, a C-contiguous float64 array, when given).

        ``wavenumbers`` names the m of axis 1 (default 0..T); m >= n / 2 folds onto m mod n in a row of n points.
        """
        xp = self.xp
        ms = self._fourier_wavenumbers(wavenumbers)
        f = _numbers(xp.asarray(fourier), "Fourier coefficients", complex_allowed=True)
        nrows = len(self.rows)
        if f.ndim != 3 or f.shape[1:] != (len(ms), nrows):
            raise FieldError(
                f"Fourier coefficients of shape {tuple(f.shape)}: expected (batch, {len(ms)}, {nrows}) "
                f"for {len(ms)} wavenumbers on {nrows} rows"
            )
        shape = (f.shape[0], self.field_points)
        values = xp.empty(shape, np.float64) if out is None else _output(out, shape, "fourier_inverse", np.float64)
        spectra = self._spectra(f.shape[0])
        self._row_ffts.inverse(xp.ascontiguousarray(f, dtype=np.complex128), self._fourier_plan(ms), values, spectra)
        return values

    def fourier_direct(
        self, values: Any, wavenumbers: Sequence[int] | np.ndarray | None = None, out: Any = None, *, pick: bool = True
    ) -> Any:
        """(batch, points) grid values of this object's rows -> (batch, m, rows) Fourier coefficients
        (1 / n) sum_k f_k e^{-i m phi_k}, for the m of ``wavenumbers`` (default 0..T); written into ``out``
        (C-contiguous) when given. ``pick`` False: the row FFTs alone, whose half spectra a kernel elsewhere picks
        the coefficients from (``pick_operands``; the distributed dwarf's, straight into the peers): returns None."""
        xp = self.xp
        ms = self._fourier_wavenumbers(wavenumbers)
        v = _numbers(xp.asarray(values), "grid values", complex_allowed=False)
        if v.ndim != 2 or v.shape[1] != self.field_points:
            raise FieldError(
                f"grid values of shape {tuple(v.shape)}: expected (batch, {self.field_points}), the points of "
                f"{len(self.rows)} rows of {self.grid.name}"
            )
        batch = v.shape[0]
        spectra = self._spectra(batch)
        shape = (batch, len(ms), len(self.rows))
        if not pick:
            out = None
        elif out is None:
            out = xp.empty(shape, dtype=np.complex128)
        else:
            out = _output(out, shape, "fourier_direct")
        v = xp.ascontiguousarray(v, dtype=np.float64)
        self._row_ffts.direct(v, self._fourier_plan(ms), spectra, out)
        return out

    def pick_operands(self, batch: int, wavenumbers: Sequence[int] | np.ndarray | None = None) -> tuple[Any, ...]:
        """(GPU) What fourier.cu's pick kernels read after ``fourier_direct(..., pick=False)`` of ``batch`` fields:
        the half spectra it leaves (this object's own buffer) and the index arrays of ``wavenumbers`` (as there),
        up to the wavenumbers' and the rows' counts (``RowFFTs.pick_operands``)."""
        ms = self._fourier_wavenumbers(wavenumbers)
        spectra = self._spectra(batch)
        return self._row_ffts.pick_operands(spectra, self._fourier_plan(ms))

    # -- whole transforms -------------------------------------------------------------------------------------

    def inverse(self, coefficients: Any) -> Any:
        """Coefficients (batch, ncoef) -> grid values (batch, points): needs every wavenumber and row here."""
        self._whole("inverse")
        return self.fourier_inverse(self.legendre_inverse(coefficients))

    def direct(self, values: Any) -> Any:
        """Grid values (batch, points) -> coefficients (batch, ncoef): needs every wavenumber and row here."""
        self._whole("direct")
        return self.legendre_direct(self.fourier_direct(values))

    # -- helpers ----------------------------------------------------------------------------------------------

    def _spectra(self, batch: int) -> Any:
        """The row FFTs' half spectra of ``batch`` fields, (batch, bins): one kept buffer, that both directions and
        ``pick_operands`` share."""
        return self._scratch("spectra", (batch, self._row_ffts.rows.bins), np.complex128)

    def _scratch(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """A work array kept between calls (its contents do not survive them): on the host, a fresh array this
        large would cost page faults on every call (the old per-m loops only ever made small ones). A view of the
        front of one buffer per name and dtype, grown when a larger one is needed: calls of different batch sizes
        (a pipelined transform's chunks) share it. A buffer outgrown stays alive (``_retired``): a CUDA graph
        captured with it may still write there."""
        size, key = math.prod(shape), (name, np.dtype(dtype).str)
        buffer = self._scratch_arrays.get(key)
        if buffer is None or buffer.size < size:
            if buffer is not None:
                self._retired.append(buffer)
            buffer = self._scratch_arrays[key] = self.xp.empty(size, dtype=dtype)
        return buffer[:size].reshape(shape)

    def _whole(self, what: str) -> None:
        t, n = self.truncation, self.grid.N
        if len(self.wavenumbers) != t + 1 or len(self.rows) != 2 * n:
            raise ArgumentError(
                f"{what}: this transform owns {len(self.wavenumbers)} of {t + 1} wavenumbers and "
                f"{len(self.rows)} of {2 * n} rows; use the Legendre and Fourier halves with a transposition"
            )

    def _coefficients(self, coefficients: Any) -> Any:
        a = _numbers(self.xp.asarray(coefficients), "coefficients", complex_allowed=True)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.shape[1] != self.ncoef:
            raise FieldError(
                f"coefficients of shape {tuple(a.shape)}: expected (batch, {self.ncoef}), the a_lm of "
                f"{len(self.wavenumbers)} wavenumbers at T = {self.truncation}"
            )
        # The GPU's moves read rows of coefficients: a fancy-indexed or transposed array comes C-contiguous here.
        return self.xp.ascontiguousarray(a.astype(np.complex128, copy=False))

    def _fourier_wavenumbers(
        self, wavenumbers: Sequence[int] | np.ndarray | None, what: str = "wavenumbers"
    ) -> np.ndarray:
        t = self.truncation
        return index_set(wavenumbers, what, t + 1, f"wavenumbers m in 0..T = 0..{t}")


class ProductClock:
    """Seconds spent in the Legendre matrix products alone, apart from the moves around them (``operands``), on
    the device of ``xp``: a CUDA event pair around each product on the GPU, the host's clock on the CPU. Set one
    as a transform's ``product_clock`` (``DistributedTransform`` does) to split its Legendre time. Event pairs
    whose products have ended are read as new ones are recorded, so that none pile up however long it runs;
    ``seconds()`` waits for the rest."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self._seconds = 0.0
        self._pending: list[tuple[Any, Any]] = []  # event pairs recorded and not yet read
        self._spare: list[tuple[Any, Any]] = []  # event pairs read, to be recorded again

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Time what runs inside (on the current stream, on the GPU)."""
        if self.xp is np:
            start = time.perf_counter()
            yield
            self._seconds += time.perf_counter() - start
            return
        self._read(wait=False)
        pair = self._spare.pop() if self._spare else (self.xp.cuda.Event(), self.xp.cuda.Event())
        pair[0].record()
        yield
        pair[1].record()
        self._pending.append(pair)

    def seconds(self) -> float:
        """The products' seconds so far (waits for the last one timed to end)."""
        self._read(wait=True)
        return self._seconds

    def _read(self, wait: bool) -> None:
        """Add up the pending event pairs, oldest first: all of them (waiting for each), or without ``wait``
        those whose product has ended."""
        done = 0
        for start, stop in self._pending:
            if not (wait or stop.done):
                break
            stop.synchronize()
            self._seconds += self.xp.cuda.get_elapsed_time(start, stop) / 1e3
            done += 1
        self._spare += self._pending[:done]
        del self._pending[:done]

    def reset(self) -> None:
        """Start again from zero (what was pending is dropped)."""
        self.seconds()
        self._seconds = 0.0


def _bands(depths: np.ndarray, count: int) -> list[tuple[int, int]]:
    """Cut ``depths`` (descending) into at most ``count`` runs, each within one of ``count`` bands of equal
    width: a run padded to its first depth wastes less than one band's width per member."""
    if not len(depths):
        return []
    width = -(-(int(depths[0]) - int(depths[-1]) + 1) // count)
    band = (int(depths[0]) - depths) // width
    cuts = np.flatnonzero(np.diff(band)) + 1
    return list(itertools.pairwise([0, *cuts.tolist(), len(depths)]))


def _numbers(a: Any, what: str, complex_allowed: bool) -> Any:
    """``a`` if its dtype holds numbers the transform takes (integers, floats, and complex where allowed: values
    on the grid are real, and dropping an imaginary part would lose data), else FieldError."""
    kinds = "biufc" if complex_allowed else "biuf"
    if a.dtype.kind not in kinds:
        takes = "real or complex numbers" if complex_allowed else "real numbers (the grid holds real fields)"
        raise FieldError(f"{what} of dtype {a.dtype}: the transform takes {takes}")
    return a


def _real(a: Any) -> Any:
    """A C-contiguous complex array (..., batch) as the real array (..., 2 batch) of its parts: no copy."""
    return a.view(np.float64)


def _output(out: Any, shape: tuple[int, ...], what: str, dtype: Any = np.complex128) -> Any:
    """``out`` if it is a C-contiguous array of ``shape`` and ``dtype``, else FieldError."""
    if tuple(out.shape) != shape or out.dtype != np.dtype(dtype) or not out.flags.c_contiguous:
        raise FieldError(
            f"{what}: out has shape {tuple(out.shape)} and dtype {out.dtype}, expected a C-contiguous {shape} "
            f"{np.dtype(dtype)} array"
        )
    return out


def _values_layout(
    layout: tuple[int | Sequence[int] | np.ndarray, int] | None, lengths: np.ndarray
) -> tuple[int | np.ndarray, int]:
    """(first point, or each row's, and points per field) of the grid-value arrays of a Fourier half over rows of
    ``lengths`` points."""
    points = int(np.sum(lengths))
    if layout is None:
        return 0, points
    if np.ndim(layout[0]):
        starts = np.asarray(layout[0])
        if starts.shape != lengths.shape or not np.issubdtype(starts.dtype, np.integer) or np.any(starts < 0):
            raise ArgumentError(
                f"values_layout[0]: {len(lengths)} rows need as many first points, whole numbers from 0 on"
            )
        total = whole_number(layout[1], "values_layout[1]", least=int(np.max(starts + lengths, initial=0)),
                             meaning="points per field")  # fmt: skip
        return starts.astype(np.int64), total
    first = whole_number(layout[0], "values_layout[0]", least=0, meaning="the first point of these rows")
    total = whole_number(layout[1], "values_layout[1]", least=first + points, meaning="points per field")
    return first, total


def check_truncation(truncation: Any, grid: OctahedralGrid) -> int:
    """The truncation T on ``grid``: a whole number from 0 to N - 1; None gives N - 1."""
    n = grid.N
    if truncation is None:
        return n - 1
    t = whole_number(truncation, "truncation")
    if not 0 <= t <= n - 1:
        raise ArgumentError(
            f"truncation T = {t} on {grid.name}: T must be between 0 and N - 1 = {n - 1} "
            f"(the octahedral grid resolves up to T = N - 1, e.g. TCo{n - 1} on O{n})"
        )
    return t
