"""Gauss-Legendre quadrature and normalised associated Legendre functions.

Conventions (those of ducc0, healpy and libsharp):

* ``theta`` is the colatitude in radians (0 at the north pole), ``x = cos(theta)``.
* Gauss-Legendre nodes are ordered north to south (``x`` descending) and their weights sum to 2,
  the length of ``[-1, 1]``; a ring of ``nphi`` equally spaced points then has area weight
  ``w_k * 2 pi / nphi`` (this is what ``ducc0.misc.GL_weights(n, nphi)`` returns).
* ``lambda_l^m(x) = (-1)^m sqrt((2l+1)/(4 pi) (l-m)!/(l+m)!) P_l^m(x)`` with the Condon-Shortley phase, so that
  ``Y_lm(theta, phi) = lambda_l^m(cos theta) exp(i m phi)`` is orthonormal on the unit sphere and
  ``int_{-1}^{1} lambda_l^m lambda_l'^m dx = delta_ll' / (2 pi)``.
"""

from __future__ import annotations

import numpy as np

from ....arguments import whole_number
from ....errors import ArgumentError
from ....grids.gauss import gauss_legendre, gauss_legendre_colatitudes

__all__ = ["gauss_legendre", "gauss_legendre_colatitudes", "legendre_functions", "legendre_recurrence"]

# Scaled values are mantissa * 2**(_SCALE_BITS * k) with an integer k <= 0 per point, and |mantissa| <= _SCALE_LIMIT
# while k < 0. Past the limit, k is raised and the mantissa divided by 2**_SCALE_BITS, which leaves it well above
# underflow; a recurrence step grows a mantissa by far less than the 2**(1023 - 256) headroom above the limit.
_SCALE_BITS = 512
_SCALE_LIMIT = 2.0**256
_TINY = np.finfo(np.float64).tiny  # smallest normal double


