"""Helpers shared by the MPI check programs: transports to cover, a serial reference, bitwise comparison.

Everything here is plain NumPy and independent of gridcomm's own reference code (gridcomm.verify), so
that a bug there cannot hide a bug in the exchange.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

import gridcomm
import gridcomm.mpilib
import gridcomm.shmem
from gridcomm.transports import CmaTransport, IpcTransport, MpiTransport, ShmTransport, StagedTransport

# GRIDCOMM_CHECK_DEVICE=gpu runs the same checks with the fields on the GPU (one GPU per rank, chosen by
# tests/mpi_programs/runner.py) over the GPU transports: see HaloExchanger below.
ON_GPU = os.environ.get("GRIDCOMM_CHECK_DEVICE", "") == "gpu"

# Every correctness check runs over each of these. On the host: the four configurations of the MPI
# transport, cma, shm, and "auto" (whatever gridcomm picks here); the property test also draws "mpi" (the name,
# default options). On the GPU: every GPU transport usable here (mpi only where MPI is CUDA-aware).
HOST_TRANSPORTS: dict[str, Any] = {
    "p2p/datatype": MpiTransport(method="p2p", packing="datatype"),
    "p2p/copy": MpiTransport(method="p2p", packing="copy"),
    "neighbor/datatype": MpiTransport(method="neighbor", packing="datatype"),
    "neighbor/copy": MpiTransport(method="neighbor", packing="copy"),
    "cma": "cma",
    # Every exchange's reads on two threads, signalled by MPI's messages ("cma": by counters in memory, on x86-64).
    "cma/threads, mpi signals": CmaTransport(threads=2, thread_bytes=0, signals="mpi"),
    "shm": "shm",
    "shm/each straight in": ShmTransport(direct_bytes=0),  # every message packed into its receiver's buffer
    "auto": "auto",
}
# Transports that move boxes only (no unstructured row lists): the structured and transposition suites add them.
BOX_TRANSPORTS: dict[str, Any] = {}
if ON_GPU:
    BOX_TRANSPORTS["ipc/copy-engine"] = IpcTransport(method="copy-engine")
    # Every GPU transport of the registry that can run in this process (mpi where MPI is CUDA-aware, nvshmem where
    # gridcomm[nvshmem] is installed), auto, staged in messages of more than one chunk (the suites' are
    # smaller than a default chunk): its pipelined path, and ipc's kernel on few blocks.
    TRANSPORTS: dict[str, Any] = {name: name for name in gridcomm.transports.runnable(on_device=True)}
    TRANSPORTS["auto"] = "auto"
    TRANSPORTS["staged/small chunks"] = StagedTransport(chunk_bytes=96)  # on one node: through node memory
    TRANSPORTS["staged/small chunks/mpi"] = StagedTransport(chunk_bytes=96, node_memory=False)
    if "ipc" in TRANSPORTS:  # its kernel held to a few blocks, as a pipelined transform holds it; and the suites'
        TRANSPORTS["ipc/3 blocks"] = IpcTransport(blocks=3)  # small exchanges written straight into the fields,
        TRANSPORTS["ipc/two-way"] = IpcTransport(one_way_bytes=0)  # which "ipc" moves one way through landing areas
    TRANSPORT_CHOICES: dict[str, Any] = dict(TRANSPORTS)
else:
    TRANSPORTS = HOST_TRANSPORTS
    TRANSPORT_CHOICES = {**TRANSPORTS, "mpi": "mpi"}
# Declared nodes that split the job (GRIDCOMM_RANKS_PER_NODE, tests/test_mpi.py): a transport that reaches the ranks
# of one node serves the peers on a rank's node, and auto the others (named alone for every peer, it is refused).
_PER_NODE = int(os.environ.get("GRIDCOMM_RANKS_PER_NODE") or 0)
if 0 < _PER_NODE < MPI.COMM_WORLD.Get_size():

    def _within_nodes(transport: Any) -> Any:
        name = transport if isinstance(transport, str) else transport.name
        one_node = name != "auto" and gridcomm.transports.kind(name).reach == "node"
        return {"node": transport, "network": "auto"} if one_node else transport

    HOST_TRANSPORTS, TRANSPORTS, TRANSPORT_CHOICES, BOX_TRANSPORTS = (
        {k: _within_nodes(v) for k, v in d.items()}
        for d in (HOST_TRANSPORTS, TRANSPORTS, TRANSPORT_CHOICES, BOX_TRANSPORTS)
    )


def same_node(a: int, b: int) -> bool:
    """Whether ranks ``a`` and ``b`` (of MPI.COMM_WORLD, or of a communicator of its first ranks) are on one
    node as declared above: where they are not, a transport of one node named in TRANSPORTS moves nothing
    between them (auto does)."""
    return not 0 < _PER_NODE < MPI.COMM_WORLD.Get_size() or a // _PER_NODE == b // _PER_NODE


# GRIDCOMM_CHECK_TRANSPORTS (comma-separated keys) keeps only those transports, e.g. "staged,ipc" for several
# ranks sharing one GPU (NCCL refuses two ranks on one device).
if os.environ.get("GRIDCOMM_CHECK_TRANSPORTS"):
    _KEPT = set(os.environ["GRIDCOMM_CHECK_TRANSPORTS"].split(","))
    TRANSPORTS, TRANSPORT_CHOICES, BOX_TRANSPORTS = (
        {k: v for k, v in d.items() if k in _KEPT} for d in (TRANSPORTS, TRANSPORT_CHOICES, BOX_TRANSPORTS)
    )


class Mirrored:
    """A gridcomm exchanger (HaloExchanger, Transposer) over GPU copies of host arrays: each exchange uploads
    the host arrays it sends from (and those it receives into: their sentinels), runs on the GPU and brings
    back the cells it changed, so that the host-side checks (bytes, sentinels, in-place edits between rounds)
    test the GPU data path unchanged. A subclass's constructor mirrors the arrays and sets ``exchanger``."""

    exchanger: Any
    device: list[Any]  # every GPU copy
    _sent: list[tuple[np.ndarray, Any]]  # (host, device) uploaded at each start()
    _received: list[tuple[np.ndarray, Any]]  # (host, device) whose changed cells each wait() brings back

    @staticmethod
    def _on_device(arrays: Any) -> tuple[list[np.ndarray], list[Any], Any]:
        """(the host arrays as a list, their GPU copies, what to hand gridcomm: one copy or the list)."""
        import cupy

        single = not isinstance(arrays, list | tuple)
        host = [arrays] if single else list(arrays)
        device = [cupy.array(a, order="F" if _fortran(a) else "C") for a in host]
        return host, device, device[0] if single else device

    def __getattr__(self, name: str) -> Any:  # layout, transport, timeout, count, bytes_per_exchange, ...
        return getattr(self.exchanger, name)

    def _upload(self) -> None:
        self._uploaded = [h.copy(order="A") for h, _ in self._received]
        for h, d in self._sent:
            d.set(h)

    def download(self) -> None:
        """Bring back the cells the exchange changed; the rest keep what the host wrote meanwhile (a check
        may work on the interior between start() and wait())."""
        import cupy

        cupy.cuda.Device().synchronize()
        for (h, d), before in zip(self._received, self._uploaded, strict=True):
            after = d.get(order="A")
            changed = (cell_bytes(after) != cell_bytes(before)).any(axis=-1)
            cell_bytes(h)[changed] = cell_bytes(after)[changed]

    def start(self, *args: Any) -> Any:
        if self.exchanger._closed or not self.exchanger._handle.done:
            return self.exchanger.start(*args)  # raises; an upload now would overwrite data in flight
        self._upload()
        return _MirroredHandle(self, self.exchanger.start(*args))

    def exchange(self) -> None:
        self.start().wait()

    def close(self) -> None:
        self.exchanger.close()

    def __enter__(self) -> Mirrored:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.exchanger.__exit__(*exc)


