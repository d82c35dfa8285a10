"""Whether this machine can run the GPU tests: CuPy importable and at least one CUDA device."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_count() -> int:
    """CUDA devices CuPy sees (0 without CuPy or a driver)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def needs_gpus(count: int = 1) -> pytest.MarkDecorator:
    """Skip unless ``count`` GPUs are visible."""
    return pytest.mark.skipif(gpu_count() < count, reason=f"needs {count} CUDA GPU(s) and CuPy; {gpu_count()} here")
