"""The 2-D Jacobi dwarf (gridcomm.lab.apps.stencil2d): the NumPy update against a naive loop, the fixed boundary,
every mode on 1 to 4 ranks bitwise equal to the serial run, clear errors, the command line, the benchmark, the
CUDA source (compiled with nvcc where it exists) and, on a GPU machine, every mode on the GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_mpi
from gpu_support import gpu_count, needs_gpus
from gridcomm import GridcommError, shmem
from gridcomm.lab.apps.stencil2d import (
    Rect,
    Stencil2D,
    StencilError,
    initial_block,
    reference_run,
    run_stencil2d,
    split_region,
    update_region,
)
from gridcomm.lab.apps.stencil2d.config import SHMEM_MODES
from gridcomm.lab.apps.stencil2d.cuda_kernel import block_shape, launch_geometry
from gridcomm.lab.bench.stencil2d import SEED_004_US, benchmark_stencil2d, plot_stencil2d

PROGRAM = Path(__file__).resolve().parent / "mpi_programs" / "stencil2d_ranks.py"
SOURCE = Path(__file__).resolve().parents[1] / "src" / "gridcomm" / "lab" / "apps" / "stencil2d" / "jacobi2d.cu"
NVCC = shutil.which("nvcc")


needs_gpu = needs_gpus(1)


def naive_steps(u0: np.ndarray, steps: int) -> np.ndarray:
    """Point by point in Python scalars of the array's dtype, in the documented summation order."""
    u, fifth = u0.copy(), u0.dtype.type(0.2)
    for _ in range(steps):
        v = u.copy()
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                v[i, j] = ((((u[i, j] + u[i - 1, j]) + u[i + 1, j]) + u[i, j - 1]) + u[i, j + 1]) * fifth
        u = v
    return u


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}")


# -- serial behaviour ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numpy_update_matches_naive_loop_bitwise(dtype):
    shape = (7, 9)
    u0 = initial_block(shape, None, dtype)
    for steps in (1, 2, 5):
        got = reference_run(shape, steps, dtype)
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(bits(got), bits(naive_steps(u0, steps))), steps


def test_boundary_ring_never_changes_and_the_interior_does():
    shape = (12, 10)
    u0 = initial_block(shape)
    u = reference_run(shape, 25)
    ring = np.ones(shape, bool)
    ring[1:-1, 1:-1] = False
    assert np.array_equal(u[ring], u0[ring])
    assert not np.array_equal(u[~ring], u0[~ring])
    assert np.isfinite(u).all()
    with Stencil2D(None, 10, mode="overlapped") as sim:  # the distributed code on one rank
        sim.step(7)
        field = sim.field()
    assert np.array_equal(field[0], initial_block((10, 10))[0]) and np.array_equal(
        field[:, -1], initial_block((10, 10))[:, -1]
    )


def test_initial_field_is_a_function_of_the_global_point():
    shape = (40, 24)
    whole = initial_block(shape)
    for rows, cols in ((slice(0, 13), slice(5, 24)), (slice(13, 40), slice(0, 1)), (slice(39, 40), slice(23, 24))):
        assert np.array_equal(initial_block(shape, (rows, cols)), whole[rows, cols])
    assert np.isfinite(whole).all() and whole.std() > 0.1
    assert 0.01 < np.abs(np.diff(whole, axis=1)).mean() < 0.2  # a smooth field with a visible perturbation
    assert not np.array_equal(initial_block(shape, seed=1), whole)
    assert np.array_equal(initial_block(shape, dtype=np.float32), whole.astype(np.float32))


