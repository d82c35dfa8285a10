"""The nvshmem transport and NVSHMEM kernels where nothing can run them: without nvshmem4py the transport is
reported unusable with the extra to install, asking for it is a clear error, host arrays are refused, and a
kernel that does not build is a DeviceError carrying the compiler's words. The GPU tests (test_gpu.py,
test_stencil2d.py) run the transport and the nvshmem and persistent modes where gridcomm[nvshmem] is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import gridcomm
from gridcomm import DeviceError, TransportError, shmem
from gridcomm.transports import NvshmemTransport, choose

EXTRA = "gridcomm[nvshmem]"


@pytest.fixture
def no_nvshmem4py(monkeypatch):
    """nvshmem4py unimportable, whether or not it is installed."""
    for name in ("nvshmem", "nvshmem.core"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def comm():
    with gridcomm.Communicator() as c:
        yield c


def test_missing_nvshmem4py_names_the_extra(no_nvshmem4py, comm):
    reason = shmem.unavailable_reason()
    assert reason is not None and "nvshmem4py" in reason and EXTRA in reason
    assert NvshmemTransport().unusable_reason(comm, on_device=True) == reason
    with pytest.raises(TransportError, match=r"nvshmem.*cannot be used.*gridcomm\[nvshmem\]"):
        choose("nvshmem", comm, on_device=True)
    with pytest.raises(TransportError, match=r"NVSHMEM is not usable.*gridcomm\[nvshmem\]"):
        shmem.require()


def test_host_arrays_are_refused(comm):
    assert "GPU memory only" in NvshmemTransport().unusable_reason(comm, on_device=False)
    d = gridcomm.CartesianDecomposition(comm, (8, 6), halo=1, periodic=True)
    with pytest.raises(TransportError, match="GPU memory only"):
        gridcomm.HaloExchanger(d, d.zeros(), "nvshmem")


def test_auto_never_picks_nvshmem(comm):
    """It starts a process-wide runtime and a symmetric heap: only taken when asked for."""
    assert "nvshmem" in gridcomm.transports.names()
    assert "nvshmem" not in gridcomm.transports._preference(True)


def test_info_reports_nvshmem_unusable_with_the_reason(tmp_path):
    hidden = tmp_path / "nvshmem"
    hidden.mkdir()
    (hidden / "__init__.py").write_text('raise ImportError("nvshmem4py hidden by the test")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-m", "gridcomm", "info"], capture_output=True, text=True, env=env, timeout=120
    ).stdout
    assert "not nvshmem" in out and "nvshmem4py" in " ".join(out.split()), out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.skipif(shmem.nvshmem_home() is None, reason="NVSHMEM headers not installed")
def test_a_kernel_that_does_not_build_is_a_device_error_with_the_compiler_output(tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDCOMM_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken.cu"
    broken.write_text('#include <nvshmem.h>\nextern "C" __global__ void k() { nvshmem_no_such_call(); }\n')
    with pytest.raises(DeviceError, match=r"(?s)building broken.cu against NVSHMEM failed.*nvshmem_no_such_call"):
        shmem.build_cubin(broken, "90")
    assert not list((tmp_path / "cache").rglob("*.cubin"))  # nothing half-built is cached


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.skipif(shmem.nvshmem_home() is None, reason="NVSHMEM headers not installed")
def test_built_kernels_are_cached_by_source_and_options(tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDCOMM_CACHE", str(tmp_path))
    source = tmp_path / "ring.cu"
    source.write_text('#include <nvshmem.h>\nextern "C" __global__ void ring(int* x) { *x = nvshmem_my_pe(); }\n')
    first = shmem.build_cubin(source, "90")
    assert shmem.build_cubin(source, "90") == first  # cached: the same file, not rebuilt
    assert shmem.build_cubin(source, "90", ("--fmad=false",)) != first
    source.write_text(source.read_text() + "// changed\n")
    assert shmem.build_cubin(source, "90") != first
    assert b"ring" in first.read_bytes() and first.stat().st_size > 1000


def test_kernel_sources_ship_beside_the_modules():
    package = Path(gridcomm.__file__).parent
    assert (package / "transports" / "nvshmem.cu").exists()
    assert (package / "lab" / "apps" / "stencil2d" / "jacobi2d_nvshmem.cu").exists()
    assert (package / "transports" / "gpu_waits.cuh").exists()
    # the paths the transport and the stencil modes build from
    from gridcomm.lab.apps.stencil2d import shmem_kernel
    from gridcomm.transports import nvshmem

    assert nvshmem.SOURCE.exists() and shmem_kernel.SOURCE.exists()


def test_ranks_agree_before_starting_nvshmem(monkeypatch, comm):
    """A rank that cannot start NVSHMEM makes every rank raise, instead of leaving them in its collective start."""
    monkeypatch.setattr(shmem, "unavailable_reason", lambda: "no GPU")
    with pytest.raises(TransportError, match=r"NVSHMEM is not usable: rank 0: no GPU"):
        shmem.initialise(comm)


def test_a_full_symmetric_heap_is_a_device_error_on_every_rank(monkeypatch, comm):
    """nvshmem_malloc returning NULL (on any rank) raises DeviceError naming the ranks and what to raise."""
    freed = []
    fake = types.SimpleNamespace(malloc=lambda nbytes: 0, free=freed.append)
    monkeypatch.setitem(sys.modules, "nvshmem", types.SimpleNamespace(bindings=fake))
    monkeypatch.setitem(sys.modules, "nvshmem.bindings", fake)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace())
    with pytest.raises(DeviceError, match=r"failed on rank\(s\) \[0\].*NVSHMEM_SYMMETRIC_SIZE"):
        shmem.symmetric_array(1 << 20, comm)
    assert freed == [] and shmem.live_allocations() == (0, 0)


def test_a_rank_bound_to_one_cpu_is_warned_of_the_proxy_thread(monkeypatch):
    """NVSHMEM's proxy thread polls without sleeping: a rank bound to one CPU is told how to launch instead."""
    import warnings

    monkeypatch.setattr(shmem.os, "sched_getaffinity", lambda pid: {5})
    with pytest.warns(RuntimeWarning, match=r"rank 3 is bound to one CPU \(5\).*--bind-to none"):
        shmem.warn_if_one_core(3)
    monkeypatch.setattr(shmem.os, "sched_getaffinity", lambda pid: {0, 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shmem.warn_if_one_core(3)


def test_nvshmem_core_is_imported_without_torch(tmp_path, monkeypatch):
    """nvshmem4py's torch interop imports torch whenever it can (seconds per process); gridcomm imports
    nvshmem.core with torch kept out, and leaves `import torch` working afterwards."""
    package = tmp_path / "nvshmem" / "core"
    package.mkdir(parents=True)
    (tmp_path / "nvshmem" / "__init__.py").write_text("")
    (tmp_path / "torch.py").write_text("")  # an importable torch, installed or not
    (package / "__init__.py").write_text(
        "try:\n    import torch\n    TORCH = True\nexcept ImportError:\n    TORCH = False\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("nvshmem", "nvshmem.core", "torch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    core = shmem.nvshmem_core()
    assert core.TORCH is False and "torch" not in sys.modules  # not imported, and not left blocked
    assert shmem.nvshmem_core() is core
    import torch  # noqa: F401  (the stand-in: importable again)

    for name in ("nvshmem", "nvshmem.core", "torch"):
        sys.modules.pop(name, None)
