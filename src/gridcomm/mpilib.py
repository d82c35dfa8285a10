"""What gridcomm knows about the MPI library under mpi4py: its version, whether it takes device pointers, and
whether the launcher that started the job belongs to it."""

from __future__ import annotations

import ctypes
import functools
import os

from .errors import GridcommError


def _loaded_libraries(fragment: str) -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if fragment in line and ".so" in line}
    except OSError:
        return []
    return sorted(paths)


@functools.cache
def mpi_cuda_aware() -> bool:
    """Whether the MPI library under mpi4py accepts device pointers.

    ``GRIDCOMM_MPI_CUDA_AWARE=0/1`` overrides; otherwise MPIX_Query_cuda_support(), which both MPICH and
    Open MPI export when built with CUDA, is asked at run time, and the CUDA driver must load in this process:
    Open MPI 4.1 answers yes whenever it was built with CUDA, even where its own start of CUDA failed (no
    driver: it then says "CUDA-aware support is disabled" and would crash on a device pointer). A library
    that cannot answer is taken as not CUDA-aware: guessing "no" is the safe side.
    """
    override = os.environ.get("GRIDCOMM_MPI_CUDA_AWARE")
    if override is not None and override != "":
        return override.strip().lower() in ("1", "true", "yes", "on")
    return _mpi_says_cuda_aware() and _cuda_driver_loads()


def _mpi_says_cuda_aware() -> bool:
    """MPIX_Query_cuda_support() of the libmpi mpi4py loaded; False where it has none."""
    from mpi4py import MPI  # noqa: F401  (loads libmpi so that it shows in the process maps)

    for path in _loaded_libraries("libmpi"):
        try:
            query = ctypes.CDLL(path).MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        return bool(query())
    return False


def _cuda_driver_loads() -> bool:
    """Whether the CUDA driver library (what a CUDA-aware MPI loads to use device memory) loads here."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def mpi_library_version() -> str:
    """The first line of MPI_Get_library_version (e.g. 'MPICH Version: 4.2.0')."""
    from mpi4py import MPI

    text = MPI.Get_library_version().replace("\x00", " ")  # Open MPI's ends in a NUL byte
    return " ".join(text.strip().splitlines()[0].split())


def check_launcher_matches(world_size: int) -> None:
    """A launcher of another MPI starts N singletons that each believe they are alone: say so."""
    for variable in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        launched = os.environ.get(variable, "")
        if launched.isdigit() and int(launched) > 1 and world_size == 1:
            raise GridcommError(
                f"this process was started as one of {launched} ranks ({variable}) but MPI sees only 1: the "
                "mpiexec/mpirun used belongs to a different MPI than the one mpi4py loaded. Launch with "
                "'gridcomm run --np N ...', which picks the matching mpiexec"
            )
