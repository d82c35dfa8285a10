"""NVSHMEM from Python: the runtime (one per process, bootstrapped over MPI), symmetric memory as CuPy arrays,
and CUDA modules whose kernels call NVSHMEM device functions.

Host side: NVIDIA's ``nvshmem4py`` (the optional extra ``gridcomm[nvshmem]``) initialises NVSHMEM with a
unique id that rank 0 makes and broadcasts over the communicator, allocates and frees symmetric memory, and
initialises each loaded module's device state (``nvshmemx_cumodule_init``).

Device side: a kernel that calls NVSHMEM must be linked against ``libnvshmem_device.a`` (relocatable device
code). Of the ways tried on H200 machines (benchmarks/nvshmem_mechanisms.py, docs/nvshmem.md), the one that
works is nvcc (``-rdc=true -cubin``) followed by nvlink with the device library; NVRTC's output does not link
against that library (NVRTC's ``uint64_t`` is ``unsigned long long`` where nvcc's is ``unsigned long``, so
the library's templates are mangled differently), and NVSHMEM 3.4 ships no LTO-IR library. The linked cubin is
cached on disk, keyed by the source, the options and the versions of nvcc and NVSHMEM.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .agreement import raise_if_any
from .comm import Communicator
from .device import gpu_count
from .errors import DeviceError, TransportError
from .kernel_text import headers_digest
from .launch import ONE_CPU_ADVICE

#: What to install for the nvshmem transport and the stencil2d modes that use NVSHMEM.
INSTALL_HINT = "pip install 'gridcomm[nvshmem]' (nvshmem4py-cu13 and the NVSHMEM libraries)"


# -- what is there ---------------------------------------------------------------------------------------------


@functools.cache
def nvshmem_home() -> Path | None:
    """The folder holding NVSHMEM's include/ and lib/ (the nvidia-nvshmem-cu13 package, or $NVSHMEM_HOME)."""
    candidates = [os.environ.get("NVSHMEM_HOME")]
    try:
        import nvidia.nvshmem as package

        candidates += list(package.__path__)
    except ImportError:
        pass
    for folder in candidates:
        if folder and (Path(folder) / "include" / "nvshmem.h").exists():
            return Path(folder)
    return None


@functools.cache
def cuda_tool(name: str) -> str | None:
    """Path of a CUDA toolkit program (nvcc, nvlink): $CUDA_HOME/bin, $CUDA_PATH/bin, the PATH, /usr/local/cuda."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / name).exists():
            return str(Path(home) / "bin" / name)
    fallback = Path("/usr/local/cuda/bin") / name
    return shutil.which(name) or (str(fallback) if fallback.exists() else None)


def nvshmem_core() -> Any:
    """``nvshmem.core``, imported without importing torch where this process has not imported it: nvshmem4py's
    torch interop imports torch whenever it can (5-10 s per process on the GPU machines, measured), and gridcomm
    uses none of it. A later ``import torch`` works as usual; nvshmem4py's own torch helpers then stay off."""
    if "nvshmem.core" not in sys.modules and "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError meanwhile
        try:
            import nvshmem.core
        finally:
            if sys.modules.get("torch", 0) is None:
                del sys.modules["torch"]
    import nvshmem.core

    return nvshmem.core


def unavailable_reason() -> str | None:
    """Why NVSHMEM cannot be used by this process (None when it can): the Python package, the libraries, the
    compiler that links device code against NVSHMEM, a GPU."""
    try:
        nvshmem_core()
    except Exception as error:  # ImportError, or a library the package could not load
        return f"nvshmem4py is not importable ({type(error).__name__}: {error}); {INSTALL_HINT}"
    if nvshmem_home() is None:
        return f"NVSHMEM's headers and libraries are not found (nvidia-nvshmem-cu13, or $NVSHMEM_HOME); {INSTALL_HINT}"
    missing = [tool for tool in ("nvcc", "nvlink") if cuda_tool(tool) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not found: kernels that call NVSHMEM are linked by the CUDA toolkit's nvcc and "
            "nvlink (set CUDA_HOME or put them on the PATH)"
        )
    if gpu_count() == 0:
        return "no GPU"
    return None


