"""CUDA sources compile for Hopper (sm_90) with nvcc, so a syntax error never reaches a GPU. CI has nvcc
but no GPU; where nvcc is missing the test skips with a message. Sources that call NVSHMEM are built the way
gridcomm builds them at run time (relocatable device code, linked against libnvshmem_device.a by nvlink) where
the NVSHMEM headers and libraries are installed (the nvidia-nvshmem-cu13 wheel, which torch brings in too)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gridcomm import shmem

ALL_SOURCES = sorted((Path(__file__).resolve().parents[1] / "src" / "gridcomm").rglob("*.cu"))
SHMEM_SOURCES = [p for p in ALL_SOURCES if "<nvshmem.h>" in p.read_text()]
SOURCES = [p for p in ALL_SOURCES if p not in SHMEM_SOURCES]
NVCC = shutil.which("nvcc")


def test_there_are_kernels_to_check():
    assert any(p.name == "pack.cu" for p in SOURCES), SOURCES


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: the CUDA sources were not compiled")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_cuda_source_compiles_for_sm90(source, tmp_path):
    # -Werror=all-warnings: NVRTC at run time is at least as strict; --ptx needs no host compiler for device code.
    cmd = [
        NVCC,
        "-arch=sm_90",
        "-std=c++17",
        "--ptx",
        "-Werror",
        "all-warnings",
        "-o",
        str(tmp_path / "out.ptx"),
        str(source),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    assert ".entry" in (tmp_path / "out.ptx").read_text(), "no kernel entry point in the PTX"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: the NVSHMEM sources were not built")
@pytest.mark.skipif(
    shmem.nvshmem_home() is None, reason="NVSHMEM headers not installed: the NVSHMEM sources were not built"
)
@pytest.mark.parametrize("source", SHMEM_SOURCES, ids=lambda p: p.name)
def test_nvshmem_source_links_against_the_device_library(source, tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDCOMM_CACHE", str(tmp_path))
    cubin = shmem.build_cubin(source, "90", ("--fmad=false",)).read_bytes()
    entry = r"extern \"C\" __global__ void (?:__launch_bounds__\(\d+\) )?(gridcomm\w+)\("
    kernels = re.findall(entry, source.read_text())
    shmem_kernels = ("send_edges", "boundary", "persistent", "persistent_two")
    kernels += [f"gridcomm_jacobi2d_{k}_{t}" for k in shmem_kernels for t in ("f64", "f32")
                if "GRIDCOMM_JACOBI_SHMEM(" in source.read_text()]  # fmt: skip
    assert kernels and all(k.encode() in cubin for k in kernels), kernels
    assert b"nvshmemi_device_state" in cubin  # the device library was linked in


def test_the_nvshmem_sources_are_found():
    assert {p.name for p in SHMEM_SOURCES} == {"nvshmem.cu", "jacobi2d_nvshmem.cu"}


def test_kernel_files_are_package_data():
    """Every .cu file must ship in the wheel: pyproject's package-data patterns cover it."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gridcomm"]
    package = root / "src" / "gridcomm"
    for source in ALL_SOURCES:
        relative = source.relative_to(package)
        assert any(relative.match(p) for p in patterns), f"{relative} is not matched by package-data {patterns}"


def test_every_package_directory_has_an_init():
    """setuptools' find_packages only ships directories with __init__.py."""
    package = Path(__file__).resolve().parents[1] / "src" / "gridcomm"
    missing = [
        str(d.relative_to(package)) for d in [package, *package.rglob("*")]
        if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").exists()
    ]  # fmt: skip
    assert not missing, f"directories with modules but no __init__.py: {missing}"
