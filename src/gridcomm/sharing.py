"""Arrays whose memory the other ranks of the node can map: ``shared_zeros``.

Each array lies in a memory file of its own (``memfd_create``: no name in any folder, nothing left behind when the
process ends, however it ends). A peer on the same node opens it through ``/proc/<pid>/fd/<fd>`` (the permission
that reading the process's memory with ``process_vm_readv`` needs, so where ``cma`` runs this does) and maps it
read-only. ``cma`` then copies what a sender's fields in such an array send it out of the mapping, in one NumPy
copy where the runs form a grid (every block of a slab transposition): no system call per exchange, no page pinned
by the kernel (16 ranks of a 64-core host spent about 2.5x a plain copy of their slabs in ``process_vm_readv`` for
a transposition of 128³ float64, 2026-11-27).
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import weakref
from typing import Any

import numpy as np

from .arguments import whole_number
from .errors import ArgumentError

#: The arrays made here and alive, by the address of their first byte: (memory file's descriptor, bytes).
_SEGMENTS: dict[int, tuple[int, int]] = {}


def shared_zeros(shape: int | tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """A C-contiguous array of zeros of ``shape`` and ``dtype`` (a NumPy dtype of numbers) in memory the node's
    other ranks can map (Linux): fields made so are copied by ``cma`` without a system call per exchange. Any
    exchanger takes them as it takes any NumPy array. ArgumentError off Linux or for a bad shape or dtype."""
    if not sys.platform.startswith("linux") or not hasattr(os, "memfd_create"):
        raise ArgumentError("shared_zeros needs Linux (memfd_create); allocate with numpy.zeros elsewhere")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    for extent in shape:
        whole_number(extent, "shared_zeros(shape)", least=0, meaning="a dimension's extent")
    dtype = np.dtype(dtype)
    if dtype.hasobject or dtype.kind not in "biufc":
        raise ArgumentError(f"shared_zeros(dtype={dtype}): give a dtype of numbers (bool, integers, floats, complex)")
    nbytes = max(math.prod(shape) * dtype.itemsize, 1)
    fd = os.memfd_create("gridcomm-field", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        mapping = mmap.mmap(fd, nbytes)
    except OSError:
        os.close(fd)
        raise
    array = np.frombuffer(mapping, dtype=np.uint8)[: math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
    start = array.ctypes.data if array.size else np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    _SEGMENTS[start] = (fd, nbytes)
    weakref.finalize(mapping, _forget, start, fd)  # the last view gone: the descriptor goes too
    return array


def _forget(start: int, fd: int) -> None:
    _SEGMENTS.pop(start, None)
    os.close(fd)


def segment_of(runs: np.ndarray) -> tuple[int, int, int] | None:
    """The array of ``shared_zeros`` that holds every run of ``runs`` ((address, bytes) rows), as (descriptor, its
    first byte's address, its bytes); None where no one array holds them all (or there are no runs)."""
    runs = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    if not len(runs):
        return None
    low, high = int(runs[:, 0].min()), int((runs[:, 0] + runs[:, 1]).max())
    for start, (fd, nbytes) in _SEGMENTS.items():
        if start <= low and high <= start + nbytes:
            return fd, start, nbytes
    return None


def map_segment(pid: int, fd: int, nbytes: int) -> mmap.mmap | None:
    """Process ``pid``'s array of ``shared_zeros`` (its descriptor ``fd``, ``nbytes``), mapped here read-only; None
    where it cannot be opened (another node, another user, a process gone)."""
    try:
        here = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return mmap.mmap(here, nbytes, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(here)
