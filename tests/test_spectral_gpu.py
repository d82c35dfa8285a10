"""The spectral transform on the GPU (CuPy) against the same transform on the host (NumPy): each half and the
whole transforms on O32 and O80 for several batch sizes, on all and on some wavenumbers and rows, and the
dwarf's round trip on one rank.

Marked ``gpu`` and skipped without CuPy and a GPU (CI has none): run them on a GPU machine with
``pytest -m gpu tests/test_spectral_gpu.py``. cuBLAS and cuFFT round differently from the host's BLAS and
pocketfft, so the results agree to round-off (1e-12 of the largest value), not bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gridcomm
from gpu_support import gpu_count, needs_gpus
from gridcomm.grids.octahedral import OctahedralGrid
from gridcomm.lab.apps.spectral import SpectralTransform, coefficient_index, row_bands, wavenumber_sets
from gridcomm.lab.apps.spectral.dwarf import random_coefficients, run_spectral

pytestmark = [pytest.mark.gpu, needs_gpus(1)]

GRIDS = [32, 80]
BATCHES = [1, 4, 31]


@pytest.fixture(scope="module")
def cupy():
    import cupy

    cupy.cuda.Device(0).use()
    return cupy


def assert_close(got, want: np.ndarray) -> None:
    """``got`` (a CuPy array) equals ``want`` (NumPy) to round-off: 1e-12 of the largest value."""
    host = got.get()
    assert host.shape == want.shape and host.dtype == want.dtype
    scale = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(host, want, rtol=0, atol=1e-12 * scale)


def random_complex(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.mark.parametrize("n", GRIDS)
@pytest.mark.parametrize("batch", BATCHES)
def test_whole_transforms_on_the_gpu_equal_the_host(cupy, n, batch):
    host = SpectralTransform(n)
    device = SpectralTransform(n, xp=cupy)
    t = host.truncation
    a = random_coefficients(t, np.arange(t + 1), batch, seed=n)
    values = host.inverse(a)
    assert_close(device.inverse(cupy.asarray(a)), values)
    assert_close(device.direct(cupy.asarray(values)), host.direct(values))
    assert_close(device.direct(device.inverse(cupy.asarray(a))), host.direct(values))


def _subsets(n: int) -> list[tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]]:
    """(wavenumbers, rows, Fourier order): all; a rank's share of 3 in the distributed order; an unsorted subset
    of wavenumbers (the permuted path), scattered rows and a shuffled order."""
    grid = OctahedralGrid(n)
    t = n - 1
    sets = wavenumber_sets(t, 3)
    rng = np.random.default_rng(n)
    scattered = np.sort(rng.choice(2 * n, size=n // 2, replace=False))
    return [
        (None, None, None),
        (sets[1], row_bands(grid.nlon, 3)[1], np.concatenate(sets)),
        (rng.permutation(t + 1)[: t // 3 + 1], scattered, rng.permutation(t + 1)),
    ]


@pytest.mark.parametrize("n", GRIDS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("subset", [0, 1, 2])
def test_each_half_on_the_gpu_equals_the_host(cupy, n, batch, subset):
    wavenumbers, rows, order = _subsets(n)[subset]
    host = SpectralTransform(n, wavenumbers=wavenumbers, rows=rows, fourier_order=order)
    device = SpectralTransform(n, wavenumbers=wavenumbers, rows=rows, fourier_order=order, xp=cupy)
    t, ms = host.truncation, host.wavenumbers
    index = np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in ms])
    a = random_coefficients(t, np.arange(t + 1), batch, seed=batch)[:, index]
    assert_close(device.legendre_inverse(cupy.asarray(a)), host.legendre_inverse(a))
    fourier = random_complex((batch, len(ms), 2 * n), seed=1)
    assert_close(device.legendre_direct(cupy.asarray(fourier)), host.legendre_direct(fourier))
    count = t + 1
    fourier = random_complex((batch, count, len(host.rows)), seed=2)
    assert_close(device.fourier_inverse(cupy.asarray(fourier), order), host.fourier_inverse(fourier, order))
    values = np.random.default_rng(3).standard_normal((batch, host.points))
    assert_close(device.fourier_direct(cupy.asarray(values), order), host.fourier_direct(values, order))


def test_results_go_into_the_callers_device_arrays(cupy):
    host = SpectralTransform(32)
    device = SpectralTransform(32, xp=cupy)
    a = random_coefficients(31, np.arange(32), 3)
    out = cupy.empty((3, 32, 64), dtype=np.complex128)
    assert device.legendre_inverse(cupy.asarray(a), out=out) is out
    assert_close(out, host.legendre_inverse(a))
    values = host.inverse(a)
    out = cupy.empty((3, 32, 64), dtype=np.complex128)
    assert device.fourier_direct(cupy.asarray(values), out=out) is out
    assert_close(out, host.fourier_direct(values))


def test_tables_and_index_arrays_live_on_the_gpu(cupy):
    """Everything a transform reads at run time was put on the device when it was built, and after one call
    it holds one cuFFT plan per row length and direction (rows of one length share it)."""
    device = SpectralTransform(48, xp=cupy)
    for bucket in device._buckets:
        arrays = (bucket.offsets, bucket.lengths, bucket.positions, bucket.tables, bucket.weighted)
        assert all(isinstance(x, cupy.ndarray) for x in arrays)
    for plan in device._fourier_plans.values():
        arrays = (plan.first, plan.codes, plan.picks, plan.factors)
        assert all(isinstance(x, cupy.ndarray) for x in arrays)
    a = cupy.asarray(random_coefficients(47, np.arange(48), 2))
    device.direct(device.inverse(a))
    lengths = len(np.unique(OctahedralGrid(48).nlon))
    assert len(device._row_ffts._plans[2]) == 2 * lengths


@pytest.mark.parametrize("grid", ["O32", "O80"])
def test_dwarf_round_trip_on_one_gpu(cupy, grid):
    """run_spectral(gpu=True) on one rank: CuPy arrays, the Transposer's GPU half, errors measured on the host."""
    with gridcomm.Communicator() as comm:
        r = run_spectral(comm, grid, levels=2, fields=2, steps=2, gpu=True)
    assert r["gpu"] is True
    assert r["round_trip_error"] < 1e-12
    assert set(r["split_s"]) == {"legendre", "fft", "transposition"} and r["time_per_step_s"] > 0
    assert 0 < r["legendre_products_s"] < r["split_s"]["legendre"]  # CUDA events around each product
    # Energy over steps of its own lasting at least a second (NVML's counter moves every few tens of ms).
    assert r["energy"]["steps"] * r["time_per_step_s"] >= 0.99
    assert (r["joules_per_step"] or 0) > 0 or "not available" in r["energy"]["why"]