@pytest.mark.parametrize(
    ("global_shape", "start", "shape", "halo"),
    [((30, 20), (0, 0), (10, 10), 1), ((30, 20), (10, 10), (10, 10), 1), ((30, 20), (20, 0), (10, 20), 2),
     ((3, 3), (0, 0), (3, 3), 1), ((2, 4), (0, 2), (2, 2), 1), ((9, 9), (3, 3), (3, 3), 1),
     ((8, 8), (4, 0), (2, 2), 2)],
)  # fmt: skip
def test_regions_cover_every_updated_point_once(global_shape, start, shape, halo):
    region = update_region(global_shape, start, shape, halo)
    parts = split_region(region, shape, halo)
    local = tuple(n + 2 * halo for n in shape)
    expected = np.zeros(local, int)
    for i in range(shape[0]):
        for j in range(shape[1]):
            g = (start[0] + i, start[1] + j)
            if 0 < g[0] < global_shape[0] - 1 and 0 < g[1] < global_shape[1] - 1:
                expected[halo + i, halo + j] = 1

    def count(rects: list[Rect]) -> np.ndarray:
        c = np.zeros(local, int)
        for r in rects:
            assert not r.empty
            c[r.row0 : r.row1, r.col0 : r.col1] += 1
        return c

    assert np.array_equal(count(parts["whole"]), expected)
    assert np.array_equal(count(parts["inner"] + parts["strips"]), expected)
    for r in parts["inner"]:  # reads no halo point: one point inside every edge of the block
        assert r.row0 - 1 >= halo and r.row1 <= halo + shape[0] - 1
        assert r.col0 - 1 >= halo and r.col1 <= halo + shape[1] - 1


@pytest.mark.parametrize(("rows", "cols"), [(8192, 8192), (1, 8190), (8190, 1), (3, 5), (1, 1), (2, 100), (70000, 40)])
def test_cuda_launch_geometry_covers_any_rectangle(rows, cols):
    bx, by = block_shape(rows, cols)
    assert bx * by <= 256 and bx >= 1 and by >= 1
    assert bx >= min(cols, 32)  # a warp along the contiguous axis whenever the rectangle is that wide
    if rows >= 8 and cols >= 32:
        assert (bx, by) == (32, 8)
    (gx, gy), _ = launch_geometry(Rect(0, rows, 0, cols))
    assert gx * bx >= cols and gy <= 65535 and (gy * by >= rows or gy == 65535)  # the kernel strides over rows


