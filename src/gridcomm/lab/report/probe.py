"""What the machine offers the suite: GPUs, and whether its MPI is CUDA-aware, found without starting MPI here
(the benchmarks start their own ranks under mpiexec; an MPI singleton in this process could confuse them)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

_CUDA_AWARE = "from gridcomm.mpilib import mpi_cuda_aware; print(int(mpi_cuda_aware()))"


@dataclass(frozen=True)
class Facts:
    gpus: int  # GPUs found (NVML, else CuPy)
    cuda_aware_mpi: bool  # whether device memory may be handed to MPI (the peer `mpi` is then measured too)


def gpus_found() -> int:
    """NVIDIA GPUs that NVML sees, else those CuPy sees (0 without either)."""
    from ..measure.machine import gpus

    found = len(gpus())
    if found:
        return found
    from ...device import gpu_count

    return gpu_count()


def cuda_aware_mpi() -> bool:
    """gridcomm.mpilib.mpi_cuda_aware, asked in a short-lived process (False where it cannot answer)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _CUDA_AWARE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout.strip().endswith("1")