class _MirroredExchanger(Mirrored):
    """A HaloExchanger over GPU copies of host fields (received into the fields themselves)."""

    def __init__(self, decomposition: Any, fields: Any, transport: Any = "auto", **kwargs: Any) -> None:
        host, self.device, given = self._on_device(fields)
        self._sent = self._received = list(zip(host, self.device, strict=True))
        self.exchanger = gridcomm.HaloExchanger(decomposition, given, transport, **kwargs)


class _MirroredHandle:
    def __init__(self, owner: Mirrored, handle: Any) -> None:
        self._owner, self._handle = owner, handle

    def wait(self) -> None:
        self._handle.wait()
        self._owner.download()


def _fortran(a: np.ndarray) -> bool:
    return a.flags.f_contiguous and not a.flags.c_contiguous


def HaloExchanger(decomposition: Any, fields: Any, transport: Any = "auto", **kwargs: Any) -> Any:
    """gridcomm.HaloExchanger on host fields; on the GPU (ON_GPU) the same over GPU copies of them."""
    if ON_GPU:
        return _MirroredExchanger(decomposition, fields, transport, **kwargs)
    return gridcomm.HaloExchanger(decomposition, fields, transport, **kwargs)


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


def every_rank(n: int, shape: Any, **kwargs: Any) -> list[gridcomm.CartesianDecomposition]:
    """The CartesianDecomposition of each of ``n`` ranks, built in this one process on stand-in communicators."""
    return [gridcomm.CartesianDecomposition(stand_in_comm(r, n), shape, **kwargs) for r in range(n)]


