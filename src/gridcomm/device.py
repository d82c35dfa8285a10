"""What this process can see of GPUs, asked of nothing but CuPy and the driver: the floor every GPU path of the
library stands on (it imports no other gridcomm module)."""

from __future__ import annotations

import types


def cupy_or_none() -> types.ModuleType | None:
    """The cupy module when it is installed (and imports), else None."""
    try:
        import cupy
    except Exception:
        return None
    return cupy


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without CuPy or a driver)."""
    cupy = cupy_or_none()
    if cupy is None:
        return 0
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0