@pytest.mark.parametrize("mode", ["traditional", "overlapped"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_rank_in_process_matches_serial_bitwise(mode, dtype):
    with Stencil2D(None, 13, dtype, np, mode) as sim:
        assert sim.global_shape == (13, 13) and sim.proc_grid == (1, 1)
        sim.step(4)
        sim.step(3)
        assert sim.steps_done == 7
        field = sim.field()
    assert np.array_equal(bits(field), bits(reference_run((13, 13), 7, dtype)))
    r = run_stencil2d(None, 13, 7, mode, np, dtype=dtype, check=True)
    assert r["checked"] and r["bitwise_equal"] and r["max_abs_diff"] == 0.0
    assert r["ranks"] == 1 and r["device"] == "cpu" and r["time_per_step_s"] > 0


# -- MPI ranks ------------------------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_traditional_and_overlapped_on_ranks_match_serial_bitwise(nranks):
    """Both CPU modes, float64 and float32, blocks of 1 to 9 points, ghost widths 1 and 2
    (tests/mpi_programs/stencil2d_ranks.py); on 2+ ranks a run without exchange must differ."""
    rc, out = run_mpi(nranks, [str(PROGRAM)], timeout=120)
    assert rc == 0 and f"STENCIL2D-RANKS OK {nranks}" in out, out[-6000:]


# -- errors -----------------------------------------------------------------------------------------------


def test_graph_mode_on_the_cpu_is_a_clear_error():
    for call in (lambda: Stencil2D(None, 8, mode="graph"), lambda: run_stencil2d(None, 8, 2, "graph", np)):
        with pytest.raises(
            GridcommError, match=r"mode 'graph'.*CUDA graph.*needs a GPU.*'traditional' or 'overlapped'"
        ):
            call()


@pytest.mark.parametrize("mode", SHMEM_MODES)
def test_gpu_initiated_modes_on_the_cpu_are_a_clear_error(mode):
    with pytest.raises(StencilError, match=rf"mode '{mode}'.*NVSHMEM.*needs a GPU.*'traditional' or 'overlapped'"):
        Stencil2D(None, 8, mode=mode)


def test_bad_input_is_a_clear_error():
    cases = [
        ({"n": 0}, r"n=0: must be at least 1 \(the block of each rank is n x n points\)"),
        ({"n": -3}, r"n=-3: must be at least 1"),
        ({"n": 2.5}, r"n=2.5 \(float\): give a whole number"),
        ({"n": True}, r"n=True \(bool\): give a whole number"),
        ({"n": 8, "mode": "fast"}, r"mode='fast' is unknown; use one of traditional, overlapped, graph"),
        ({"n": 4, "halo": 5}, r"halo width 5 is wider than the block of 4 x 4 points"),
        ({"n": 4, "halo": 0}, r"halo=0: must be at least 1 \(the five-point stencil reads 1 point"),
        ({"n": 4, "halo": 1.0}, r"halo=1.0 \(float\): give a whole number"),
        ({"n": 8, "dtype": "int32"}, r"dtype='int32'.*float64 or float32"),
        ({"n": 8, "xp": "torch"}, r"xp='torch'.*numpy \(CPU\) or cupy \(GPU\)"),
    ]
    for kwargs, message in cases:
        with pytest.raises(StencilError, match=message):
            Stencil2D(None, **kwargs)
    with pytest.raises(StencilError, match="steps=-1"):
        run_stencil2d(None, 8, -1)
    if gpu_count() == 0:
        with pytest.raises(StencilError, match="xp=cupy but"):
            Stencil2D(None, 8, xp="cupy")
    assert issubclass(StencilError, GridcommError) and issubclass(StencilError, ValueError)
    # A truthy string is not True (exchange="no" once ran with the exchange), nor a float a seed; every bad
    # argument of the dwarf raises its own StencilError.
    for kwargs in ({"exchange": "no"}, {"seed": 1.5}, {"seed": "a"}, {"seed": -1}):
        with pytest.raises(StencilError, match=next(iter(kwargs))):
            Stencil2D(None, 8, **kwargs)


# -- command line, benchmark ------------------------------------------------------------------------------


@pytest.mark.mpi
def test_command_line_runs_on_two_ranks_and_prints_ok():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_"))}
    env.update(GRIDCOMM_TIMEOUT="30", GRIDCOMM_OVERSUBSCRIBE_OK="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "gridcomm", "run", "stencil2d", "--np", "2", "--n", "16", "--steps", "5", "--cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "32 x 16 points on 2 rank(s)" in out and "mode traditional, CPU float64" in out, out
    assert "time per step" in out and out.rstrip().endswith("OK"), out


def test_benchmark_rows_and_plot(tmp_path):
    rows = benchmark_stencil2d(None, (8, 64), samples=2, min_sample_s=0.001)
    assert [(r["n"], r["mode"]) for r in rows] == [
        (8, "traditional"),
        (8, "overlapped"),
        (64, "traditional"),
        (64, "overlapped"),
    ]
    for r in rows:
        assert r["device"] == "cpu" and r["ranks"] == 1 and r["steps_per_sample"] % 2 == 0
        assert r["time_per_step_s"] > 0 and r["no_exchange_s"] > 0 and r["min_s"] <= r["time_per_step_s"]
        assert r["joules_per_step"] is None and "GPUs only" in r["energy_why"]  # NVML has no CPU counter
    assert rows[2]["seed_traditional_us"] == SEED_004_US[64][0] and rows[2]["seed_persistent_us"] == SEED_004_US[64][1]
    assert rows[0]["seed_traditional_us"] is None and rows[0]["over_seed_traditional"] is None
    png = plot_stencil2d({"results": rows}, tmp_path / "stencil2d.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(StencilError, match="needs a GPU"):
        benchmark_stencil2d(None, (8,), ["graph"], xp=np)


# -- CUDA ---------------------------------------------------------------------------------------------------


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: jacobi2d.cu was not compiled")
def test_cuda_source_compiles_for_sm90(tmp_path):
    out = tmp_path / "jacobi2d.ptx"
    cmd = [
        NVCC,
        "-arch=sm_90",
        "-std=c++17",
        "--fmad=false",
        "--ptx",
        "-Werror",
        "all-warnings",
        "-o",
        str(out),
        str(SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    ptx = out.read_text()
    assert ".entry gridcomm_jacobi2d_f64" in ptx and ".entry gridcomm_jacobi2d_f32" in ptx
    assert "fma.rn" not in ptx  # nothing contracted: bitwise NumPy's sums


NVSHMEM_WHY = shmem.unavailable_reason()


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("mode", ["traditional", "overlapped", "graph", "nvshmem", "persistent"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_modes_match_numpy_serial_bitwise(mode, dtype):
    import cupy

    if mode in SHMEM_MODES and NVSHMEM_WHY is not None:
        pytest.skip(f"NVSHMEM not usable here: {NVSHMEM_WHY}")

    for n, batches in ((37, (4, 1, 4)), (1, (3,)), (300, (1, 2))):  # odd and even batches: both parities of graphs
        with Stencil2D(None, n, dtype, cupy, mode) as sim:
            for k in batches:
                sim.step(k)
            field = sim.field()
        expect = reference_run((n, n), sum(batches), dtype)
        assert np.array_equal(bits(field), bits(expect)), (mode, dtype, n, np.abs(field - expect).max())


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_persistent_kernel_for_two_blocks_per_sm_matches_serial_bitwise(dtype, monkeypatch):
    """The persistent kernel's build for two resident blocks per SM (chosen where a grid fills the GPU; its blocks
    take their tiles from a counter per step, zeroed two steps ahead: launches of 4 steps) on small blocks."""
    import cupy

    from gridcomm.lab.apps.stencil2d import shmem_kernel

    if NVSHMEM_WHY is not None:
        pytest.skip(f"NVSHMEM not usable here: {NVSHMEM_WHY}")
    monkeypatch.setattr(shmem_kernel, "TWO_BLOCKS", True)
    for n, batches in ((37, (4, 1, 4)), (300, (1, 2))):
        with Stencil2D(None, n, dtype, cupy, "persistent") as sim:
            for k in batches:
                sim.step(k)
            field = sim.field()
        expect = reference_run((n, n), sum(batches), dtype)
        assert np.array_equal(bits(field), bits(expect)), (dtype, n, np.abs(field - expect).max())


@pytest.mark.gpu
@needs_gpu
@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [n for n in (1, 2) if n <= max(gpu_count(), 1)])
def test_gpu_modes_on_ranks_match_serial_bitwise(nranks):
    """All modes over every GPU transport, one rank per GPU; graph mode refuses staged with a clear error."""
    rc, out = run_mpi(nranks, [str(PROGRAM), "--gpu"], timeout=600)
    assert rc == 0 and f"STENCIL2D-RANKS OK {nranks}" in out, out[-6000:]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.skipif(NVSHMEM_WHY is not None, reason=f"NVSHMEM not usable here: {NVSHMEM_WHY}")
def test_gpu_initiated_modes_refuse_what_they_cannot_do():
    import cupy

    for mode in SHMEM_MODES:
        with pytest.raises(StencilError, match="halo=1"):
            Stencil2D(None, 16, "float64", cupy, mode, halo=2)
        with pytest.raises(StencilError, match="exchange=False"):
            Stencil2D(None, 16, "float64", cupy, mode, exchange=False)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.mpi
@pytest.mark.skipif(NVSHMEM_WHY is not None, reason=f"NVSHMEM not usable here: {NVSHMEM_WHY}")
def test_gpu_initiated_modes_on_two_ranks_match_serial_bitwise():
    """nvshmem and persistent on 2 ranks: one GPU each, or both on one GPU where only one is lent."""
    rc, out = run_mpi(2, [str(PROGRAM), "--gpu", "--modes", ",".join(SHMEM_MODES)], timeout=600)
    assert rc == 0 and "STENCIL2D-RANKS OK 2" in out, out[-6000:]


@pytest.mark.gpu
@needs_gpu
def test_gpu_benchmark_times_every_mode():
    import cupy

    rows = benchmark_stencil2d(None, (64, 512), xp=cupy, samples=3, min_sample_s=0.005)
    modes = ["traditional", "overlapped", "graph"] + (list(SHMEM_MODES) if NVSHMEM_WHY is None else [])
    assert [r["mode"] for r in rows] == modes * 2
    assert all(r["device"] == "gpu" and 0 < r["time_per_step_s"] < 0.1 for r in rows)
    # J per step from NVML's counter over a region of at least a second, at a plausible power
    assert all(r["joules_per_step"] > 0 and 50 < r["watts"] < 2000 for r in rows), rows
