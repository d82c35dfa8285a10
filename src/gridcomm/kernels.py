"""Compiling gridcomm's CUDA kernels: the one path every source compiled at run time takes.

Each ``.cu`` file sits beside the Python that launches it (the copy kernels in ``packing``, the transports'
in ``transports``, the dwarfs' in ``lab/apps``). ``function`` compiles a file with NVRTC (through CuPy) once
per GPU of the process, the first time one of its kernels is asked for; the text handed over ends with a
digest of the headers it includes (``kernel_text``), so that CuPy's disk cache never serves a binary built
from older headers. Sources that call NVSHMEM need nvcc's relocatable device code linked against NVSHMEM's
device library instead: ``gridcomm.shmem.build_cubin`` builds those, its cache keyed on the same digest.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .kernel_text import include_folders, kernel_text


def function(source: Path, name: str, options: Sequence[str] = ("-std=c++17",)) -> Any:
    """Kernel ``name`` of the CUDA file ``source`` on the current GPU, compiled by NVRTC with ``options`` once per
    GPU; the headers it includes are looked for beside it, then in the ``-I`` folders of ``options``."""
    import cupy

    return _module(Path(source), tuple(options), cupy.cuda.Device().id).get_function(name)


@functools.cache
def _module(source: Path, options: tuple[str, ...], device: int) -> Any:
    import cupy

    options = (*options, f"-I{source.parent}")
    with cupy.cuda.Device(device):
        return cupy.RawModule(code=kernel_text(source, [source.parent, *include_folders(options)]), options=options)
