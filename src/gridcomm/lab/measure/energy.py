"""Energy of a timed region on the GPUs: NVML's total-energy counter of each GPU used, read around it.

``with EnergyMeter(comm) as meter: ...`` (collective at both ends) reads, on every rank, the counter of the
GPU that rank uses (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded; Volta and
later) before and after the region, and sums the differences over the distinct GPUs (ranks that share a GPU
count it once). ``meter.result`` then holds joules, seconds and the average power in watts, or ``None``
figures with the reason (no GPU, no NVML, a counter this GPU lacks). The counter counts the whole board, so
other work on the same GPUs is counted too, and it advances in steps of some milliseconds: time regions of
at least a few hundred milliseconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...comm import Communicator
from ...errors import MissingDependencyError
from ...extras import require

#: The least duration of a region whose energy is reported, seconds: NVML's counter then advances many times.
ENERGY_REGION_S = 1.0
#: Why a run on the CPU has no energy figure.
GPUS_ONLY = "NVML meters GPUs only"


@dataclass(frozen=True)
class Energy:
    """What an EnergyMeter measured: joules over ``gpus`` GPUs in ``seconds`` (None figures: ``why``)."""

    joules: float | None
    seconds: float
    gpus: int
    why: str | None = None

    @property
    def watts(self) -> float | None:
        """Average power over the region [W], all GPUs together."""
        return None if self.joules is None or self.seconds <= 0 else self.joules / self.seconds

    def per(self, steps: int) -> float | None:
        """Joules per step of ``steps`` steps timed in the region."""
        return None if self.joules is None or steps <= 0 else self.joules / steps

    def as_dict(self) -> dict[str, Any]:
        return {"joules": self.joules, "seconds": self.seconds, "watts": self.watts, "gpus": self.gpus, "why": self.why}


def _gpu_counter() -> tuple[tuple[str, int] | None, Any, str | None]:
    """(this rank's GPU as (host, PCI bus id), a function reading its counter [mJ], why not) for the current
    CUDA device, found by PCI bus id (NVML's order need not be CUDA's)."""
    from mpi4py import MPI

    from ...device import cupy_or_none

    cupy = cupy_or_none()
    if cupy is None:
        return None, None, "no GPU (or CuPy is missing)"
    try:
        pynvml = require("pynvml", "energy", "the GPU energy counter")
    except MissingDependencyError as error:
        return None, None, str(error)
    try:
        pynvml.nvmlInit()
        bus_id = cupy.cuda.Device().pci_bus_id
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # raises where the GPU has no such counter
    except Exception as error:  # NVML missing, no driver, an older GPU: say why, measure nothing
        return None, None, f"NVML's energy counter is not available here ({type(error).__name__}: {error})"
    return (MPI.Get_processor_name(), bus_id), lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), None


class EnergyMeter:
    """Energy of the GPUs of ``comm``'s ranks over a ``with`` block (collective on entry and exit)."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self.result: Energy | None = None
        self._gpu, self._read, self._why = _gpu_counter()

    def __enter__(self) -> EnergyMeter:
        self.comm.mpi.Barrier()
        self._start_mj = self._read() if self._read else None
        self._start_s = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        end_mj = self._read() if self._read else None
        seconds = time.perf_counter() - self._start_s
        mine = (self._gpu, None if end_mj is None else end_mj - self._start_mj, seconds, self._why)
        everyone = self.comm.mpi.allgather(mine)
        why = next((w for _, _, _, w in everyone if w), None)
        per_gpu: dict[Any, int] = {}
        for gpu, used, _, _ in everyone:
            if gpu is not None and used is not None:
                per_gpu[gpu] = max(per_gpu.get(gpu, 0), used)  # ranks sharing a GPU read the same counter
        slowest = max(s for _, _, s, _ in everyone)
        if not why and any(used <= 0 for used in per_gpu.values()):
            # The driver refreshes the counter every few tens of ms: a shorter region reads as no energy at all.
            why = f"NVML's energy counter did not advance in {slowest:.3f} s: time a longer region (more steps)"
        joules = None if why else sum(per_gpu.values()) / 1000.0
        self.result = Energy(joules, slowest, len(per_gpu), why)


def energy_of_steps(
    comm: Communicator, run_steps: Callable[[int], None], step_s: float, least: int = 4, multiple: int = 1
) -> tuple[Energy, int]:
    """Collective: ``run_steps(n)`` inside an EnergyMeter, n the steps of a region of at least ENERGY_REGION_S
    (``step_s``: seconds per step), at least ``least`` and a multiple of ``multiple``; ``run_steps`` must return
    with the GPU's work done. Returns the energy and n."""
    steps = max(least, math.ceil(ENERGY_REGION_S / max(step_s, 1e-7)))
    steps += -steps % multiple
    with EnergyMeter(comm) as meter:
        run_steps(steps)
    assert meter.result is not None
    return meter.result, steps


__all__ = ["ENERGY_REGION_S", "GPUS_ONLY", "Energy", "EnergyMeter", "energy_of_steps"]