def stand_in_comm(rank: int, size: int) -> Any:
    """A gridcomm Communicator that knows its rank and size and nothing else (no MPI underneath): enough to
    build any rank's CartesianDecomposition and pattern in one process."""
    from gridcomm import Communicator

    comm = object.__new__(Communicator)
    comm.rank, comm.size, comm.timeout, comm.mpi = rank, size, 60.0, None
    comm.agree = _agree_alone
    return comm


def _agree_alone(operation: str, signature: Any = None, problem: Exception | None = None, note: str = "") -> list[str]:
    """A stand-in communicator's ``agree``: no peers to compare with, so only this rank's own problem counts."""
    if problem is not None:
        raise problem
    return [note]


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


def shared_copy(a: np.ndarray) -> np.ndarray:
    """``a`` copied into an array of gridcomm.shared_zeros (memory the node's ranks share), in the same memory
    order: cma copies a sender's fields made so out of a mapping, with no system call."""
    fortran = a.flags.f_contiguous and not a.flags.c_contiguous
    copy = gridcomm.shared_zeros(a.shape[::-1], a.dtype).T if fortran else gridcomm.shared_zeros(a.shape, a.dtype)
    copy[...] = a
    return copy


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


def staggered_shape(global_shape, periodic, stagger) -> tuple[int, ...]:
    """The global grid of a field staggered along the axes ``stagger``: one more face than cells along each such
    axis that is not periodic (faces 0..N), as many where it is (face N is face 0)."""
    return tuple(n + (k in stagger and not periodic[k]) for k, n in enumerate(global_shape))


def staggered_owned_slices(global_shape, proc_grid, coords, periodic, stagger) -> tuple[slice, ...]:
    """The points of the global staggered grid a rank owns, from the documented convention: face i is the low face
    of cell i and belongs to its cell's rank; the last block of a non-periodic staggered axis owns face N too."""
    owned = owned_slices(global_shape, proc_grid, coords)
    return tuple(
        slice(s.start, s.stop + (k in stagger and not periodic[k] and c == p - 1))
        for k, (s, p, c) in enumerate(zip(owned, proc_grid, coords, strict=True))
    )


def local_with_halo(
    owned: Sequence[slice], halo: Sequence[tuple[int, int]], global_array: np.ndarray, order: str = "C"
):
    """A local array of the shape the reference works out (the owned points plus ``halo``): the owned part of
    ``global_array`` inside, sentinel bytes in the halo."""
    shape = tuple(s.stop - s.start + lo + hi for s, (lo, hi) in zip(owned, halo, strict=True))
    local = np.empty(shape, dtype=global_array.dtype, order=order)
    cells = cell_bytes(local)
    cells[...] = SENTINEL_BYTE
    inside = tuple(slice(lo, lo + s.stop - s.start) for s, (lo, _) in zip(owned, halo, strict=True))
    cells[inside] = cell_bytes(global_array)[tuple(owned)]
    return local


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


# -- property tests over MPI: rank 0 draws and broadcasts, the first n ranks run, rank 0 asserts ------------


