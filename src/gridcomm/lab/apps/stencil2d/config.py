"""What a stencil2d run may be asked for: modes, dtypes, array modules, sizes; a clear error for anything else."""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from ....arguments import whole_number
from ....arrays import resolve_array_module
from ....errors import GridcommError

#: How a step moves halos and computes (see Stencil2D): the seed's, with overlap, captured in a CUDA graph, and
#: GPU-initiated with NVSHMEM (kernels launched per step, or one persistent kernel for many steps).
MODES = ("traditional", "overlapped", "graph", "nvshmem", "persistent")
#: Modes that run on the CPU (NumPy); the others need CUDA.
CPU_MODES = ("traditional", "overlapped")
#: Modes whose halos move from the GPU's own kernels through NVSHMEM (gridcomm[nvshmem]).
SHMEM_MODES = ("nvshmem", "persistent")
DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


class StencilError(GridcommError, ValueError):
    """A stencil2d run cannot be made as asked (size, mode, dtype, halo, array module, transport)."""


def check_n(n: Any) -> int:
    """Points per rank side: an int of at least 1."""
    return whole_number(n, "n", least=1, meaning="the block of each rank is n x n points", error=StencilError)


def check_steps(steps: Any) -> int:
    """A number of time steps: an int of at least 0."""
    return whole_number(steps, "steps", least=0, meaning="time steps to run", error=StencilError)


def check_mode(mode: Any, on_gpu: bool | None = None) -> str:
    """One of MODES; with ``on_gpu=False``, the GPU-only modes are refused."""
    if mode not in MODES:
        raise StencilError(f"mode={mode!r} is unknown; use one of {', '.join(MODES)}")
    if mode not in CPU_MODES and on_gpu is False:
        why = (
            "captures the step (exchange and kernels) in a CUDA graph"
            if mode == "graph"
            else "moves the halos from CUDA kernels through NVSHMEM"
        )
        raise StencilError(
            f"mode {mode!r} {why}, so it needs a GPU (xp=cupy, --gpu); on the CPU use mode "
            f"{' or '.join(repr(m) for m in CPU_MODES)}"
        )
    return str(mode)


def check_dtype(dtype: Any) -> np.dtype:
    """float64 or float32."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in DTYPES:
        raise StencilError(f"dtype={dtype!r}: the stencil runs in {' or '.join(str(d) for d in DTYPES)}")
    return dt


def check_halo(halo: Any, n: int) -> int:
    """Ghost width exchanged each step: at least 1 (the stencil's reach) and at most the block's n points."""
    halo = whole_number(
        halo, "halo", least=1, meaning="the five-point stencil reads 1 point beyond the block", error=StencilError
    )
    if halo > n:
        raise StencilError(
            f"halo width {halo} is wider than the block of {n} x {n} points per rank: a rank's halo would need "
            f"points from beyond its neighbour; use halo <= n (the stencil needs 1) or a larger n"
        )
    return halo


def resolve_xp(xp: Any) -> types.ModuleType:
    """The array module for ``xp``: numpy or cupy (module or name); None means cupy when a GPU is usable.

    StencilError when cupy is asked for but CuPy or a GPU is missing."""
    return resolve_array_module(xp, StencilError)
