"""Aborting an NCCL communicator without holding Python's GIL, so that graphs that captured it can be freed meanwhile.

NCCL's abort first raises the flags that end its kernels in flight, then waits until no CUDA graph that captured
the communicator lives; freeing a graph waits for its replay in flight. CuPy's ``NcclCommunicator.abort()`` holds
the GIL through all of it, so no Python thread can free the graphs: freed before the abort, a replay spins for
ever; after it, never (a silent peer deadlocked a replaying rank, 2 x H100, 2026-11-26). Called through ctypes,
which lets the GIL go, the abort runs in a thread of its own while the caller frees the graphs: their replays end
as soon as the flags are up, and the abort then finishes.

That needs the communicator's handle, which CuPy keeps to itself: it is read from the object (the one field after
the vtable of its Cython class) and accepted only if NCCL itself then reports the object's rank, size and device.
Where any of this fails, ``handle`` is None and the caller keeps to CuPy (nccl then replays no graph of its own).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The size of CuPy's NcclCommunicator object: Python's header, the Cython vtable, the ncclComm_t handle.
_LAYOUT_BYTES = 8 * 4
_FUNCTIONS = ("ncclCommAbort", "ncclCommCount", "ncclCommUserRank", "ncclCommCuDevice")


@functools.cache
def _library() -> Any:
    """NCCL's functions as CuPy's NCCL module resolved them (ctypes, so that the handle is that library's own: torch
    may have loaded another copy), or None."""
    try:
        from cupy_backends.cuda.libs import nccl

        # A symbol looked up through CuPy's module is found in the libraries that module depends on.
        candidates = [nccl.__file__]
        loaded = {line.split(maxsplit=5)[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                  if "libnccl.so" in line}  # fmt: skip
        candidates += list(loaded) if len(loaded) == 1 else []  # one NCCL in the process: CuPy's
        for path in candidates:
            library = ctypes.CDLL(path)
            if all(hasattr(library, name) for name in _FUNCTIONS):
                break
        else:
            return None
        for name in _FUNCTIONS:
            function = getattr(library, name)
            function.restype = ctypes.c_int
            function.argtypes = [ctypes.c_void_p] + ([] if name == "ncclCommAbort" else [ctypes.POINTER(ctypes.c_int)])
        return library
    except Exception as error:  # no NCCL, no /proc: CuPy's own abort, as before
        log.info("NCCL cannot be aborted without the GIL here: %s", error)
        return None


def _ask(library: Any, name: str, handle: int) -> int | None:
    value = ctypes.c_int(-1)
    return value.value if getattr(library, name)(handle, ctypes.byref(value)) == 0 else None


def handle(communicator: Any) -> int | None:
    """The ncclComm_t inside CuPy's ``communicator``, or None where it cannot be read and confirmed."""
    library = _library()
    if library is None or type(communicator).__basicsize__ != _LAYOUT_BYTES:
        return None
    raw = _field(communicator).value
    if not raw:
        return None
    reported = [_ask(library, n, raw) for n in ("ncclCommUserRank", "ncclCommCount", "ncclCommCuDevice")]
    if reported != [communicator.rank_id(), communicator.size(), communicator.device_id()]:
        return None
    return raw


def _field(communicator: Any) -> ctypes.c_void_p:
    """CuPy's field holding the handle, in the object itself (the layout ``handle`` checks)."""
    return ctypes.c_void_p.from_address(id(communicator) + _LAYOUT_BYTES - 8)


def abort_in_background(communicator: Any, raw: int) -> threading.Thread:
    """Start aborting ``communicator`` (its handle ``raw``, from ``handle``) on a thread of its own, the GIL let go;
    the caller then frees the graphs that captured it, and may join the thread. CuPy's object is left holding no
    handle, as its own abort leaves it: its destroy (when it is freed) does nothing, and its calls fail cleanly."""
    _field(communicator).value = None
    thread = threading.Thread(target=_library().ncclCommAbort, args=(raw,), name="gridcomm-nccl-abort", daemon=True)
    thread.start()
    return thread