def require() -> None:
    """Raise TransportError naming what to install when NVSHMEM cannot be used here."""
    reason = unavailable_reason()
    if reason is not None:
        raise TransportError(f"NVSHMEM is not usable: {reason}")


# -- the runtime -----------------------------------------------------------------------------------------------

_STATE: dict[str, Any] = {}  # "size": PEs of the job, once initialised; "modules": loaded modules by key
_LIVE: dict[int, int] = {}  # symmetric allocations not yet freed: address -> bytes


def initialise(comm: Communicator) -> None:
    """Collective over ``comm``: start NVSHMEM once per process over all of the job's processes.

    NVSHMEM allocates symmetric memory collectively over every PE of the job, so a communicator that holds only
    some of the job's processes cannot use it: TransportError (every rank raises together)."""
    from mpi4py import MPI

    # Agree first: a rank that cannot start NVSHMEM must not leave the others waiting in its collective start.
    reason = unavailable_reason()
    raise_if_any(comm.mpi, reason and f"NVSHMEM is not usable: rank {comm.rank}: {reason}", TransportError)
    world = MPI.COMM_WORLD.Get_size()
    if comm.size != world:
        raise TransportError(
            f"NVSHMEM allocates symmetric memory over every process of the job, but this communicator holds "
            f"{comm.size} of the job's {world}: use a communicator of all processes (e.g. COMM_WORLD)"
        )
    if "size" in _STATE:
        return
    import cupy
    from cuda.core import Device

    core = nvshmem_core()
    device = Device(cupy.cuda.Device().id)
    device.set_current()
    uid = core.get_unique_id(empty=comm.rank != 0)
    comm.mpi.Bcast(uid._data.view(np.int8), root=0)  # as nvshmem4py's own "emulated_mpi" start does
    core.init(device=device, uid=uid, rank=comm.rank, nranks=comm.size, initializer_method="uid")
    warn_if_one_core(comm.rank)
    _STATE["size"] = comm.size
    _STATE["modules"] = {}
    atexit.register(_finalise)


