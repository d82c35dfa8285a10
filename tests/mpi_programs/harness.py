"""Helpers shared by the MPI check programs: transports to cover, a serial reference, bitwise comparison.

Everything here is plain NumPy and independent of gridcomm's own reference code (gridcomm.verify), so
that a bug there cannot hide a bug in the exchange.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gridcomm.transports import MpiTransport

# Every correctness check runs over each of these: the four configurations of the MPI transport, and
# "auto" (whatever gridcomm picks here). The property test also draws "mpi" (the name, default options).
TRANSPORTS: dict[str, Any] = {
    "p2p/datatype": MpiTransport(method="p2p", packing="datatype"),
    "p2p/copy": MpiTransport(method="p2p", packing="copy"),
    "neighbor/datatype": MpiTransport(method="neighbor", packing="datatype"),
    "neighbor/copy": MpiTransport(method="neighbor", packing="copy"),
    "auto": "auto",
}
TRANSPORT_CHOICES: dict[str, Any] = {**TRANSPORTS, "mpi": "mpi"}

DTYPES = (
    "float32", "float64", "int32", "int64", "complex64", "complex128",
    "uint8", "int8", "int16", "uint16", "uint32", "uint64", "bool", "float16",
)  # fmt: skip

SENTINEL_BYTE = 0xA5


def ranks(minimum: int = 1, maximum: int | None = None, only: Sequence[int] | None = None) -> Callable:
    """Decorator: run a check only on worlds of these sizes (the runner reports it skipped otherwise)."""

    def accept(size: int) -> bool:
        if only is not None:
            return size in only
        return size >= minimum and (maximum is None or size <= maximum)

    def mark(fn: Callable) -> Callable:
        fn.accepts_size = accept
        return fn

    return mark


def stand_in_comm(rank: int, size: int) -> Any:
    """A gridcomm Communicator that knows its rank and size and nothing else (no MPI underneath): enough to
    build any rank's CartesianDecomposition and pattern in one process."""
    from gridcomm import Communicator

    comm = object.__new__(Communicator)
    comm.rank, comm.size, comm.timeout, comm.mpi = rank, size, 60.0, None
    return comm


# -- waiting politely (8 ranks share 2 cores) --------------------------------------------------------------


def polite_wait(request: Any, timeout: float = 120.0) -> None:
    """Test ``request`` until it completes, sleeping 1 ms between tests; RuntimeError after ``timeout``."""
    start = time.monotonic()
    while not request.Test():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"gave up waiting for a request after {timeout} s")
        time.sleep(0.001)


def polite_barrier(comm: Any) -> None:
    polite_wait(comm.Ibarrier())


# -- bytes of arrays --------------------------------------------------------------------------------------


def cell_bytes(a: np.ndarray) -> np.ndarray:
    """A writable uint8 view of ``a`` shaped (*a.shape, itemsize): the raw bytes of every cell, indexed
    logically. Comparing these compares bitwise (NaN payloads, -0.0, invalid bools all count)."""
    if a.flags.c_contiguous:
        return a.reshape(-1).view(np.uint8).reshape((*a.shape, a.itemsize))
    if a.flags.f_contiguous:
        t = a.T  # C-contiguous
        raw = t.reshape(-1).view(np.uint8).reshape((*t.shape, a.itemsize))
        return raw.transpose((*reversed(range(a.ndim)), a.ndim))
    raise ValueError("cell_bytes needs a contiguous array")


