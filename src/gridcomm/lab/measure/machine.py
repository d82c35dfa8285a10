"""What a benchmark ran on: device, CPU, GPU count, library versions and date, stored with every result."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from importlib import metadata
from typing import Any

from ..._version import __version__


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _nvshmem_versions() -> dict[str, str | None]:
    """nvshmem4py's and the NVSHMEM libraries' versions, where installed (the nvshmem transport and modes)."""
    return {"nvshmem4py": _version("nvshmem4py-cu13"), "libnvshmem": _version("nvidia-nvshmem-cu13")}


def gpus() -> list[dict[str, Any]]:
    """Name and memory of each NVIDIA GPU that NVML sees (empty without GPUs or driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            found.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_GiB": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 1),
                }
            )
        return found
    finally:
        pynvml.nvmlShutdown()


def _declared_ranks_per_node() -> int | None:
    from ...comm import RANKS_PER_NODE

    value = os.environ.get(RANKS_PER_NODE, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


#: Prefixes of the environment variables that change how MPI, UCX, NCCL or NVSHMEM move data: every result
#: records those set (e.g. Open MPI's ``OMPI_MCA_btl_vader_single_copy_mechanism``), so that two runs of the
#: same benchmark under different settings can be told apart from their files.
TRANSPORT_SETTINGS = ("OMPI_MCA_", "MPICH_", "MPIR_CVAR_", "UCX_", "NCCL_", "NVSHMEM_", "GRIDCOMM_")


#: What Open MPI's launcher sets in every rank to describe the launch itself (job ids, addresses, session
#: folders), not how data moves: left out of the record.
LAUNCHER_SETTINGS = (
    "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_plm", "OMPI_MCA_initial_wdir",
    "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "GRIDCOMM_MPIEXEC",
)  # fmt: skip


def transport_settings() -> dict[str, str]:
    """The environment variables of TRANSPORT_SETTINGS set in this process (LAUNCHER_SETTINGS left out), sorted
    by name."""
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(TRANSPORT_SETTINGS) and not k.startswith(LAUNCHER_SETTINGS)
    }


def machine_info(nranks: int, gpus_used: int = 0) -> dict[str, Any]:
    """The record stored beside every benchmark figure."""
    from ...mpilib import mpi_cuda_aware, mpi_library_version

    all_gpus = gpus()
    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "device": all_gpus[0]["name"] if gpus_used and all_gpus else f"CPU: {_cpu_model()}",
        "gpus_used": gpus_used,
        "gpus": all_gpus,
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "ranks": nranks,
        # GRIDCOMM_RANKS_PER_NODE: ranks taken as nodes of this many (the transports then chosen per group of
        # peers as across nodes), None where unset; before 2026-11-26 12:00 UTC results did not say.
        "declared_ranks_per_node": _declared_ranks_per_node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": {
            "gridcomm": __version__,
            "numpy": _version("numpy"),
            "mpi4py": _version("mpi4py"),
            "cupy": _version("cupy-cuda13x") or _version("cupy"),
            "mpi": mpi_library_version(),
            **{k: v for k, v in _nvshmem_versions().items() if v is not None},
        },
        "mpi_cuda_aware": mpi_cuda_aware(),
        "settings": transport_settings(),  # since 2026-11-26 16:00 UTC
    }