def warn_if_one_core(rank: int) -> None:
    """Warn where this process may run on one CPU only: NVSHMEM's proxy thread polls without sleeping, and on
    that core every host wait of the rank's own thread lasts a scheduler tick (4 ms measured; docs/nvshmem.md)."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) == 1:
        warnings.warn(
            f"rank {rank} is bound to one CPU ({next(iter(cpus))}), which NVSHMEM's polling proxy thread now shares: "
            f"each host wait of the exchange will take milliseconds; {ONE_CPU_ADVICE}",
            RuntimeWarning,
            stacklevel=3,
        )


def _finalise() -> None:
    """At exit (before MPI is finalised: atexit runs the latest registration first)."""
    if _STATE.pop("size", None) is None:
        return
    _STATE.get("modules", {}).clear()
    nvshmem_core().finalize()


def pe_of_ranks(comm: Communicator) -> np.ndarray:
    """Collective: the NVSHMEM PE of each rank of ``comm`` (the ranks of another communicator over the same
    processes may be ordered differently)."""
    from nvshmem import bindings

    return np.asarray(comm.mpi.allgather(int(bindings.my_pe())), dtype=np.int32)


def symmetric_array(nbytes: int, comm: Communicator) -> Any:
    """Collective over all PEs: ``nbytes`` of symmetric memory, zeroed, as a CuPy uint8 array (every PE must ask
    for the same size). Free it with ``free_symmetric``."""
    import cupy
    from nvshmem import bindings

    sizes = comm.mpi.allgather(int(nbytes))
    if len(set(sizes)) != 1:
        raise TransportError(f"symmetric allocations must be the same size on every rank; asked for {sizes}")
    nbytes = max(int(nbytes), 16)
    address = int(bindings.malloc(nbytes))
    failed = [r for r, a in enumerate(comm.mpi.allgather(address)) if a == 0]
    if failed:  # every rank raises together, and gives back what it got
        if address:
            bindings.free(address)
        raise DeviceError(
            f"nvshmem_malloc of {nbytes} bytes failed on rank(s) {failed}: the symmetric heap is full (raise "
            "NVSHMEM_SYMMETRIC_SIZE, in bytes, before the first use)"
        )
    _LIVE[address] = nbytes
    memory = cupy.cuda.UnownedMemory(address, nbytes, owner=None)
    array = cupy.ndarray((nbytes,), dtype=np.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))
    array.fill(0)
    cupy.cuda.Device().synchronize()
    comm.mpi.Barrier()  # zeroed everywhere before any peer may write into it
    return array


def free_symmetric(array: Any) -> None:
    """Collective over all PEs: give back memory from ``symmetric_array`` (no kernel may still use it)."""
    from nvshmem import bindings

    if "size" in _STATE:
        _LIVE.pop(int(array.data.ptr), None)
        bindings.free(int(array.data.ptr))


def live_allocations() -> tuple[int, int]:
    """(symmetric allocations of this process not yet freed, their bytes): what a leak check counts."""
    return len(_LIVE), sum(_LIVE.values())


# -- device code -----------------------------------------------------------------------------------------------


def _tool_version(tool: str) -> str:
    """The end of ``tool --version`` (part of a cached cubin's key)."""
    return subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout.strip()[-80:]


def cache_folder() -> Path:
    """Where linked cubins are kept: $GRIDCOMM_CACHE, else ~/.cache/gridcomm."""
    return Path(os.environ.get("GRIDCOMM_CACHE", Path.home() / ".cache" / "gridcomm")) / "nvshmem"


def build_cubin(source: Path, arch: str, options: tuple[str, ...] = ()) -> Path:
    """Compile ``source`` with nvcc as relocatable device code and link it against libnvshmem_device.a with nvlink,
    for ``arch`` (e.g. "90"), with nvcc ``options`` besides; returns the cached cubin. DeviceError with the
    compiler's output on failure."""
    home = nvshmem_home()
    nvcc, nvlink = cuda_tool("nvcc"), cuda_tool("nvlink")
    if home is None or nvcc is None or nvlink is None:
        require()
    assert home is not None and nvcc is not None and nvlink is not None
    library = home / "lib" / "libnvshmem_device.a"
    flags = [f"-arch=sm_{arch}", "-rdc=true", "-std=c++17", "-O3", f"-I{home / 'include'}", f"-I{source.parent}"]
    flags += list(options)
    key = hashlib.sha256()
    headers = headers_digest(source, [home / "include", source.parent])  # a changed header is a new binary
    for part in (source.read_bytes(), headers, " ".join(flags), _tool_version(nvcc), library.stat().st_size):
        key.update(part if isinstance(part, bytes) else str(part).encode())
    target = cache_folder() / f"{source.stem}-sm{arch}-{key.hexdigest()[:20]}.cubin"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        relocatable, linked = Path(scratch) / "code.cubin", Path(scratch) / "linked.cubin"
        for command in (
            [nvcc, *flags, "-cubin", str(source), "-o", str(relocatable)],
            [nvlink, f"-arch=sm_{arch}", str(relocatable), str(library), "-o", str(linked)],
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise DeviceError(
                    f"building {source.name} against NVSHMEM failed ({Path(command[0]).name} exit {done.returncode}):\n"
                    f"{(done.stdout + done.stderr).strip()[-3000:]}"
                )
        os.replace(linked, target)  # atomic: ranks building at once each leave a whole file
    return target


def load_module(source: Path, comm: Communicator, options: tuple[str, ...] = ()) -> Any:
    """Collective: the CuPy module of ``source`` (built once per node by local rank 0, cached), with its NVSHMEM
    device state initialised; loaded once per process and GPU."""
    import cupy
    from nvshmem import bindings

    device = cupy.cuda.Device()
    arch = f"{device.compute_capability}"
    key = (str(source), options, device.id)
    modules = _STATE["modules"]
    if key not in modules:
        problem, path = None, None
        try:
            if comm.local_rank == 0:
                path = build_cubin(source, arch, options)
        except DeviceError as error:
            problem = str(error)
        raise_if_any(comm.mpi, problem, DeviceError)
        path = path or build_cubin(source, arch, options)  # the others find it cached
        module = cupy.cuda.function.Module()
        module.load(path.read_bytes())
        status = bindings.cumodule_init(int(module.ptr))
        if status not in (None, 0):
            raise DeviceError(f"nvshmemx_cumodule_init failed for {source.name} (status {status})")
        modules[key] = module
    return modules[key]
