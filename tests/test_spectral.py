"""The spherical-harmonic transform on the octahedral grid (serial halves, distribution of the work):
checked against ducc0, an independent implementation, and against itself (round trips, subsets)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import needs_mpiexec
from gridcomm.errors import ArgumentError
from gridcomm.grids.octahedral import OctahedralGrid
from gridcomm.lab.apps.spectral import (
    SpectralTransform,
    coefficient_count,
    coefficient_index,
    row_bands,
    row_shares,
    wavenumber_sets,
)
from gridcomm.lab.apps.spectral.dwarf import random_coefficients as rank_coefficients
from gridcomm.lab.apps.spectral.fourier import folding_table, plan_folding
from gridcomm.lab.apps.spectral.legendre import legendre_functions
from gridcomm.lab.apps.spectral.transform import MAX_BUCKETS
from gridcomm.lab.bench.spectral import ducc0_geometry

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
    rings, _ = ducc0_geometry(grid)
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
    rings, area = ducc0_geometry(grid)
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


@pytest.mark.parametrize("n, nranks", [(640, 4), (640, 8), (24, 2), (24, 3), (17, 4), (16, 8)])
def test_row_shares_give_every_rank_as_many_rows_and_points(n, nranks):
    """Bands balanced by points alone give O640's polar ranks 451 rows and its equatorial ones 189 on 4 ranks, and
    each rank receives its rows' share of the transposition: row_shares evens out both."""
    grid = OctahedralGrid(n)
    shares = row_shares(grid.nlon, nranks)
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(2 * n))
    assert all(np.array_equal(s, np.sort(s)) for s in shares)
    rows = [len(s) for s in shares]
    points = [int(grid.nlon[s].sum()) for s in shares]
    pairs = (n // 2) // nranks  # northern pairs of rows per rank, give or take one
    assert max(rows) - min(rows) <= 4 + 2 * (n % 2), rows
    assert max(points) - min(points) <= 2 * (grid.nlon[0] + grid.nlon[n - 1]) + 2 * (n % 2) * grid.nlon.max()
    for s in shares:  # every row's southern mirror on the same rank
        assert np.array_equal(np.sort(2 * n - 1 - s), s)
    if (n // 2) % nranks == 0 and n % 2 == 0:
        assert len(set(rows)) == 1 and len(set(points)) == 1 and rows[0] == 4 * pairs
    bands = row_bands(grid.nlon, nranks)
    if n == 640 and nranks == 4:
        assert [len(b) for b in bands] == [452, 188, 189, 451] and rows == [320] * 4


def test_row_shares_fall_back_to_bands_where_there_are_too_few_rows():
    grid = OctahedralGrid(8)
    for nranks in (5, 16):
        shares, bands = row_shares(grid.nlon, nranks), row_bands(grid.nlon, nranks)
        assert all(np.array_equal(a, b) for a, b in zip(shares, bands, strict=True))


@pytest.mark.parametrize("n, nranks", [(48, 2), (48, 4), (17, 3), (8, 1)])
def test_legendre_parts_give_the_whole_bit_for_bit(n, nranks):
    """A rank's Legendre products cut into parts (``legendre_parts``: runs of whole products that tile its m axis
    in order), each part's inverse and direct run on its own, give bit for bit what the whole gives (a pipelined
    dwarf runs its products stage by stage); a part that cuts a product is refused, and wavenumbers that do not
    ascend make one part."""
    grid = OctahedralGrid(n)
    ms = wavenumber_sets(grid.N - 1, nranks)[-1]
    transform = SpectralTransform(grid, wavenumbers=ms)
    batch = 3
    parts = transform.legendre_parts(batch)
    assert parts[0][0] == 0 and parts[-1][1] == len(ms) and len(parts) > (n > 8)
    assert all(stop == first for (_, stop), (first, _) in itertools.pairwise(parts))
    a = rank_coefficients(transform.truncation, ms, batch, seed=5)
    fourier = transform.legendre_inverse(a)
    pieces = [transform.legendre_inverse(a, part=part) for part in parts]
    assert np.array_equal(np.concatenate(pieces, axis=1), fourier)
    out = np.full_like(a, np.nan)
    for part, piece in zip(parts, pieces, strict=True):
        transform.legendre_direct(piece, out=out, part=part)
    assert np.array_equal(out, transform.legendre_direct(fourier))
    inside = [p for p in range(1, len(ms)) if p not in {first for first, _ in parts}]  # within a product
    if inside:
        with pytest.raises(ArgumentError, match="legendre_parts"):
            transform.legendre_inverse(a, part=(0, inside[0]))
    if len(parts) > 1:
        shuffled = SpectralTransform(grid, wavenumbers=ms[::-1])
        assert shuffled.legendre_parts(batch) == [(0, len(ms))]


@pytest.mark.parametrize("n, nranks, groups", [(640, 4, 4), (640, 4, 8), (24, 3, 3), (17, 4, 2), (8, 16, 3)])
def test_row_groups_keep_rows_and_points_in_one_ratio(n, nranks, groups):
    """A pipelined rank's groups of rows (``row_groups``) hold all its rows once, each group ascending, every row
    beside its mirror in the other hemisphere, and as many rows as points would say: where the rows pair evenly
    (O640 over 4 ranks) every group has 4 rows per 2 x (nlon[0] + nlon[N - 1]) points, and as many as the
    others."""
    from gridcomm.lab.apps.spectral.distribution import row_groups

    grid = OctahedralGrid(n)
    for band in row_shares(grid.nlon, nranks):
        cut = row_groups(band, grid.nlon, groups)
        assert 1 <= len(cut) <= groups
        assert np.array_equal(np.sort(np.concatenate(cut)), band)
        last = 2 * n - 1
        for rows in cut:
            assert np.array_equal(rows, np.sort(rows))
            assert all((last - r) in rows or (last - r) not in band for r in rows.tolist())
        if n == 640:
            quad_points = 2 * (grid.nlon[0] + grid.nlon[n - 1])
            assert len(cut) == groups and len({len(rows) for rows in cut}) == 1
            for rows in cut:
                assert len(rows) % 4 == 0 and int(grid.nlon[rows].sum()) * 4 == len(rows) * quad_points


def test_values_layout_may_place_every_row():
    """A Fourier half may read and write its rows anywhere in wider grid-value arrays: each row's first point given
    (e.g. rows that are not consecutive on a rank); a wrong list is refused."""
    whole = SpectralTransform(16)
    rows = np.array([1, 5, 6, 30])
    starts = np.concatenate([[0], np.cumsum(whole.grid.nlon)])[rows]
    part = SpectralTransform(16, rows=rows, values_layout=(starts, whole.points))
    values = np.random.default_rng(3).standard_normal((2, whole.points))
    got = part.fourier_direct(values)
    want = whole.fourier_direct(values)[:, :, rows]
    assert np.array_equal(got, want)
    back = np.zeros_like(values)
    part.fourier_inverse(got, out=back)
    points = whole.grid.points_of(rows)
    assert np.array_equal(back[:, points], whole.fourier_inverse(whole.fourier_direct(values))[:, points])
    assert not np.delete(back, points, axis=1).any()  # no other point written
    with pytest.raises(ValueError, match="values_layout"):
        SpectralTransform(16, rows=rows, values_layout=(starts[:2], whole.points))


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


# -- the bucketed Legendre products and grouped FFTs against plain per-m and per-row sums -------------------


def reference_legendre_inverse(grid: OctahedralGrid, t: int, ms, a: np.ndarray) -> np.ndarray:
    """F_m(row) = sum_l a_lm lambda_l^m(x_row) for each m on its own, every row directly (no symmetry)."""
    x, sin_theta = np.sin(grid.latitudes), np.cos(grid.latitudes)
    out, start = [], 0
    for m in ms:
        table = legendre_functions(int(m), t, x, sin_theta=sin_theta)
        out.append(a[:, start : start + len(table)] @ table)
        start += len(table)
    return np.stack(out, axis=1) if out else np.zeros((a.shape[0], 0, 2 * grid.N), complex)


def reference_legendre_direct(grid: OctahedralGrid, t: int, ms, fourier: np.ndarray) -> np.ndarray:
    """a_lm = sum_rows 2 pi w_row F_m(row) lambda_l^m(x_row), each m on its own."""
    x, sin_theta = np.sin(grid.latitudes), np.cos(grid.latitudes)
    weighted = fourier * (2 * np.pi * grid.weights)
    runs = [weighted[:, k] @ legendre_functions(int(m), t, x, sin_theta=sin_theta).T for k, m in enumerate(ms)]
    return np.concatenate(runs, axis=1) if runs else np.zeros((fourier.shape[0], 0), complex)


def reference_fourier_inverse(grid: OctahedralGrid, rows, ms, fourier: np.ndarray) -> np.ndarray:
    """f(phi_k) = Re F_0 + 2 Re sum_{m > 0} F_m e^{i m phi_k} on each row by direct summation: the aliasing of
    m >= n / 2 needs no special case."""
    ms = np.asarray(ms)
    values = []
    for j, row in enumerate(rows):
        terms = fourier[:, :, j, None] * _phases(ms, grid.nlon[row])  # (batch, m, points)
        values.append(np.where(ms[:, None] == 0, 1.0, 2.0) * terms.real)
    return np.concatenate([v.sum(axis=1) for v in values], axis=1)


def _phases(ms: np.ndarray, n: int) -> np.ndarray:
    """e^{i m phi_k} for phi_k = 2 pi k / n, the angle reduced exactly (m k mod n) before it is rounded."""
    return np.exp(2j * np.pi * ((ms[:, None] * np.arange(n)) % n) / n)


def reference_fourier_direct(grid: OctahedralGrid, rows, ms, values: np.ndarray) -> np.ndarray:
    """F_m(row) = (1 / n) sum_k f(phi_k) e^{-i m phi_k} by direct summation, row by row."""
    ms, out, start = np.asarray(ms), [], 0
    for row in rows:
        n = grid.nlon[row]
        out.append(values[:, start : start + n] @ _phases(ms, n).conj().T / n)
        start += n
    return np.stack(out, axis=2)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to round-off: 1e-12 relative, or 1e-13 of the largest value."""
    scale = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13 * scale)


LEGENDRE_CASES = [
    pytest.param(16, None, None, id="O16-all"),
    pytest.param(48, None, None, id="O48-all"),  # depths 1..24 over 16 buckets: padding inside buckets
    pytest.param(40, None, [5, 0, 39, 3, 22, 17, 38, 1, 30], id="O40-unsorted-subset"),
    pytest.param(32, None, [31], id="O32-single-m=T"),
    pytest.param(32, None, [0], id="O32-single-m=0"),
    pytest.param(32, 20, [7], id="O32-T20-single"),
    pytest.param(24, 11, [11, 2, 9, 0, 4], id="O24-T11-subset"),
    pytest.param(64, 40, None, id="O64-T40-all"),
    pytest.param(20, None, np.arange(19, -1, -1), id="O20-all-descending"),
]


@pytest.mark.parametrize(("n", "truncation", "ms"), LEGENDRE_CASES)
@pytest.mark.parametrize("batch", [1, 3])
def test_legendre_halves_equal_per_m_sums(n, truncation, ms, batch):
    grid = OctahedralGrid(n)
    transform = SpectralTransform(grid, truncation, wavenumbers=ms)
    t, ms = transform.truncation, transform.wavenumbers
    a = random_coefficients(t, batch, n)[:, np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in ms])]
    assert_close(transform.legendre_inverse(a), reference_legendre_inverse(grid, t, ms, a))
    rng = np.random.default_rng(batch)
    fourier = rng.standard_normal((batch, len(ms), 2 * n)) + 1j * rng.standard_normal((batch, len(ms), 2 * n))
    assert_close(transform.legendre_direct(fourier), reference_legendre_direct(grid, t, ms, fourier))


FOURIER_CASES = [
    pytest.param(16, None, None, None, id="O16-all"),
    pytest.param(24, None, [5, 30, 0, 47, 46, 12, 13], "permuted", id="O24-scattered-rows"),
    pytest.param(24, None, np.arange(10, 20), "folding", id="O24-polar-band"),
    pytest.param(32, 12, np.arange(20, 44), None, id="O32-T12-equator-band"),
    pytest.param(24, None, [0, 47], "aliases", id="O24-polar-rows-m=n/2-and-n"),
    pytest.param(20, None, [3], "single", id="O20-one-row-one-m"),
]


def _fourier_order(kind, t):
    """Wavenumber orders along the m axis: all in a shuffled order, or subsets that make the rows fold."""
    rng = np.random.default_rng(7)
    return {
        None: None,
        "permuted": rng.permutation(t + 1),
        "folding": np.array([t, 0, 12, t - 1, 10, 11, 9]),  # rows of 20..48 points: bins n/2, 0 and beyond
        "aliases": np.array([20, 10, 0, 21, 19, 23]),  # on the 20-point rows: m = n, n / 2, 0, n + 1, n - 1
        "single": np.array([t]),
    }[kind]


@pytest.mark.parametrize(("n", "truncation", "rows", "kind"), FOURIER_CASES)
@pytest.mark.parametrize("batch", [1, 4])
def test_fourier_halves_equal_per_row_sums(n, truncation, rows, kind, batch):
    grid = OctahedralGrid(n)
    transform = SpectralTransform(grid, truncation, rows=rows)
    rows, t = transform.rows, transform.truncation
    order = _fourier_order(kind, t)
    ms = np.arange(t + 1) if order is None else order
    rng = np.random.default_rng(n + batch)
    fourier = rng.standard_normal((batch, len(ms), len(rows))) + 1j * rng.standard_normal((batch, len(ms), len(rows)))
    values = transform.fourier_inverse(fourier, wavenumbers=order)
    assert_close(values, reference_fourier_inverse(grid, rows, ms, fourier))
    values = rng.standard_normal((batch, transform.points))
    assert_close(transform.fourier_direct(values, wavenumbers=order), reference_fourier_direct(grid, rows, ms, values))


@pytest.mark.parametrize(("n", "truncation", "rows", "kind"), FOURIER_CASES)
def test_simple_rows_are_what_the_gpu_kernels_assume(n, truncation, rows, kind):
    """The GPU's fold and pick skip the index arrays on rows the plan calls simple: there every bin k has the one
    term direct[k], and every m's pick is bin m scaled by 1 / n. Rows at least 2 (T + 1) long are simple."""
    grid = OctahedralGrid(n)
    transform = SpectralTransform(grid, truncation, rows=rows)
    t = transform.truncation
    order = _fourier_order(kind, t)
    ms = np.arange(t + 1) if order is None else order
    geometry = transform._row_ffts.rows
    plan = plan_folding(geometry, ms, np)
    assert np.array_equal(plan.ms, ms)
    for r, n_r in enumerate(geometry.lengths):
        table = folding_table(ms, int(n_r))
        one_direct_term = all(len(c) == 1 and c[0] == plan.direct[k] for k, c in enumerate(table))
        assert bool(plan.simple[r]) == one_direct_term, (r, n_r)
        if plan.simple[r]:
            assert np.all(ms < n_r / 2)
            assert np.array_equal(plan.picks[:, r], geometry.bin_offsets[r] + ms)
            assert np.all(plan.factors.reshape(len(ms), -1, 2)[:, r] == plan.inverse_lengths[r])
            assert plan.inverse_lengths[r] == 1.0 / n_r
        if n_r >= 2 * (t + 1) and order is None:
            assert plan.simple[r]
    for k, c in enumerate(plan.direct):
        assert (ms[c] == k) if c < len(ms) else (k not in set(ms.tolist()))


def test_whole_transforms_equal_the_reference_halves():
    grid = OctahedralGrid(28)
    transform = SpectralTransform(grid)
    t, rows, ms = transform.truncation, np.arange(2 * grid.N), np.arange(grid.N)
    a = random_coefficients(t, 2, 3)
    want = reference_fourier_inverse(grid, rows, ms, reference_legendre_inverse(grid, t, ms, a))
    assert_close(transform.inverse(a), want)
    back = reference_legendre_direct(grid, t, ms, reference_fourier_direct(grid, rows, ms, want))
    assert_close(transform.direct(want), back)


def test_buckets_are_few_and_waste_little():
    """At most MAX_BUCKETS batched products, each padding its wavenumbers to its longest, which on 0..T and on
    a rank's pairs (m, T - m) costs less than 2 / MAX_BUCKETS more work; together they hold every wavenumber
    once, their coefficients where the caller's arrays have them."""
    for n, ms in ((96, None), (96, wavenumber_sets(95, 4)[1]), (160, wavenumber_sets(159, 8)[3])):
        transform = SpectralTransform(n, wavenumbers=ms)
        buckets = transform._buckets
        assert 1 <= len(buckets) <= MAX_BUCKETS
        positions = np.concatenate([b.positions for b in buckets])
        assert np.array_equal(np.sort(positions), np.arange(len(transform.wavenumbers)))
        offsets = np.concatenate([b.offsets for b in buckets])
        lengths = transform.truncation - transform.wavenumbers + 1
        assert np.array_equal(offsets, np.concatenate([[0], np.cumsum(lengths)])[positions])
        assert all(np.all(np.diff(b.lengths) <= 0) and np.array_equal(b.lengths, lengths[b.positions]) for b in buckets)
        padded = sum(b.count * 2 * b.depth for b in buckets)
        assert transform.ncoef <= padded < (1 + 2 / MAX_BUCKETS) * transform.ncoef + len(transform.wavenumbers)


def test_empty_wavenumber_set_and_out_arrays():
    """A rank with no wavenumbers (more ranks than pairs) has empty Legendre arrays; results can be written into
    the caller's arrays (what the distributed transform does with its transposition buffers)."""
    grid = OctahedralGrid(16)
    empty = SpectralTransform(grid, wavenumbers=[])
    assert empty.legendre_inverse(np.zeros((2, 0), complex)).shape == (2, 0, 32)
    assert empty.legendre_direct(np.zeros((2, 0, 32), complex)).shape == (2, 0)
    assert np.array_equal(
        empty.fourier_inverse(np.zeros((2, 0, 32), complex), wavenumbers=[]), np.zeros((2, grid.size))
    )
    whole = SpectralTransform(grid)
    a = random_coefficients(15, 2, 1)
    out = np.empty((2, 16, 32), complex)
    assert whole.legendre_inverse(a, out=out) is out
    assert_close(out, reference_legendre_inverse(grid, 15, np.arange(16), a))
    values = whole.inverse(a)
    out = np.empty((2, 16, 32), complex)
    assert whole.fourier_direct(values, out=out) is out
    assert_close(out, reference_fourier_direct(grid, np.arange(32), np.arange(16), values))
    with pytest.raises(ValueError, match="out has shape"):
        whole.fourier_direct(values, out=np.empty((2, 16, 31), complex))
    with pytest.raises(ValueError, match="out has shape"):
        whole.legendre_inverse(a, out=np.empty((2, 16, 32)))


@pytest.mark.parametrize("share", [row_bands, row_shares])
@pytest.mark.parametrize("nranks, groups", [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_blocked_row_layout_gives_the_plain_layouts_numbers(share, nranks, groups):
    """The Legendre half through a RowLayout of blocks per (group, rank), as the distributed dwarf keeps its
    Legendre side (bands of unequal rows, one astride the equator, a row and its mirror in different blocks; or
    blocks of rows that are not consecutive), gives bit for bit the numbers of the plain (batch, m, 2N) array,
    both ways."""
    from gridcomm.lab.apps.spectral.operands import RowLayout

    grid, t, batch = OctahedralGrid(24), 23, 3
    ms = wavenumber_sets(t, 3)[1]  # pairs m and T - m: an order that is no single run
    transform = SpectralTransform(grid, t, wavenumbers=ms)
    shares = [np.array_split(rows, groups) for rows in share(grid.nlon, nranks)]
    blocks = [rows[g] for g in range(groups) for rows in shares]
    layout = RowLayout.blocked(batch, len(ms), blocks)
    a = random_coefficients(t, batch, 7)[:, : transform.ncoef]
    plain = transform.legendre_inverse(a)
    flat = transform.legendre_inverse(a, layout=layout)
    assert flat.shape == (layout.size,) == (plain.size,)
    for rows in blocks:
        start, end = layout.span(int(rows[0]))
        np.testing.assert_array_equal(flat[start:end].reshape(batch, len(ms), len(rows)), plain[:, :, rows])
    for r in (0, grid.N - 1, grid.N, 2 * grid.N - 1):
        np.testing.assert_array_equal(
            flat[layout.base[r] + np.arange(batch * len(ms)) * layout.width[r]], plain[:, :, r].ravel()
        )
    out = np.empty(layout.size, complex)
    assert transform.legendre_inverse(a, out=out, layout=layout) is out
    np.testing.assert_array_equal(out, flat)
    np.testing.assert_array_equal(transform.legendre_direct(flat, layout=layout), transform.legendre_direct(plain))


def test_row_layouts_are_checked():
    from gridcomm.lab.apps.spectral.operands import RowLayout

    transform = SpectralTransform(16, wavenumbers=[0, 3])
    a = np.ones((2, transform.ncoef), complex)
    plain = RowLayout.plain(2, 2, 32)
    assert (plain.base == np.arange(32)).all() and (plain.width == 32).all() and plain.span(0) == (0, 128)
    with pytest.raises(ValueError, match="row layout holds"):
        transform.legendre_inverse(a, layout=RowLayout.plain(3, 2, 32))  # batch 3 for 2 fields
    with pytest.raises(ValueError, match="row layout holds"):
        transform.legendre_direct(np.zeros(2 * 3 * 32, complex), layout=RowLayout.plain(2, 3, 32))
    with pytest.raises(ValueError, match="out has shape"):
        transform.legendre_inverse(a, out=np.empty((2, 2, 32), complex), layout=plain)
    with pytest.raises(ValueError, match="buffer of the row layout"):
        transform.legendre_direct(np.zeros((2, 2, 32), complex), layout=plain)
    with pytest.raises(ValueError, match="every row lies in one block"):
        RowLayout.blocked(2, 2, [np.arange(20), np.arange(10, 32)])
    with pytest.raises(ValueError, match="every row lies in one block"):
        RowLayout.blocked(2, 2, [np.arange(20), np.array([20, 40])])
    with pytest.raises(ValueError, match="every row lies in one block"):
        RowLayout.blocked(2, 2, [np.arange(20), np.array([20, 20])])
    with pytest.raises(ValueError, match="RowLayout"):
        transform.legendre_inverse(a, layout=(0, 32))


def test_fft_streams_are_checked_and_change_nothing_on_the_host():
    with pytest.raises(ValueError, match="fft_streams"):
        SpectralTransform(16, fft_streams=0)
    one, four = SpectralTransform(16), SpectralTransform(16, fft_streams=4)  # NumPy: no streams to spread over
    values = np.random.default_rng(5).standard_normal((2, one.points))
    np.testing.assert_array_equal(one.fourier_direct(values), four.fourier_direct(values))


def test_one_rank_has_no_transposition():
    """On one rank the Legendre and Fourier sides are one array and nothing is transposed (transport "none");
    the distributed transform still equals the whole one, and a transport that names nothing is still refused."""
    import gridcomm
    from gridcomm.errors import TransportError
    from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients

    with gridcomm.Communicator() as comm:
        with DistributedTransform(comm, "O24", batch=2, transport="staged") as dist:
            assert dist.transport == "none" and dist.pipeline_shape == (1, 1)
            whole = SpectralTransform(24, wavenumbers=dist.wavenumbers)
            a = random_coefficients(dist.truncation, dist.wavenumbers, 2)
            values = dist.inverse(a)
            assert np.array_equal(values, whole.fourier_inverse(whole.legendre_inverse(a), dist.m_order))
            back = whole.legendre_direct(whole.fourier_direct(values, dist.m_order))
            assert np.array_equal(dist.direct(values), back)
        with pytest.raises(TransportError, match="unknown"):
            DistributedTransform(comm, "O24", transport="carrier-pigeon")


def test_pipeline_is_checked():
    """The pipeline takes a whole number of stages, a pair (stages, groups of rows) or "auto"; on one rank, which
    transposes nothing, it is (1, 1); "auto" is AUTO_PIPELINE only with CUDA graphs (where the transpositions can
    overlap the compute)."""
    import gridcomm
    from gridcomm.errors import ArgumentError, ArgumentTypeError
    from gridcomm.lab.apps.spectral.dwarf import AUTO_PIPELINE, DistributedTransform, pipeline_shape

    with gridcomm.Communicator() as comm:
        with pytest.raises(ArgumentError, match="pipeline=0"):
            DistributedTransform(comm, "O16", batch=4, pipeline=0)
        with pytest.raises(ArgumentTypeError, match="pipeline"):
            DistributedTransform(comm, "O16", batch=4, pipeline=2.0)
        with pytest.raises(ArgumentError, match=r"'fast'.*'auto'"):
            DistributedTransform(comm, "O16", batch=4, pipeline="fast")
        with pytest.raises(ArgumentError, match="groups"):
            DistributedTransform(comm, "O16", batch=4, pipeline=(2, 0))
        for asked in (3, (3, 2)):
            with DistributedTransform(comm, "O16", batch=4, pipeline=asked) as dist:
                assert dist.pipeline == 1 and dist.pipeline_shape == (1, 1)
        with DistributedTransform(comm, "O16", batch=4) as dist:  # "auto", on the host: no graphs
            assert dist.pipeline == 1
    assert pipeline_shape("auto", graphs=True) == AUTO_PIPELINE and AUTO_PIPELINE[0] * AUTO_PIPELINE[1] > 1
    assert pipeline_shape("auto", graphs=False) == (1, 1) and pipeline_shape(5, graphs=True) == (5, 1)
    assert pipeline_shape((5, 2), graphs=False) == (5, 2) == pipeline_shape(" 5x2", graphs=False)
    assert pipeline_shape("3", graphs=True) == (3, 1) and pipeline_shape("auto", graphs=False) == (1, 1)
    with pytest.raises(ArgumentError, match="8x4"):
        pipeline_shape("2x2x2", graphs=False)


def test_product_clock_times_the_legendre_products_alone(monkeypatch):
    """A transform's ProductClock is entered once per batched product (one per chunk and direction) and times
    what runs inside it only: here the moves around the products are made to take 20 ms longer each, and none
    of that is counted."""
    import time

    from gridcomm.lab.apps.spectral import operands
    from gridcomm.lab.apps.spectral.transform import ProductClock

    transform = SpectralTransform(24)
    clock = transform.product_clock = ProductClock(np)
    entered = []
    timed = clock.timed
    monkeypatch.setattr(clock, "timed", lambda: entered.append(1) or timed())
    for name in ("unfold", "fold"):
        move = getattr(operands, name)
        monkeypatch.setattr(operands, name, lambda *args, move=move: time.sleep(0.02) or move(*args))
    a = random_coefficients(transform.truncation, 3, 4)
    start = time.perf_counter()
    back = transform.legendre_direct(transform.legendre_inverse(a))
    elapsed = time.perf_counter() - start
    assert_close(back, a)
    chunks = len(list(transform._chunks(3)))
    assert len(entered) == 2 * chunks  # one product per chunk and direction
    assert 0 < clock.seconds() < elapsed - 2 * chunks * 0.02
    clock.reset()
    assert clock.seconds() == 0.0
    with clock.timed():
        time.sleep(0.01)
    assert clock.seconds() >= 0.01


def test_run_spectral_splits_the_legendre_phase():
    """run_spectral's Legendre phase holds its matrix products (``legendre_products_s``) and the moves."""
    import gridcomm
    from gridcomm.lab.apps.spectral.dwarf import run_spectral

    with gridcomm.Communicator() as comm:
        r = run_spectral(comm, "O24", levels=2, fields=2, steps=2)
    assert 0 < r["legendre_products_s"] < r["split_s"]["legendre"]


@pytest.mark.parametrize("groups", [1, 2])
def test_unfolding_into_every_ranks_side_gives_the_transforms_numbers(groups):
    """The inverse's products left as they are (``unfold=False``), unfolded as ``gridcomm_legendre_unfold_exchange``
    does (emulated here: element (b, m, r) at origin + base[r] + (b (T + 1) + m) width[r]) into every rank's Fourier
    side of a group, give bit for bit the Fourier coefficients of the plain transform in each rank's rows, for every
    stage of wavenumbers, and write nothing else (row_shares: a row and its mirror on different ranks)."""
    from gridcomm.lab.apps.spectral.operands import RowLayout
    from gridcomm.lab.apps.spectral.peer_writes import row_destinations

    grid, t, batch, nranks, rank = OctahedralGrid(24), 23, 3, 3, 1
    sets = wavenumber_sets(t, nranks)
    ms, m_first = sets[rank], sum(len(s) for s in sets[:rank])
    transform = SpectralTransform(grid, t, wavenumbers=ms)
    cut = [np.array_split(rows, groups) for rows in row_shares(grid.nlon, nranks)]
    a = random_coefficients(t, batch, 7)[:, : transform.ncoef]
    plain = transform.legendre_inverse(a)  # (batch, my m, 2N)
    n, count = grid.N, t + 1
    parts = transform.legendre_parts(batch)
    assert len(parts) > 1
    for g in range(groups):
        owned = [rows[g] for rows in cut]
        sizes = [batch * count * len(rows) for rows in owned]
        starts = np.cumsum([0, *(s + 5 for s in sizes)])  # sides apart, as in separate allocations
        memory = np.full(starts[-1], np.nan, complex)
        origin = int(starts[rank])
        base, width, listed = row_destinations(2 * n, owned, {q: int(starts[q]) - origin for q in range(nranks)})
        for first, stop in parts:
            layout = RowLayout.plain(batch, stop - first, 2 * n)
            flat = transform.legendre_inverse(a, out=np.empty(layout.size, complex), layout=layout,
                                              part=(first, stop), unfold=False)  # fmt: skip
            positions = transform.product_positions(batch, (first, stop))
            products = flat.reshape(len(positions), 2, n, batch)
            at = np.arange(batch)[None, :] * count + (positions + m_first)[:, None]  # (i, b)
            for r in listed:
                even, odd = products[:, 0, r], products[:, 1, r]
                for row, value in ((r, even + odd), (2 * n - 1 - r, even - odd)):
                    if width[row]:
                        memory[origin + base[row] + at * width[row]] = value
        for q, rows in enumerate(owned):
            side = memory[starts[q] : starts[q] + sizes[q]].reshape(batch, count, len(rows))
            np.testing.assert_array_equal(side[:, m_first : m_first + len(ms)], plain[:, :, rows])
            others = np.ones(count, bool)
            others[m_first : m_first + len(ms)] = False
            assert np.isnan(side[:, others]).all()  # no other rank's wavenumbers written
        assert np.isnan(memory[np.concatenate([np.arange(s - 5, s) for s in starts[1:]])]).all()


def test_row_destinations_leave_out_ranks_without_a_place_and_need_whole_elements():
    from gridcomm.errors import TransportError
    from gridcomm.lab.apps.spectral.peer_writes import places_from, row_destinations

    owned = [np.array([0, 7]), np.array([1, 2, 5, 6]), np.array([3, 4])]
    base, width, listed = row_destinations(8, owned, {0: 100, 2: -40})
    assert width.tolist() == [2, 0, 0, 2, 2, 0, 0, 2]
    assert base[[0, 7, 3, 4]].tolist() == [100, 101, -40, -39]
    assert listed.tolist() == [0, 3]  # rows 1 and 2 and their mirrors 6 and 5 are rank 1's, left out
    assert places_from({0: [4096], 1: [4096 + 48]}, 4096) == {0: 0, 1: 3}
    with pytest.raises(TransportError, match="rank 1's destination lies 8 bytes"):
        places_from({0: [4096], 1: [4104]}, 4096)


@pytest.mark.parametrize("groups", [1, 2])
def test_picking_into_every_ranks_legendre_side_gives_the_blocks_of_the_transposition(groups):
    """The direct's Fourier coefficients picked as ``gridcomm_pick_exchange`` does (emulated here: wavenumber k of
    the list at out_at[k, 0] + b out_at[k, 1] + r) land in every rank's Legendre side exactly in the block of this
    rank's rows that the transposition fills (the dwarf's RowLayout per stage, one after the other), for every
    stage and group, and nowhere else."""
    from gridcomm.lab.apps.spectral.operands import RowLayout
    from gridcomm.lab.apps.spectral.peer_writes import legendre_blocks, wavenumber_destinations

    grid, t, batch, nranks, me = OctahedralGrid(24), 23, 3, 3, 1
    sets = wavenumber_sets(t, nranks)
    m_order = np.concatenate(sets)
    m_start = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
    staged = [[(0, len(s) // 2), (len(s) // 2, len(s))] for s in sets]  # two stages of each rank's wavenumbers
    cut = [np.array_split(rows, groups) for rows in row_shares(grid.nlon, nranks)]
    blocks = [mine[g] for g in range(groups) for mine in cut]
    layouts = [[RowLayout.blocked(batch, b - a, blocks) for a, b in parts] for parts in staged]  # per rank, stage
    sizes = [sum(layout.size for layout in per_stage) for per_stage in layouts]
    starts = np.cumsum([0, *(s + 7 for s in sizes)])  # the ranks' Legendre sides apart
    rng = np.random.default_rng(3)
    for g in range(groups):
        half = SpectralTransform(grid, t, wavenumbers=np.zeros(0, np.int64), rows=cut[me][g], fourier_order=m_order)
        values = rng.standard_normal((batch, half.field_points))
        picked = half.fourier_direct(values, m_order)  # (batch, T + 1, my rows of g)
        nrows = len(cut[me][g])
        memory = np.full(starts[-1], np.nan, complex)
        origin = int(starts[me])
        places = {p: int(starts[p]) - origin for p in range(nranks)}
        for c in range(2):
            where = legendre_blocks(staged, cut, m_start, (me, g, c), (batch, 2 * grid.N))
            listed, out_at = wavenumber_destinations(where, places, nrows)
            for k, i in enumerate(listed):
                lines = origin + out_at[k, 0] + np.arange(batch)[:, None] * out_at[k, 1] + np.arange(nrows)
                memory[lines] = picked[:, i, :]
            for p, parts in enumerate(staged):
                first, stop = parts[c]
                region = int(starts[p]) + sum(layout.size for layout in layouts[p][:c])
                a, b = layouts[p][c].span(int(cut[me][g][0]))
                block = memory[region + a : region + b].reshape(batch, stop - first, nrows)
                np.testing.assert_array_equal(block, picked[:, m_start[p] + first : m_start[p] + stop, :])
        assert np.count_nonzero(~np.isnan(memory)) == picked.size  # every coefficient once, nothing else
