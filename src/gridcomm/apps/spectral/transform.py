"""Spherical-harmonic transforms between the octahedral grid O-N and complex coefficients a_lm.

Conventions (those of ducc0, healpy and libsharp):

- a real field f(theta, phi) = sum_l [a_l0 Y_l0 + 2 Re sum_{m=1..l} a_lm Y_lm], with orthonormal
  Y_lm = lambda_l^m(cos theta) e^{i m phi} (Condon-Shortley phase; ``legendre.legendre_functions``);
- coefficients of one field are complex, in m-major triangular order: a_lm at index
  m (2T + 1 - m) / 2 + l for 0 <= m <= l <= T (``coefficient_index``); a_l0 is real;
- grid values follow ``OctahedralGrid``'s point order: rows north to south, each row from longitude 0
  eastwards; the truncation T is at most N - 1 (TCo(N-1) for O-N by default).

Each transform has two halves, so that a distributed transform can transpose in between:

- Legendre (per zonal wavenumber m, over all latitude rows): F_m(row) = sum_l a_lm lambda_l^m(x_row), done as
  two real matrix products per m, one for l - m even and one for l - m odd, on the northern rows only (the
  southern rows follow from lambda_l^m(-x) = (-1)^(l+m) lambda_l^m(x)); fields and levels batched as rows of
  the matrices;
- Fourier (per latitude row, over all m): f(row, phi_k) from the F_m by an inverse real FFT of the row's own
  length, rows of equal length batched. A row of n points cannot hold m >= n / 2: those wavenumbers fold
  (alias) onto m mod n, which the octahedral grid keeps exponentially small, as it must for T = N - 1.

The direct transform is the Gauss quadrature of the same sums (rows are Gaussian latitudes): exact up to that
aliasing, so ``direct(inverse(a))`` returns ``a`` to round-off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...grids.octahedral import OctahedralGrid
from .legendre import legendre_functions


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
        xp: the array module (numpy, or cupy for arrays on the GPU).

    Arrays are batched on their first axis (fields times levels): coefficients (batch, ncoef) complex,
    grid values (batch, points of ``rows``) real, Fourier coefficients (batch, m, rows) complex.
    """

    def __init__(
        self,
        grid: OctahedralGrid | str | int,
        truncation: int | None = None,
        *,
        wavenumbers: Sequence[int] | np.ndarray | None = None,
        rows: Sequence[int] | np.ndarray | None = None,
        xp: Any = np,
    ) -> None:
        self.grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
        n = self.grid.N
        self.truncation = n - 1 if truncation is None else int(truncation)
        if not 0 <= self.truncation <= n - 1:
            raise ValueError(
                f"truncation T = {truncation} on {self.grid.name}: T must be between 0 and N - 1 = {n - 1} "
                f"(the octahedral grid resolves up to T = N - 1, e.g. TCo{n - 1} on O{n})"
            )
        self.xp = xp
        t = self.truncation
        self.wavenumbers = _checked_subset(wavenumbers, t + 1, "wavenumbers", f"0..T = 0..{t}")
        self.rows = _checked_subset(rows, 2 * n, "rows", f"0..{2 * n - 1}")
        self.ncoef = int(np.sum(t - self.wavenumbers + 1))
        self._coef_offsets = np.concatenate([[0], np.cumsum(t - self.wavenumbers + 1)]).astype(np.int64)
        # Quadrature on the northern rows; the southern ones mirror them (exact symmetry in OctahedralGrid).
        x = np.sin(self.grid.latitudes[:n])
        sin_theta = np.cos(self.grid.latitudes[:n])
        self._weights = xp.asarray(2.0 * np.pi * self.grid.weights)
        self._tables = [self._legendre_table(int(m), x, sin_theta) for m in self.wavenumbers]
        self._row_groups = self._group_rows()
        self.points = int(np.sum(self.grid.nlon[self.rows]))
        self._point_offsets = np.concatenate([[0], np.cumsum(self.grid.nlon[self.rows])]).astype(np.int64)

    # -- set-up ---------------------------------------------------------------------------------------------

    def _legendre_table(self, m: int, x: np.ndarray, sin_theta: np.ndarray) -> tuple[Any, Any]:
        """lambda_l^m on the northern rows, split by the parity of l - m: (even (n_e, N), odd (n_o, N))."""
        table = legendre_functions(m, self.truncation, x, sin_theta=sin_theta)
        return self.xp.asarray(table[0::2]), self.xp.asarray(table[1::2])

    def _group_rows(self) -> list[tuple[int, np.ndarray]]:
        """(points per row, positions in ``rows`` of the rows of that length): rows FFT'd together."""
        nlon = self.grid.nlon[self.rows]
        return [(int(length), np.nonzero(nlon == length)[0]) for length in np.unique(nlon)]

    # -- Legendre half ----------------------------------------------------------------------------------------

    def legendre_inverse(self, coefficients: Any) -> Any:
        """(batch, ncoef) coefficients of this object's wavenumbers -> (batch, m, 2N) Fourier coefficients
        F_m(row) on every row."""
        xp, n = self.xp, self.grid.N
        a = self._coefficients(coefficients)
        batch = a.shape[0]
        out = xp.empty((batch, len(self.wavenumbers), 2 * n), dtype=np.complex128)
        for k, (even, odd) in enumerate(self._tables):
            run = a[:, self._coef_offsets[k] : self._coef_offsets[k + 1]]
            symmetric = _real_product(xp, run[:, 0::2], even)  # (batch, N): the l - m even part
            antisymmetric = _real_product(xp, run[:, 1::2], odd)
            out[:, k, :n] = symmetric + antisymmetric
            out[:, k, n:] = (symmetric - antisymmetric)[:, ::-1]
        return out

    def legendre_direct(self, fourier: Any) -> Any:
        """(batch, m, 2N) Fourier coefficients on every row -> (batch, ncoef) coefficients by Gauss quadrature."""
        xp, n = self.xp, self.grid.N
        f = xp.asarray(fourier)
        if f.ndim != 3 or f.shape[1:] != (len(self.wavenumbers), 2 * n):
            raise ValueError(
                f"Fourier coefficients of shape {tuple(f.shape)}: expected (batch, {len(self.wavenumbers)}, {2 * n})"
            )
        g = f * self._weights
        north, south = g[:, :, :n], g[:, :, n:][:, :, ::-1]
        out = xp.empty((f.shape[0], self.ncoef), dtype=np.complex128)
        for k, (even, odd) in enumerate(self._tables):
            run = out[:, self._coef_offsets[k] : self._coef_offsets[k + 1]]
            run[:, 0::2] = _real_product(xp, north[:, k] + south[:, k], even.T)
            run[:, 1::2] = _real_product(xp, north[:, k] - south[:, k], odd.T)
        return out

    # -- Fourier half -----------------------------------------------------------------------------------------

    def fourier_inverse(self, fourier: Any, wavenumbers: Sequence[int] | np.ndarray | None = None) -> Any:
        """(batch, m, rows) Fourier coefficients -> (batch, points) grid values of this object's rows.

        ``wavenumbers`` names the m of axis 1 (default 0..T); m >= n / 2 folds onto m mod n in a row of n points.
        """
        xp = self.xp
        ms = self._fourier_wavenumbers(wavenumbers)
        f = xp.asarray(fourier)
        if f.ndim != 3 or f.shape[1:] != (len(ms), len(self.rows)):
            raise ValueError(
                f"Fourier coefficients of shape {tuple(f.shape)}: expected (batch, {len(ms)}, {len(self.rows)}) "
                f"for {len(ms)} wavenumbers on {len(self.rows)} rows"
            )
        batch = f.shape[0]
        values = xp.empty((batch, self.points), dtype=np.float64)
        m_index = xp.asarray(ms)
        zero = np.nonzero(ms == 0)[0]
        for length, where in self._row_groups:
            rows_f = xp.moveaxis(f[:, :, where], 1, 2)  # (batch, R, M)
            if ms.max() < length // 2:  # the row holds every m: no folding (all but the polar rows)
                half_spectrum = xp.zeros((batch, len(where), length // 2 + 1), dtype=np.complex128)
                half_spectrum[:, :, m_index] = rows_f
            else:
                half_spectrum = _folded(xp, rows_f, m_index, zero, int(ms.max()), length)
            rows_values = xp.fft.irfft(half_spectrum, n=length, axis=-1, norm="forward")
            for j, position in enumerate(where):
                a, b = self._point_offsets[position], self._point_offsets[position + 1]
                values[:, a:b] = rows_values[:, j]
        return values

    def fourier_direct(self, values: Any, wavenumbers: Sequence[int] | np.ndarray | None = None) -> Any:
        """(batch, points) grid values of this object's rows -> (batch, m, rows) Fourier coefficients
        (1 / n) sum_k f_k e^{-i m phi_k}, for the m of ``wavenumbers`` (default 0..T)."""
        xp = self.xp
        ms = self._fourier_wavenumbers(wavenumbers)
        v = xp.asarray(values)
        if v.ndim != 2 or v.shape[1] != self.points:
            raise ValueError(
                f"grid values of shape {tuple(v.shape)}: expected (batch, {self.points}), the points of "
                f"{len(self.rows)} rows of {self.grid.name}"
            )
        out = xp.empty((v.shape[0], len(ms), len(self.rows)), dtype=np.complex128)
        for length, where in self._row_groups:
            block = xp.stack([v[:, self._point_offsets[p] : self._point_offsets[p + 1]] for p in where], 1)
            spectrum = xp.fft.rfft(block, axis=-1, norm="forward")  # (batch, R, n/2 + 1)
            r = ms % length
            upper = r > length // 2
            picked = spectrum[:, :, xp.asarray(np.where(upper, length - r, r))]
            picked = xp.where(xp.asarray(upper), xp.conj(picked), picked)
            out[:, :, xp.asarray(where)] = xp.moveaxis(picked, 2, 1)
        return out

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

    def _whole(self, what: str) -> None:
        t, n = self.truncation, self.grid.N
        if len(self.wavenumbers) != t + 1 or len(self.rows) != 2 * n:
            raise ValueError(
                f"{what}: this transform owns {len(self.wavenumbers)} of {t + 1} wavenumbers and "
                f"{len(self.rows)} of {2 * n} rows; use the Legendre and Fourier halves with a transposition"
            )

    def _coefficients(self, coefficients: Any) -> Any:
        a = self.xp.asarray(coefficients)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.shape[1] != self.ncoef:
            raise ValueError(
                f"coefficients of shape {tuple(a.shape)}: expected (batch, {self.ncoef}), the a_lm of "
                f"{len(self.wavenumbers)} wavenumbers at T = {self.truncation}"
            )
        return a.astype(np.complex128, copy=False)

    def _fourier_wavenumbers(self, wavenumbers: Sequence[int] | np.ndarray | None) -> np.ndarray:
        if wavenumbers is None:
            return np.arange(self.truncation + 1)
        return _checked_subset(wavenumbers, self.truncation + 1, "wavenumbers", f"0..T = 0..{self.truncation}")


def _folded(xp: Any, rows_f: Any, m_index: Any, zero: np.ndarray, m_max: int, length: int) -> Any:
    """The half spectrum (batch, R, n/2 + 1) of rows of ``length`` points holding wavenumbers up to ``m_max``
    >= n / 2: each m adds to bin m mod n, and its conjugate (the -m of a real field) to bin -m mod n."""
    batch, nrows = rows_f.shape[:2]
    span = -(-(m_max + 1) // length) * length  # whole turns of the row's spectrum
    spectrum = xp.zeros((batch, nrows, span), dtype=np.complex128)
    spectrum[:, :, m_index] = rows_f
    folded = spectrum.reshape(batch, nrows, span // length, length).sum(axis=2)
    positive = folded.copy()  # the m > 0 part, whose conjugates are the negative wavenumbers
    if len(zero):
        positive[:, :, 0] -= rows_f[:, :, int(zero[0])]
    half = np.arange(length // 2 + 1)
    return folded[:, :, half] + xp.conj(positive[:, :, xp.asarray((length - half) % length)])


def _checked_subset(values: Sequence[int] | np.ndarray | None, n: int, what: str, allowed: str) -> np.ndarray:
    """``values`` as distinct ints within [0, n) (default all of them), or ValueError naming the problem."""
    if values is None:
        return np.arange(n)
    out = np.asarray(values, dtype=np.int64).reshape(-1)
    if out.size and (out.min() < 0 or out.max() >= n):
        raise ValueError(f"{what} {out.min()}..{out.max()} lie outside {allowed}")
    if len(np.unique(out)) != out.size:
        raise ValueError(f"{what} repeat a value: each may appear once")
    return out


def _real_product(xp: Any, a: Any, table: Any) -> Any:
    """Complex (batch, k) times real (k, n) as one real matrix product of the stacked real and imaginary
    parts (half the work of promoting the table to complex)."""
    batch = a.shape[0]
    stacked = xp.concatenate([a.real, a.imag], axis=0)
    product = stacked @ table
    return product[:batch] + 1j * product[batch:]