@pytest.mark.parametrize(("transport", "fft_streams"), [("ipc", 1), ("nccl", 1), ("staged", 1), ("ipc", 4)])
def test_graph_replays_equal_the_eager_transform_bit_for_bit(cupy, transport, fft_streams):
    """DistributedTransform(graphs=True): each phase captured once and replayed gives the eager transform's
    bits, for new coefficients at every call (the graphs read the same buffers); with 4 FFT streams the row
    groups run as parallel graph branches. One rank has no transposition to capture, whatever the transport
    (the Transposer's own GPU suite captures every transport)."""
    from gridcomm.lab.apps.spectral.dwarf import DistributedTransform

    with (
        gridcomm.Communicator() as comm,
        DistributedTransform(comm, "O48", batch=3, transport=transport, xp=cupy) as eager,
        DistributedTransform(
            comm, "O48", batch=3, transport=transport, xp=cupy, graphs=True, fft_streams=fft_streams
        ) as graphed,
    ):
        for seed in range(3):
            a = cupy.asarray(random_coefficients(eager.truncation, eager.wavenumbers, 3, seed=seed))
            want_values = eager.inverse(a).get()
            want_back = eager.direct(cupy.asarray(want_values)).get()
            got_values = graphed.inverse(a).get()
            got_back = graphed.direct(graphed.inverse(a)).get()
            assert np.array_equal(got_values, want_values), f"inverse differs (seed {seed})"
            assert np.array_equal(got_back, want_back), f"direct differs (seed {seed})"
        assert graphed.transport == "none"
        assert set(graphed.captured) == {"fft direct 0", "fft inverse 0"}, graphed.captured


def test_graphs_need_the_gpu():
    from gridcomm.lab.apps.spectral.dwarf import DistributedTransform

    with gridcomm.Communicator() as comm, pytest.raises(ValueError, match="xp=cupy"):
        DistributedTransform(comm, "O16", graphs=True)