def random_global(shape: Sequence[int], dtype: Any, seed: int) -> np.ndarray:
    """A C-ordered array of random bits (bools are 0/1), identical on every rank for the same seed."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.random.default_rng(seed).integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    if dt == np.bool_:
        raw &= 1
    return raw.view(dt).reshape(tuple(shape))


def local_with_sentinel(decomposition: Any, global_array: np.ndarray, order: str = "C") -> np.ndarray:
    """A local array: the owned part of ``global_array`` in the interior, sentinel bytes in the halo."""
    local = np.empty(decomposition.local_shape, dtype=global_array.dtype, order=order)
    cells = cell_bytes(local)
    cells[...] = SENTINEL_BYTE
    cells[decomposition.interior_slices] = cell_bytes(global_array)[decomposition.global_slices]
    return local


def block_partition(n: int, p: int) -> list[tuple[int, int]]:
    """(start, stop) of each of ``p`` blocks of ``n`` points, the first n % p blocks one point longer."""
    base, extra = divmod(n, p)
    bounds, start = [], 0
    for i in range(p):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def owned_slices(global_shape, proc_grid, coords) -> tuple[slice, ...]:
    return tuple(slice(*block_partition(n, p)[c]) for n, p, c in zip(global_shape, proc_grid, coords, strict=True))


def expected_cells(
    global_array: np.ndarray,
    owned: Sequence[slice],
    halo: Sequence[tuple[int, int]],
    periodic: Sequence[bool],
    stencil: str,
) -> np.ndarray:
    """What every cell of a rank's local array must hold after an exchange, as cell bytes.

    Local index i along dimension k is global index owned[k].start - halo[k][0] + i. Inside the grid (or
    wrapped, in a periodic dimension) the cell holds that global point; beyond a non-periodic boundary it
    keeps the sentinel. With ``stencil="star"`` a cell outside the owned block in more than one dimension
    keeps the sentinel too.
    """
    src = cell_bytes(global_array)
    ndim = global_array.ndim
    index, written, outside = [], np.ones((), dtype=bool), np.zeros((), dtype=np.int64)
    for k in range(ndim):
        n, (lo, hi), s = global_array.shape[k], halo[k], owned[k]
        g = np.arange(s.start - lo, s.stop + hi)
        shape = [1] * ndim
        shape[k] = len(g)
        inside_grid = (g >= 0) & (g < n)
        written = written & (inside_grid | bool(periodic[k])).reshape(shape)
        outside = outside + ((g < s.start) | (g >= s.stop)).astype(np.int64).reshape(shape)
        index.append(g % n)
    out = src[np.ix_(*index)].copy()
    if stencil == "star":
        written = written & (outside <= 1)
    out[~np.broadcast_to(written, out.shape[:-1])] = SENTINEL_BYTE
    return out


def describe_mismatch(actual: np.ndarray, expected_bytes: np.ndarray, limit: int = 6) -> str | None:
    """None when ``actual`` holds exactly ``expected_bytes`` (as from expected_cells), else a description."""
    got = cell_bytes(actual)
    if got.shape != expected_bytes.shape:
        return f"shape {got.shape[:-1]} != expected {expected_bytes.shape[:-1]}"
    wrong = np.argwhere((got != expected_bytes).any(axis=-1))
    if len(wrong) == 0:
        return None
    lines = []
    for idx in wrong[:limit]:
        t = tuple(int(i) for i in idx)
        exp = expected_bytes[t]
        what = "sentinel (must not be written)" if (exp == SENTINEL_BYTE).all() else exp.tobytes().hex()
        lines.append(f"  cell {t}: got {got[t].tobytes().hex()}, expected {what}")
    return f"{len(wrong)} of {int(np.prod(got.shape[:-1]))} cells wrong:\n" + "\n".join(lines)


# -- collective assertions --------------------------------------------------------------------------------


def assert_everywhere(comm: Any, problem: str | None) -> None:
    """Collective: raise AssertionError on every rank if any rank reports a problem (None = fine)."""
    problems = comm.allgather(problem)
    bad = [f"rank {r}: {p}" for r, p in enumerate(problems) if p]
    if bad:
        raise AssertionError("\n".join(bad))


def outcome(fn: Callable[[], Any]) -> tuple[str | None, str]:
    """(exception type name or None, message) of calling ``fn``; closes what it returns."""
    try:
        made = fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    close = getattr(made, "close", None)
    if close is not None:
        close()
    return None, ""


def assert_raises_everywhere(comm: Any, fn: Callable[[], Any], exc_type: type, *words: str | tuple[str, ...]) -> None:
    """Collective: every rank calls ``fn``; each must raise ``exc_type`` (or a subclass) whose message contains
    each of ``words`` (case-insensitive; a tuple of words means any one of them). Words may differ per rank."""
    import builtins

    import gridcomm.errors as errors

    name, message = outcome(fn)
    problem = None
    got_type = getattr(errors, name, None) or getattr(builtins, name, None) if name else None
    if name is None:
        problem = f"no exception (expected {exc_type.__name__})"
    elif not (isinstance(got_type, type) and issubclass(got_type, exc_type)):
        problem = f"{name}: {message} (expected {exc_type.__name__})"
    else:
        alternatives = [w if isinstance(w, tuple) else (w,) for w in words]
        missing = [a for a in alternatives if not any(w.lower() in message.lower() for w in a)]
        if missing:
            problem = f"{name} message lacks {missing}: {message}"
    assert_everywhere(comm, problem)
