"""Gauss-Legendre quadrature and normalised associated Legendre functions (gridcomm.lab.apps.spectral.legendre)."""

from __future__ import annotations

import numpy as np
import pytest

from gridcomm import GridcommError
from gridcomm.lab.apps.spectral.legendre import (
    gauss_legendre,
    gauss_legendre_colatitudes,
    legendre_functions,
    legendre_recurrence,
)

GL_SIZES = [1, 2, 3, 4, 5, 32, 1000, 1001, 4096, 8192]


# --- Gauss-Legendre quadrature ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", GL_SIZES)
def test_gauss_legendre_matches_ducc0(n: int) -> None:
    ducc0 = pytest.importorskip("ducc0")
    x, w = gauss_legendre(n)
    theta, w_theta = gauss_legendre_colatitudes(n)
    ref_theta = ducc0.misc.GL_thetas(n)
    # ducc0 returns ring weights for nphi points per ring: 2 pi / nphi times the Gauss weight.
    ref_w = ducc0.misc.GL_weights(n, 1) / (2.0 * np.pi)
    assert x.dtype == w.dtype == np.float64 and x.shape == w.shape == (n,)
    np.testing.assert_allclose(x, np.cos(ref_theta), rtol=0, atol=1e-14)
    np.testing.assert_allclose(theta, ref_theta, rtol=0, atol=1e-14)
    np.testing.assert_allclose(w, ref_w, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(w_theta, w)
    # Near the north pole the colatitudes carry relative precision, which arccos(x) could not give.
    north = ref_theta < 0.5
    np.testing.assert_allclose(theta[north], ref_theta[north], rtol=1e-14, atol=0)


@pytest.mark.parametrize("n", GL_SIZES)
def test_gauss_legendre_symmetry_order_and_sum(n: int) -> None:
    x, w = gauss_legendre(n)
    np.testing.assert_array_equal(x[::-1], -x)
    np.testing.assert_array_equal(w[::-1], w)
    if n % 2:
        assert x[n // 2] == 0.0
    assert np.all(np.diff(x) < 0) and x[-1] > -1 and x[0] < 1
    assert np.all(w > 0)
    assert abs(w.sum() - 2.0) < 1e-14
    theta, _ = gauss_legendre_colatitudes(n)
    assert np.all(np.diff(theta) > 0) and theta[0] > 0 and theta[-1] < np.pi


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_gauss_legendre_is_exact_to_degree_2n_minus_1(n: int) -> None:
    x, w = gauss_legendre(n)
    for j in range(n):  # even powers; odd ones vanish by the exact symmetry
        assert w @ x ** (2 * j) == pytest.approx(2.0 / (2 * j + 1), rel=1e-14, abs=1e-15)


# --- Legendre functions ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gauss_2048() -> tuple[np.ndarray, np.ndarray]:
    theta, w = gauss_legendre_colatitudes(2048)
    return theta, w


def _ducc0_sum(ducc0, alm: np.ndarray, m: int, lmax: int, theta: np.ndarray) -> np.ndarray:
    """sum_l alm[l-m] lambda_l^m(cos theta) from ducc0.sht.alm2leg, for one m (spin 0)."""
    # alm stores l = m .. lmax from index 0, so the hypothetical l = 0 entry sits at -m (modulo 2**64).
    mstart = np.array([-m], dtype=np.int64).astype(np.uintp)
    leg = ducc0.sht.alm2leg(alm=alm[None, :], lmax=lmax, theta=theta, mval=np.array([m], np.uintp), mstart=mstart)
    return leg[0, :, 0]


@pytest.mark.parametrize("m", [0, 1, 2, 100, 1000, 2046, 2047])
def test_legendre_functions_match_ducc0(m: int, gauss_2048: tuple[np.ndarray, np.ndarray]) -> None:
    """Random complex a_lm test every l at once: sum_l a_lm lambda_l^m against ducc0's Legendre synthesis."""
    ducc0 = pytest.importorskip("ducc0")
    theta, _ = gauss_2048
    lmax = 2047
    x, s = np.cos(theta), np.sin(theta)
    lam = legendre_functions(m, lmax, x, sin_theta=s)
    assert lam.shape == (lmax - m + 1, theta.size) and lam.dtype == np.float64
    rng = np.random.default_rng(m)
    alm = rng.standard_normal(lmax - m + 1) + 1j * rng.standard_normal(lmax - m + 1)
    ours, ref = alm @ lam, _ducc0_sum(ducc0, alm, m, lmax, theta)
    scale = np.abs(ref).max()
    # Near the poles lambda_l^m(x) is ill-conditioned in x for small m (d lambda/dx ~ l^2 lambda), and ducc0 and we
    # round x = cos(theta) (ducc0 near the poles via cos^2 = (1-sin)(1+sin)) differently. Allow one ulp of x on top
    # of 1e-12 of the largest magnitude: dlambda_l/dx = (c_l lambda_{l-1} - l x lambda_l) / sin^2(theta) with
    # c_l = sqrt((2l+1)/(2l-1) (l^2 - m^2)), summed without cancellation.
    ell = np.arange(m, lmax + 1)[1:, None]
    dlam = (np.sqrt((2.0 * ell + 1) / (2.0 * ell - 1) * (ell - m) * (ell + m)) * lam[:-1] - ell * x * lam[1:]) / s**2
    tolerance = 1e-12 * scale + np.spacing(1.0) * (np.abs(alm[1:]) @ np.abs(dlam))
    assert np.all(np.abs(ours - ref) <= tolerance), np.max(np.abs(ours - ref) / tolerance)
    if m >= 1000:  # far from the poles, where the conditioning is benign: plain 1e-12 of the largest magnitude
        assert np.abs(ours - ref).max() <= 1e-12 * scale


@pytest.mark.parametrize("m", [0, 3, 250, 499, 500])
def test_legendre_functions_orthonormal_under_gauss_quadrature(m: int) -> None:
    lmax = 500
    x, w = gauss_legendre(lmax + 1)  # exact to degree 2 lmax + 1; lambda_l^m lambda_l'^m has degree l + l'
    lam = legendre_functions(m, lmax, x)
    gram = (lam * w) @ lam.T
    np.testing.assert_allclose(2.0 * np.pi * gram, np.eye(lmax - m + 1), rtol=0, atol=1e-12)


def test_legendre_functions_no_overflow_or_underflow_at_large_m() -> None:
    lmax, m = 4095, 4000
    theta, w = gauss_legendre_colatitudes(lmax + 1)
    x, s = np.cos(theta), np.sin(theta)
    lam = legendre_functions(m, lmax, x, sin_theta=s)
    assert np.all(np.isfinite(lam))
    # Sectoral values near the equator have the closed form (-1)^m sqrt(prod (2i+1)/(2i) / (4 pi)) sin^m ~ 2.38.
    i = np.arange(1, m + 1)
    prefactor = np.sqrt(np.prod((2.0 * i + 1) / (2.0 * i)) / (4.0 * np.pi))
    equator = np.abs(x) < 0.02
    np.testing.assert_allclose(lam[0, equator], prefactor * s[equator] ** m, rtol=1e-12)
    assert 2.3 < np.abs(lam[:, equator]).max() < 2.5
    # Underflowed values are exact zeros, never subnormals; and near the poles they are all zero.
    assert np.all((lam == 0) | (np.abs(lam) >= np.finfo(np.float64).tiny))
    assert np.all(lam[:, np.abs(x) > 0.9] == 0)
    # Values recovered from far below the double range are still right: norms under the exact quadrature.
    np.testing.assert_allclose(2.0 * np.pi * (lam**2) @ w, 1.0, rtol=0, atol=1e-12)
    # The highest m at this lmax (lambda ~ sin^4095) survives only near the equator, still orthonormal.
    top = legendre_functions(lmax, lmax, x, sin_theta=s)
    assert np.all(np.isfinite(top)) and np.count_nonzero(top) > 0
    assert 2.0 * np.pi * (top[0] ** 2) @ w == pytest.approx(1.0, abs=1e-12)


def test_legendre_functions_parity_poles_and_small_cases() -> None:
    x, _ = gauss_legendre(64)
    lam = legendre_functions(3, 40, x)
    sign = (-1.0) ** (np.arange(3, 41) + 3)
    np.testing.assert_array_equal(lam[:, ::-1], sign[:, None] * lam)
    # Closed forms: lambda_0^0 = 1/sqrt(4 pi), lambda_1^0 = sqrt(3/(4 pi)) x, lambda_1^1 = -sqrt(3/(8 pi)) sin.
    pts = np.array([1.0, 0.3, 0.0, -1.0])
    np.testing.assert_allclose(
        legendre_functions(0, 1, pts), [np.full(4, (4 * np.pi) ** -0.5), 3**0.5 * pts / (4 * np.pi) ** 0.5]
    )
    np.testing.assert_allclose(legendre_functions(1, 1, pts)[0], -np.sqrt(3 / (8 * np.pi) * (1 - pts**2)), atol=1e-16)
    # At the poles only m = 0 survives: lambda_l^0(+-1) = (+-1)^l sqrt((2l+1)/(4 pi)).
    assert np.all(legendre_functions(5, 20, np.array([1.0, -1.0])) == 0)
    ell = np.arange(21)
    pole = np.sqrt((2 * ell + 1) / (4 * np.pi))
    np.testing.assert_allclose(
        legendre_functions(0, 20, np.array([1.0, -1.0])), np.stack([pole, (-1.0) ** ell * pole], 1)
    )
    # Without sin_theta, sqrt((1-x)(1+x)) is used: same values away from the poles.
    theta = np.linspace(0.3, 2.8, 50)
    np.testing.assert_allclose(
        legendre_functions(7, 300, np.cos(theta)), legendre_functions(7, 300, np.cos(theta), np.sin(theta)), atol=1e-13
    )
    assert legendre_functions(4, 4, []).shape == (1, 0)


def test_legendre_recurrence_coefficients() -> None:
    m, lmax = 5, 12
    a, b = legendre_recurrence(m, lmax)
    assert a.shape == b.shape == (lmax - m,)
    assert a[0] == pytest.approx(np.sqrt(2 * m + 3)) and b[0] == 0
    ell = np.arange(m + 1, lmax + 1)
    np.testing.assert_allclose(a, np.sqrt((4.0 * ell**2 - 1) / (ell**2 - m**2)))
    np.testing.assert_allclose(b, np.sqrt(((ell - 1.0) ** 2 - m**2) / (4.0 * (ell - 1) ** 2 - 1)))
    assert legendre_recurrence(3, 3)[0].shape == (0,)


# --- Input validation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"m": 5, "lmax": 4, "x": [0.0]}, r"lmax=4: must be at least 5 \(the largest degree, at least m\)"),
        ({"m": -1, "lmax": 4, "x": [0.0]}, "m=-1: must be at least 0"),
        ({"m": 1.5, "lmax": 4, "x": [0.0]}, r"m=1.5 \(float\): give a whole number"),
        ({"m": 0, "lmax": True, "x": [0.0]}, r"lmax=True \(bool\): give a whole number"),
        ({"m": 0, "lmax": 4, "x": [0.5, 1.0000001]}, r"x must lie within \[-1, 1\]"),
        ({"m": 0, "lmax": 4, "x": [-1.5]}, r"x must lie within \[-1, 1\]"),
        ({"m": 0, "lmax": 4, "x": [np.nan]}, "x contains NaN"),
        ({"m": 0, "lmax": 4, "x": [[0.0, 0.5]]}, "x must be 1-D"),
        ({"m": 0, "lmax": 4, "x": 0.5}, "x must be 1-D"),
        ({"m": 0, "lmax": 4, "x": [0.0, 0.5], "sin_theta": [1.0]}, "same shape as x"),
        ({"m": 0, "lmax": 4, "x": [0.0], "sin_theta": [1.5]}, r"sin_theta must lie within \[0, 1\]"),
        ({"m": 0, "lmax": 4, "x": [0.6], "sin_theta": [0.6]}, "sin_theta must be sin"),
    ],
)
def test_legendre_functions_rejects_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(GridcommError, match=match):  # ArgumentError (a ValueError) or ArgumentTypeError
        legendre_functions(**kwargs)


@pytest.mark.parametrize(
    ("n", "match"),
    [(0, "n=0: must be at least 1"), (-3, "n=-3: must be at least 1"), (2.0, "n=2.0 \\(float\\): give a whole number")],
)
def test_gauss_legendre_rejects_bad_n(n: object, match: str) -> None:
    with pytest.raises(GridcommError, match=match):
        gauss_legendre(n)  # type: ignore[arg-type]
    with pytest.raises(GridcommError, match=match):
        gauss_legendre_colatitudes(n)  # type: ignore[arg-type]


def test_numpy_integers_are_accepted() -> None:
    x, w = gauss_legendre(np.int64(4))
    assert w.sum() == pytest.approx(2.0)
    assert legendre_functions(np.int32(1), np.int64(3), x).shape == (3, 4)