def broadcast(comm: Any, case: Any) -> Any:
    """Collective, non-blocking underneath (every rank polls with sleeps, so idle ranks leave the cores to
    busy ones): rank 0's ``case``, pickled, reaches every rank. None means "no more cases"."""
    import pickle

    from mpi4py import MPI

    payload = pickle.dumps(case) if comm.Get_rank() == 0 else b""
    length = np.array([len(payload)], dtype=np.int64)
    polite_wait(comm.Ibcast([length, MPI.INT64_T], root=0), timeout=600)
    buffer = bytearray(payload) if comm.Get_rank() == 0 else bytearray(int(length[0]))
    polite_wait(comm.Ibcast([buffer, MPI.BYTE], root=0), timeout=600)
    return pickle.loads(bytes(buffer))


def run_everywhere(
    comm: Any, case: Any, nranks: int, run_case: Callable[[Any, Any], list[str]]
) -> list[tuple[int, list[str]]]:
    """Every rank: the first ``nranks`` split off a communicator and call ``run_case(sub, case)`` (it returns
    this rank's problems, empty if none), the others sit the example out. Rank 0 gets [(rank, problems)] of
    every rank that saw a problem; an exception counts as one."""
    import traceback

    from mpi4py import MPI

    rank = comm.Get_rank()
    inside = rank < nranks
    sub = comm.Split(0 if inside else MPI.UNDEFINED, rank)
    problems: list[str] = []
    if inside:
        try:
            problems = list(run_case(sub, case))
        except Exception:
            problems = [f"unexpected exception:\n{traceback.format_exc()}"]
        finally:
            sub.Free()
    polite_wait(comm.Ibarrier(), timeout=600)
    everyone = comm.gather(problems, root=0)
    return [(r, p) for r, p in enumerate(everyone or []) if p]


def _property_seed(text: str) -> int:
    if text == "random":
        return random.SystemRandom().randrange(2**32)
    try:
        return int(text)
    except ValueError:
        raise SystemExit(f"GRIDCOMM_PROPERTY_SEED={text!r}: give an integer, or 'random' for a new seed") from None