def legendre_recurrence(m: int, lmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients of the recurrence in l for the normalised functions lambda_l^m (order m fixed).

    Returns ``(a, b)``, float64 arrays of length ``lmax - m`` for ``l = m+1 .. lmax`` (index ``l - m - 1``), with

        lambda_l^m = a_l (x lambda_{l-1}^m - b_l lambda_{l-2}^m),
        a_l = sqrt((4 l^2 - 1) / (l^2 - m^2)),   b_l = sqrt(((l-1)^2 - m^2) / (4 (l-1)^2 - 1)).

    For ``l = m+1`` this gives ``a = sqrt(2m+3)``, ``b = 0``: the first step needs no separate formula.
    """
    m, lmax = _check_degrees(m, lmax)
    ell = np.arange(m + 1, lmax + 1, dtype=np.float64)
    # Integer-valued products (exact in float64 for l < 2**26) before a single division and sqrt.
    a = np.sqrt((2.0 * ell - 1.0) * (2.0 * ell + 1.0) / ((ell - m) * (ell + m)))
    b = np.sqrt((ell - 1.0 - m) * (ell - 1.0 + m) / ((2.0 * ell - 3.0) * (2.0 * ell - 1.0)))
    return a, b


def _check_degrees(m: object, lmax: object) -> tuple[int, int]:
    m = whole_number(m, "m", least=0, meaning="the zonal wavenumber")
    lmax = whole_number(lmax, "lmax", least=m, meaning="the largest degree, at least m")
    return m, lmax


def _check_points(arr: object, name: str, lo: float, hi: float, shape: tuple[int, ...] | None = None) -> np.ndarray:
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 1:
        raise ArgumentError(f"{name} must be 1-D, got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ArgumentError(f"{name} must have the same shape as x {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ArgumentError(f"{name} contains NaN or infinite values")
    if arr.size and (arr.min() < lo or arr.max() > hi):
        raise ArgumentError(f"{name} must lie within [{lo:g}, {hi:g}], got values in [{arr.min():g}, {arr.max():g}]")
    return arr


def legendre_functions(m: int, lmax: int, x: np.ndarray, sin_theta: np.ndarray | None = None) -> np.ndarray:
    """Normalised associated Legendre functions lambda_l^m(x) for l = m .. lmax at the points x.

    Parameters
    ----------
    m : int
        Order, ``0 <= m <= lmax``.
    lmax : int
        Largest degree (inclusive).
    x : array_like, shape (npoints,)
        ``cos(theta)`` in [-1, 1], theta the colatitude.
    sin_theta : array_like, shape (npoints,), optional
        ``sin(theta)`` in [0, 1], default ``sqrt((1-x)(1+x))``. Pass it when theta is known (e.g. Gaussian
        colatitudes): the rounding of ``x = cos(theta)`` near the poles makes the default wrong by about
        ``1e-16 / (1-|x|)`` relative, an error that ``lambda_m^m ~ sin(theta)^m`` multiplies by m.

    Returns
    -------
    ndarray of float64, shape (lmax - m + 1, npoints)
        ``lambda_l^m(x)`` at row ``l - m`` (dimensionless; ``Y_lm = lambda_l^m(cos theta) e^{i m phi}`` is
        orthonormal on the unit sphere). Values below the smallest normal double (~2.2e-308) are returned as 0.

    Notes
    -----
    ``lambda_m^m`` underflows for large m near the poles although the ``lambda_l^m`` it seeds grow back to O(1) at
    larger l. Each point therefore carries its values as ``mantissa * 2**(512 k)`` with its own integer ``k <= 0``
    (as libsharp and ducc0 do), raised whenever a mantissa outgrows ``2**256``, and converted to plain doubles
    row by row. Cost O((lmax - m) * npoints).

    Near the poles lambda_l^m is ill-conditioned in x for small m: ``d lambda / dx ~ l^2 lambda``, so the rounding
    of ``x = cos(theta)`` alone (1.1e-16) changes it by ~``l^2 * 1e-16`` relative (5e-10 at l = 2047, m = 0);
    any double-precision code evaluating at rounded x (ducc0 included) differs from the exact value by that.
    """
    m, lmax = _check_degrees(m, lmax)
    x = _check_points(x, "x", -1.0, 1.0)
    if sin_theta is None:
        sin_theta = np.sqrt((1.0 - x) * (1.0 + x))  # no cancellation in 1 - x^2 near |x| = 1
    else:
        sin_theta = _check_points(sin_theta, "sin_theta", 0.0, 1.0, x.shape)
        if np.any(np.abs(x * x + sin_theta * sin_theta - 1.0) > 1e-8):
            raise ArgumentError("sin_theta must be sin(theta) for x = cos(theta): x**2 + sin_theta**2 differs from 1")

    # Sectoral start lambda_m^m = (-1)^m sqrt(1/(4 pi) prod_{i=1..m} (2i+1)/(2i)) sin(theta)^m, with sin^m formed
    # by binary powering on (mantissa, exponent) pairs so that it never underflows.
    i = np.arange(1, m + 1, dtype=np.float64)
    mant = np.full_like(x, (-1.0) ** m * np.sqrt(np.prod((2.0 * i + 1.0) / (2.0 * i)) / (4.0 * np.pi)))
    expo = np.zeros(x.shape, dtype=np.intc)  # C int: what frexp returns and ldexp takes on every platform
    base, base_expo = np.frexp(sin_theta)
    power = m
    while power:
        if power & 1:
            mant, e = np.frexp(mant * base)
            expo += base_expo + e
        power >>= 1
        if power:
            base, e = np.frexp(base * base)
            base_expo = 2 * base_expo + e
    # Split the binary exponent into a scale k <= 0 (units of 2**512) and a mantissa below 2**256 where k < 0;
    # values above 2**-257 start unscaled (k = 0).
    scale = np.minimum((expo + _SCALE_BITS // 2) // _SCALE_BITS, 0)
    p1 = np.ldexp(mant, expo - _SCALE_BITS * scale)  # lambda_{l-1}, scaled
    p2 = np.zeros_like(x)  # lambda_{l-2}, scaled (lambda_{m-1}^m = 0)

    out = np.empty((lmax - m + 1, x.size))
    out[0] = np.ldexp(p1, _SCALE_BITS * scale)
    a, b = legendre_recurrence(m, lmax)
    for row in range(1, lmax - m + 1):
        p1, p2 = a[row - 1] * (x * p1 - b[row - 1] * p2), p1
        if scale.any():  # some points still scaled: renormalise those that grew, then unscale the row
            big = (np.abs(p1) > _SCALE_LIMIT) & (scale < 0)
            if big.any():
                p1[big] = np.ldexp(p1[big], -_SCALE_BITS)
                p2[big] = np.ldexp(p2[big], -_SCALE_BITS)
                scale[big] += 1
            out[row] = np.ldexp(p1, _SCALE_BITS * scale)
        else:
            out[row] = p1
    out[np.abs(out) < _TINY] = 0.0  # subnormal results carry no useful precision
    return out
