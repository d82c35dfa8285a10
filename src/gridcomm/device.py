"""What this process can see of GPUs, asked of nothing but CuPy and the driver: the floor every GPU path of the
library stands on (it imports no other gridcomm module)."""

from __future__ import annotations

import ctypes
import functools
import types
from typing import Any

#: Stream priority asking for the device's highest (lower numbers are higher; CUDA clamps it to its range, -5..0
#: on current GPUs): the communication of an overlapped step gets its blocks scheduled between those of the
#: compute running beside it instead of after all of them.
HIGHEST_PRIORITY = -1000


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


@functools.cache
def libcuda() -> Any:
    """The CUDA driver library (ctypes), for the few driver calls CuPy does not bind; OSError where it is absent."""
    return ctypes.CDLL("libcuda.so.1")
