"""The spherical-harmonic transform on the octahedral grid (serial halves, distribution of the work):
checked against ducc0, an independent implementation, and against itself (round trips, subsets)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs_mpiexec
from gridcomm.apps.spectral import (
    SpectralTransform,
    coefficient_count,
    coefficient_index,
    row_bands,
    wavenumber_sets,
)
from gridcomm.grids.octahedral import OctahedralGrid

GRIDS = [16, 24, 32, 64]


def random_coefficients(truncation: int, batch: int, seed: int) -> np.ndarray:
    """Random a_lm of real fields: a_l0 real, every other a_lm complex, all of order 1."""
    rng = np.random.default_rng(seed)
    n = coefficient_count(truncation)
    a = rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))
    a[:, coefficient_index(np.arange(truncation + 1), 0, truncation)] = a[:, : truncation + 1].real
    return a


def ducc0_synthesis(grid: OctahedralGrid, truncation: int, a: np.ndarray) -> np.ndarray:
    ducc0 = pytest.importorskip("ducc0")
    rings = {
        "theta": np.pi / 2 - grid.latitudes,
        "nphi": grid.nlon.astype(np.uintp),
        "phi0": np.zeros(2 * grid.N),
        "ringstart": grid.offsets[:-1].astype(np.uintp),
    }
    return np.stack([ducc0.sht.synthesis(alm=row[None, :], lmax=truncation, spin=0, **rings)[0] for row in a])


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("n", GRIDS)
def test_inverse_matches_ducc0(n):
    grid = OctahedralGrid(n)
    transform = SpectralTransform(grid)
    a = random_coefficients(transform.truncation, 3, n)
    assert relative_error(transform.inverse(a), ducc0_synthesis(grid, transform.truncation, a)) < 1e-12


@pytest.mark.parametrize("n", GRIDS)
def test_direct_matches_the_weighted_adjoint_of_ducc0(n):
    """The direct transform is Gauss quadrature: ducc0's adjoint synthesis of the field times each point's
    area weight 2 pi w_row / n_row."""
    ducc0 = pytest.importorskip("ducc0")
    grid = OctahedralGrid(n)
    transform = SpectralTransform(grid)
    values = np.random.default_rng(n).standard_normal((2, grid.size))
    area = (2 * np.pi * grid.weights / grid.nlon)[grid.row]
    rings = {
        "theta": np.pi / 2 - grid.latitudes,
        "nphi": grid.nlon.astype(np.uintp),
        "phi0": np.zeros(2 * grid.N),
        "ringstart": grid.offsets[:-1].astype(np.uintp),
    }
    want = np.stack(
        [
            ducc0.sht.adjoint_synthesis(map=(v * area)[None, :], lmax=transform.truncation, spin=0, **rings)[0]
            for v in values
        ]
    )
    assert relative_error(transform.direct(values), want) < 1e-12


@pytest.mark.parametrize("n", GRIDS)
@pytest.mark.parametrize("truncation", [None, 7])
def test_direct_after_inverse_returns_the_coefficients(n, truncation):
    transform = SpectralTransform(n, truncation)
    a = random_coefficients(transform.truncation, 4, 2 * n)
    assert relative_error(transform.direct(transform.inverse(a)), a) < 1e-12


def test_halves_on_subsets_equal_the_whole_transform():
    """Legendre work on some wavenumbers and Fourier work on some rows, in any order, give the matching parts
    of the whole transform: the pieces a distributed transform runs on each rank."""
    grid = OctahedralGrid(20)
    whole = SpectralTransform(grid)
    t = whole.truncation
    a = random_coefficients(t, 2, 5)
    fourier = whole.legendre_inverse(a)
    values = whole.inverse(a)
    ms = np.array([7, 0, t, 3])
    part = SpectralTransform(grid, wavenumbers=ms)
    local = np.concatenate([a[:, coefficient_index(np.arange(m, t + 1), m, t)] for m in ms], axis=1)
    np.testing.assert_allclose(part.legendre_inverse(local), fourier[:, ms], rtol=0, atol=1e-13)
    np.testing.assert_allclose(part.legendre_direct(fourier[:, ms]), whole.legendre_direct(fourier)[:, _runs(ms, t)])
    rows = np.arange(5, 31)
    band = SpectralTransform(grid, rows=rows)
    mine = slice(grid.offsets[rows[0]], grid.offsets[rows[-1] + 1])
    order = np.random.default_rng(1).permutation(t + 1)  # the m in the order a transposition delivers them
    got = band.fourier_inverse(fourier[:, order][:, :, rows], wavenumbers=order)
    np.testing.assert_allclose(got, values[:, mine], rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        band.fourier_direct(values[:, mine], wavenumbers=order), whole.fourier_direct(values)[:, order][:, :, rows]
    )


def _runs(ms: np.ndarray, t: int) -> np.ndarray:
    return np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in ms])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="N - 1 = 15"):
        SpectralTransform(16, 16)
    transform = SpectralTransform(16)
    with pytest.raises(ValueError, match=r"expected \(batch, 136\)"):
        transform.inverse(np.zeros((1, 135), complex))
    with pytest.raises(ValueError, match="expected"):
        transform.direct(np.zeros((1, 10)))
    with pytest.raises(ValueError, match="outside"):
        SpectralTransform(16, wavenumbers=[16])
    with pytest.raises(ValueError, match="repeat"):
        SpectralTransform(16, rows=[1, 1])
    with pytest.raises(ValueError, match="Legendre and Fourier halves"):
        SpectralTransform(16, rows=[0, 1]).inverse(np.zeros((1, 136), complex))


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 7])
def test_row_bands_are_contiguous_and_balanced(nranks):
    grid = OctahedralGrid(24)
    bands = row_bands(grid.nlon, nranks)
    assert np.array_equal(np.concatenate(bands), np.arange(2 * grid.N))
    points = [int(grid.nlon[b].sum()) for b in bands]
    assert max(points) - min(points) <= 2 * grid.nlon.max()
    with pytest.raises(ValueError, match="ranks"):
        row_bands(grid.nlon, 2 * grid.N + 1)


@pytest.mark.parametrize("truncation", [0, 1, 15, 16, 639])
@pytest.mark.parametrize("nranks", [1, 2, 4, 8])
def test_wavenumber_sets_pair_m_with_t_minus_m(truncation, nranks):
    sets = wavenumber_sets(truncation, nranks)
    assert np.array_equal(np.sort(np.concatenate(sets)), np.arange(truncation + 1))
    costs = [int(np.sum(truncation - s + 1)) for s in sets]
    assert max(costs) - min(costs) <= truncation + 2  # within one pair (m, T - m)


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_distributed_transform_equals_serial(mpi_checks, nranks):
    """tests/mpi_programs/checks_spectral.py: wavenumbers and latitude bands over the ranks, the transposition
    in between, against the one-rank transform; and the dwarf's round trip."""
    mpi_checks("checks_spectral", nranks, timeout=180)