# Every property test (here and in process, see tests/conftest.py) draws its examples from this seed: the same
# examples every run (seed 0) unless GRIDCOMM_PROPERTY_SEED names another seed or "random" (a new one, printed).
PROPERTY_SEED = _property_seed(os.environ.get("GRIDCOMM_PROPERTY_SEED", "0"))
# Multiplies every property test's number of examples: 4 searches four times as hard, 0.1 is a quick look.
PROPERTY_SCALE = float(os.environ.get("GRIDCOMM_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    """A property test's ``n`` examples times GRIDCOMM_PROPERTY_SCALE (at least one)."""
    return max(1, math.ceil(n * PROPERTY_SCALE))


def replay_hint() -> str:
    """What reproduces this run's examples (the seed; the scale too when it is not 1)."""
    scale = f" GRIDCOMM_PROPERTY_SCALE={PROPERTY_SCALE:g}" if PROPERTY_SCALE != 1 else ""
    return f"the examples came from GRIDCOMM_PROPERTY_SEED={PROPERTY_SEED}{scale}: set it to replay them"


def property_settings(max_examples: int) -> Callable[[Callable], Callable]:
    """Decorator (over @given) of every property test here: (at most) ``max_examples`` examples drawn from
    PROPERTY_SEED, no deadline (MPI and GPU work vary in time, the more on a busy machine), no example
    database, every health check off (cases are drawn from large strategies on purpose); a failure prints the
    blob that reproduces its shrunk example and carries replay_hint() as a note."""
    from hypothesis import HealthCheck, seed, settings

    def apply(test: Callable) -> Callable:
        test = seed(PROPERTY_SEED)(
            settings(
                max_examples=max_examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            )(test)
        )

        def noted(*args: Any, **kwargs: Any) -> Any:
            try:
                return test(*args, **kwargs)
            except BaseException as exc:
                exc.add_note(replay_hint())
                raise

        return noted

    return apply


def rank_counts(world_size: int, few: int = 3) -> Any:
    """Strategy: how many ranks an example runs on, 1 to ``world_size``. Half of the draws take at most ``few``:
    an example on many ranks sharing few cores costs several times one on 1 to 3, so the examples a run can
    afford go mostly to the cheap rank counts while every count still comes up (and shrinks towards 1)."""
    from hypothesis import strategies as st

    return st.one_of(st.integers(1, min(few, world_size)), st.integers(1, world_size))


def run_property(
    comm: Any,
    strategy: Any,
    run_case: Callable[[Any, Any], list[str]],
    max_examples: int,
    *,
    nranks: Callable[[Any], int] = lambda case: case.nranks,
    tally: Mapping[str, Callable[[Any], bool]] | None = None,
) -> None:
    """Collective: a hypothesis property test whose every example runs on several ranks.

    Rank 0 runs the test: each example draws a case from ``strategy`` (a hypothesis strategy), broadcasts it,
    and the first ``nranks(case)`` ranks of ``comm`` run ``run_case(sub, case)`` on a communicator of their
    own (the others sit it out). Each rank's problems are gathered to rank 0, which asserts there, so that
    hypothesis sees the failure and can shrink it to a small case; the other ranks just follow broadcasts
    until rank 0 sends None. Every rank returns normally except rank 0, which raises the (shrunk) failure.

    ``max_examples`` is scaled by GRIDCOMM_PROPERTY_SCALE (examples()); the examples come from PROPERTY_SEED.
    ``tally`` names counters printed with the number of examples at the end, e.g. {"must raise": pred}.
    NVSHMEM allocates over every process of the job, so an example drawing transport "nvshmem" on fewer ranks
    than ``comm`` has is rejected (tests/mpi_programs/checks_exchange.py checks that such a request is refused).
    """
    # Every example builds new plans, and "auto" measuring each candidate on each of them would multiply an
    # example's cost: here "auto" takes the order of preference (checks_exchange's
    # check_auto_measures_the_plan_and_remembers checks the measured choice).
    with environment(GRIDCOMM_AUTO=os.environ.get("GRIDCOMM_AUTO") or "order"):
        _run_property(comm, strategy, run_case, max_examples, nranks, tally)


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Environment variables set to ``values`` inside the block, restored after it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_property(
    comm: Any,
    strategy: Any,
    run_case: Callable[[Any, Any], list[str]],
    max_examples: int,
    nranks: Callable[[Any], int],
    tally: Mapping[str, Callable[[Any], bool]] | None,
) -> None:
    if comm.Get_rank() != 0:
        while (case := broadcast(comm, None)) is not None:
            run_everywhere(comm, case, nranks(case), run_case)
        return

    from hypothesis import given, reject
    from hypothesis import strategies as st

    start = time.perf_counter()
    tally = dict(tally or {})
    counts = {"examples": 0, **dict.fromkeys(tally, 0)}

    @property_settings(examples(max_examples))
    @given(st.data())
    def property_holds(data: Any) -> None:
        case = data.draw(strategy, label="case")
        if getattr(case, "transport", None) == "nvshmem" and nranks(case) != comm.Get_size():
            reject()
        counts["examples"] += 1
        for name, predicate in tally.items():
            counts[name] += bool(predicate(case))
        broadcast(comm, case)
        failures = run_everywhere(comm, case, nranks(case), run_case)
        assert not failures, "\n".join(f"rank {r}: " + "\n".join(p) for r, p in failures)

    try:
        property_holds()
    finally:
        broadcast(comm, None)
        noted = ", ".join(f"{counts[name]} {name}" for name in tally)
        print(
            f"# {counts['examples']} examples{f' ({noted})' if noted else ''} in {time.perf_counter() - start:.1f} s"
            f" (seed {PROPERTY_SEED})",
            flush=True,
        )


def run_program(main: Callable[[list[str]], int]) -> None:
    """``sys.exit(main(sys.argv))``; an exception on one rank aborts the job, so that the others never wait
    for it forever."""
    import sys
    import traceback

    from mpi4py import MPI

    try:
        status = main(sys.argv)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(2)
    sys.exit(status)


def gather_problems(got: Any, want: np.ndarray, root: int, rank: int) -> list[str]:
    """What is wrong with ``gather(..., root)``'s result on this rank: the whole array, bit for bit, on the
    root; None everywhere else."""
    if rank != root:
        return [] if got is None else [f"gather to {root}: non-root rank got {type(got).__name__}"]
    if got is None or got.shape != want.shape or got.dtype != want.dtype:
        return [f"gather to {root}: got {None if got is None else (got.shape, got.dtype)}"]
    if not np.array_equal(cell_bytes(np.ascontiguousarray(got)), cell_bytes(want)):
        return [f"gather to {root}: values differ"]
    return []