def half_complex(spectra: np.ndarray, geometry: Any) -> np.ndarray:
    """The serial model of fourier.cu's twiddles: each row's half spectrum B_0..B_h (n = 2h points) -> Z_0..Z_h-1,
    the spectrum of the row's points taken in pairs as h complex points (slot h zero): Z_k = (B_k + conj B_h-k)
    + i exp(2 pi i k / n) (B_k - conj B_h-k), with B_0 and B_h taken real."""
    out = np.zeros_like(spectra)
    for first, n in zip(geometry.bin_offsets[:-1], geometry.lengths, strict=True):
        h = n // 2
        bins = spectra[:, first : first + h + 1].copy()
        bins[:, [0, h]] = bins[:, [0, h]].real
        k = np.arange(h)
        low, high = bins[:, k], bins[:, h - k].conj()
        out[:, first : first + h] = (low + high) + 1j * np.exp(2j * np.pi * k / n) * (low - high)
    return out


@pytest.mark.parametrize("shared_kib", [48, 200])
def test_fold_and_pick_equal_the_host(cupy, monkeypatch, shared_kib):
    """The GPU's fold adds the host's terms (to round-off: NumPy's reduceat adds pairwise) and takes them to the
    spectra of the rows' points in pairs (``half_complex``); its pick takes such spectra back to the bins and scales
    them as the host's does (to round-off), on short rows that fold many wavenumbers onto each bin, on rows just too
    short to hold them all, and on simple rows (index-free); with 200 KiB of staging per block the fold opts in to
    more shared memory than a launch gets by default (the path of very long rows of wavenumbers)."""
    from gridcomm.lab.apps.spectral import fourier

    monkeypatch.setattr(fourier, "FOLD_SHARED_BYTES", shared_kib * 1024)
    geometry = fourier.RowGeometry.of(np.array([20, 24, 1276, 1278, 1280, 2576, 20]))
    ms = np.arange(640)
    batch = 3
    rng = np.random.default_rng(5)
    f = rng.standard_normal((batch, len(ms), 7)) + 1j * rng.standard_normal((batch, len(ms), 7))
    host, device = fourier.RowFFTs(geometry, np), fourier.RowFFTs(geometry, cupy)
    host_plan, device_plan = fourier.plan_folding(geometry, ms, np), fourier.plan_folding(geometry, ms, cupy)
    assert (fourier.fold_group(len(ms))[1] > fourier.DEFAULT_SHARED_BYTES) == (shared_kib > 48)
    assert device_plan.simple.get().tolist() == [0, 0, 0, 0, 1, 1, 0]
    spectra = np.empty((batch, geometry.bins), np.complex128)
    host._fold(f, host_plan, spectra)
    got = cupy.zeros((batch, geometry.bins), np.complex128)
    device._fold(cupy.asarray(f), device_plan, got)
    assert_close(got, half_complex(spectra, geometry))
    ends = np.concatenate([geometry.bin_offsets[:-1], geometry.bin_offsets[1:] - 1])  # bins 0 and h: real
    spectra[:, ends] = spectra[:, ends].real  # as a real row's FFT gives them
    want = np.empty_like(f)
    host._pick(spectra, host_plan, want)
    got = cupy.empty(f.shape, np.complex128)
    device._pick(cupy.asarray(half_complex(spectra, geometry) / 2), device_plan, got)
    assert_close(got, want)


def test_gpu_row_ffts_need_even_rows(cupy):
    """The GPU's row FFTs take a row's points in pairs: an odd row length or first point is refused by name."""
    from gridcomm.lab.apps.spectral import fourier

    with pytest.raises(ValueError, match="even length and an even first point"):
        fourier.RowFFTs(fourier.RowGeometry.of(np.array([20, 21])), cupy)
    with pytest.raises(ValueError, match="even length and an even first point"):
        fourier.RowFFTs(fourier.RowGeometry.of(np.array([20, 24]), np.array([0, 21])), cupy)


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", sorted({2, gpu_count()}))
def test_pipelined_transform_on_several_gpus(mpi_checks, nranks):
    """tests/mpi_programs/checks_spectral.py on one rank per GPU: the pipelined transform (each stage of wavenumbers
    transposed apart, overlapping the other stages' Legendre products) bit for bit equal to one transposition of
    every wavenumber, and run_spectral's split of a pipelined run adding up to at most its step."""
    if gpu_count() < 2:
        pytest.skip(f"needs 2 CUDA GPUs; {gpu_count()} here")
    checks = (
        "check_pipelined_transform_equals_one_transposition",
        "check_run_spectral_round_trip",
        "check_auto_pipeline",
    )
    mpi_checks("checks_spectral", nranks, timeout=300, env={"GRIDCOMM_CHECK_DEVICE": "gpu"}, checks=checks)
