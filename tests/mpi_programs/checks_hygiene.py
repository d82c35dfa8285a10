"""Resource hygiene: making, using once and closing 1,000 exchangers and 1,000 transposers leaks nothing.

tests/test_hygiene.py runs this on 1 and 4 ranks (host fields), and on 2 GPUs with GRIDCOMM_CHECK_DEVICE=gpu
(the device machine: benchmarks/gpu_session.sh, stage ``hygiene``). Each measuring check warms up (every
combination of its plan twice, so that caches, allocator pools and MPI's object pools reach their steady
size), measures, runs its cycles and measures again; a growth beyond TOLERANCES on any rank fails it. Every
cycle also checks its own object: the exchange is bitwise right, every MPI handle it held is freed by close(),
a second close() is harmless and any use after close() raises GridcommError. Apart from those,
``check_closed_objects_hold_no_buffers`` asks that close() free everything even while the object is still
referenced (tests/test_hygiene.py expects it to fail until the packers and channels release their buffers).

Measured on every rank (``usage``), growth = after - before:

- resident memory (/proc/self/statm) and the C heap in use (glibc's mallinfo2: MPI's allocations, NumPy's
  array data, ...), KiB; Python objects the garbage collector tracks, and Python's small memory blocks
  (sys.getallocatedblocks: every small object, tracked or not);
- open file descriptors (/proc/self/fd), threads (/proc/self/task) and shared-memory mappings (/proc/self/maps
  entries under /dev/shm: MPICH's and NCCL's segments);
- MPI communicators, datatypes and requests leaked (``MpiObjectProbe``; MPICH only, which CI runs; with any MPI
  every cycle checks that close() freed every MPI handle its object held, ``unfreed``);
- exchangers and transposers still alive after a garbage collection;
- on the GPU: CuPy's pool memory in use, device memory in use (cudaMemGetInfo), CUDA IPC mappings open and live
  CUDA streams and events (``CudaObjectCount``). NCCL communicators show as threads, file descriptors and /dev/shm
  mappings (each starts proxy threads and maps shared memory). The GPU part has not run on a GPU yet.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import itertools
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
from harness import (
    BOX_TRANSPORTS,
    ON_GPU,
    TRANSPORTS,
    HaloExchanger,
    assert_everywhere,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    local_with_halo,
    local_with_sentinel,
    polite_barrier,
    random_global,
    staggered_owned_slices,
    staggered_shape,
)
from mpi4py import MPI

import gridcomm
from gridcomm import (
    CartesianDecomposition,
    Communicator,
    GridcommError,
    Transposer,
    UnstructuredDecomposition,
)
from gridcomm.lab.bench.soak import resident_bytes

CYCLES = 1000  # exchangers (and, separately, transposers) made, used once and closed per measuring check
# Of each of the other resource holders (DistributedTransform, Stencil2D, Communicator).
SMALL_CYCLES = int(os.environ.get("GRIDCOMM_HYGIENE_SMALL_CYCLES", "20"))

# Largest growth (after - before, on any rank) that passes, per measure. What was seen without a leak, on 1
# and 4 ranks: resident memory 0-256 KiB (allocator pages); C heap 1-25 KiB; Python memory blocks 13-750,
# levelling off after about 2,000 cycles (caches of freed small blocks filling up). So a leak of 130 B per
# cycle fails the C heap, of one gc-tracked object per cycle the object count, of two small untracked ones
# (ints, strings, array headers) the blocks. Counted resources must come back exactly, but device memory in
# use, which the driver hands out in pages of 2 MiB.
TOLERANCES: dict[str, int] = {
    "resident memory [KiB]": 1024,
    "C heap in use [KiB]": 128,
    "Python memory blocks": 2000,
    "Python objects": 50,
    "open file descriptors": 0,
    "threads": 0,
    "/dev/shm mappings": 0,
    "MPI communicators leaked": 0,
    "MPI datatypes leaked": 0,
    "MPI requests leaked": 0,
    "objects alive after gc": 0,
    "GPU pool in use [KiB]": 0,
    "GPU memory in use [MiB]": 4,
    "CUDA IPC mappings": 0,
    "NVSHMEM symmetric allocations": 0,
    "CUDA streams": 0,
    "CUDA events": 0,
}


# -- measures ---------------------------------------------------------------------------------------------


def _count(path: str) -> int:
    return len(os.listdir(path))


def shm_mappings() -> int:
    """Entries of this process's memory map backed by files under /dev/shm."""
    with open("/proc/self/maps") as maps:
        return sum("/dev/shm/" in line for line in maps)


class _Mallinfo2(ctypes.Structure):
    _fields_: ClassVar = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]  # fmt: skip


@functools.cache
def _mallinfo2() -> Any:
    """glibc's mallinfo2 (2.33 and later), or None elsewhere."""
    function = getattr(ctypes.CDLL(None), "mallinfo2", None)
    if function is not None:
        function.restype = _Mallinfo2
    return function


def c_heap_bytes() -> int | None:
    """Bytes malloc has handed out and not got back, in every arena and as mmap chunks (glibc's mallinfo2):
    the C allocations of MPI, NumPy's array data, CuPy's host side, Python's objects above 512 B. None
    without glibc."""
    if _mallinfo2() is None:
        return None
    info = _mallinfo2()()
    return info.uordblks + info.hblkhd


def _handle(obj: Any) -> int:
    return obj.handle & 0xFFFFFFFF  # MPICH handles are 32-bit; mpi4py gives them sign-extended


class MpiObjectProbe:
    """Counts the MPI communicators, datatypes and requests left alive between ``__init__`` and ``leaked()``.

    MPICH hands out handles of each kind from a pool whose free slots form a stack: a free pushes the slot,
    an allocation pops the top. ``_probe`` allocates N objects of a kind and frees them in descending handle
    order, which leaves the N lowest free slots on top, sorted. Work in between that frees all it allocated
    (and never holds more than N at once) leaves that set of slots on top, however it shuffles them; each
    object it leaves alive takes one of them, and the next probe must then take one slot from beyond: the
    number of handles above the first probe's highest is the number of objects leaked. A first, 4N probe
    sorts the whole free stack. ``check_the_mpi_object_probe_counts_a_leak`` proves this on the MPI in use.
    Other MPIs than MPICH are not probed (``leaked`` returns {}).
    """

    KINDS: ClassVar[dict[str, tuple[Callable[[], Any], int]]] = {
        "MPI communicators leaked": (lambda: MPI.COMM_SELF.Dup(), 256),
        "MPI datatypes leaked": (lambda: MPI.BYTE.Dup(), 4096),
        "MPI requests leaked": (lambda: MPI.COMM_SELF.Recv_init(_SCRATCH, MPI.PROC_NULL), 4096),
    }

    def __init__(self) -> None:
        self.enabled = MPI.Get_library_version().startswith("MPICH")
        self.ceilings: dict[str, int] = {}
        if self.enabled:
            for name, (make, n) in self.KINDS.items():
                self._probe(make, 4 * n)
                self.ceilings[name] = max(self._probe(make, n))

    @staticmethod
    def _probe(make: Callable[[], Any], n: int) -> list[int]:
        """Handles of ``n`` new objects, freed again highest first."""
        objects = sorted((make() for _ in range(n)), key=_handle)
        handles = [_handle(o) for o in objects]
        for obj in reversed(objects):
            obj.Free()
        return handles

    def leaked(self) -> dict[str, int]:
        """Objects of each kind left alive since ``__init__`` (at most N: the probe's size)."""
        found = {}
        for name, (make, n) in self.KINDS.items() if self.enabled else ():
            found[name] = sum(h > self.ceilings[name] for h in self._probe(make, n))
        return found


_SCRATCH = np.zeros(1, dtype=np.uint8)


# Classes that describe an exchange's plan (boxes, rows, message layouts), shared with decompositions: not
# resources of an exchanger, and not followed by ``reachable``.
PLAN_MODULES = ("gridcomm.pattern", "gridcomm.packing.layout")


def reachable(root: Any) -> Iterator[tuple[str, Any]]:
    """(path from ``root``, object) for everything reachable from ``root`` through attributes, lists, tuples,
    sets and dicts, each once; not followed into gridcomm Communicators (which exchangers share) or plans."""
    seen: set[int] = set()
    todo: list[tuple[str, Any]] = [("", root)]
    while todo:
        path, obj = todo.pop()
        if id(obj) in seen or isinstance(obj, Communicator | type | ModuleType | str | bytes):
            continue
        if type(obj).__module__ in PLAN_MODULES:
            continue
        seen.add(id(obj))
        yield path, obj
        if isinstance(obj, list | tuple | set | frozenset):
            todo.extend((f"{path}[{i}]", item) for i, item in enumerate(obj))
        elif isinstance(obj, dict):
            todo.extend((f"{path}[{key!r}]", item) for key, item in obj.items())
        elif hasattr(obj, "__dict__"):
            todo.extend((f"{path}.{name}", item) for name, item in vars(obj).items())


def mpi_handles(root: Any) -> list[Any]:
    """Every mpi4py communicator, datatype and request reachable from ``root``."""
    return [obj for _, obj in reachable(root) if isinstance(obj, MPI.Comm | MPI.Datatype | MPI.Request)]


def _owner(array: Any) -> Any:
    """The array that owns ``array``'s memory (itself, or the array it is a view of)."""
    while hasattr(getattr(array, "base", None), "shape"):
        array = array.base
    return array


def _is_buffer(obj: Any) -> bool:
    """Memory or a CUDA object: a NumPy array, a ctypes array, anything of CuPy's (arrays, memory, streams,
    events)."""
    return isinstance(obj, np.ndarray | ctypes.Array) or any(c.__module__.startswith("cupy") for c in type(obj).__mro__)


def held_buffers(root: Any, user_arrays: list[Any]) -> list[str]:
    """Paths of the buffers ``root`` still holds, other than ``user_arrays`` and views of them."""
    users = {id(_owner(a)) for a in user_arrays}
    return [
        f"{path} ({getattr(obj, 'nbytes', ctypes.sizeof(obj) if isinstance(obj, ctypes.Array) else '?')} B)"
        for path, obj in reachable(root)
        if _is_buffer(obj) and id(_owner(obj)) not in users
    ]


def unfreed(handles: list[Any]) -> str | None:
    """What of ``handles`` (taken before a close) is still allocated, or None. Predefined handles (COMM_SELF, say,
    which packs locally) are never freed and do not count."""
    nulls = (MPI.COMM_NULL, MPI.DATATYPE_NULL, MPI.REQUEST_NULL)
    predefined = (MPI.COMM_SELF, MPI.COMM_WORLD)
    left = [
        h
        for h in handles
        if h not in nulls and h not in predefined and not (isinstance(h, MPI.Datatype) and h.is_predefined)
    ]
    if not left:
        return None
    return f"close() left {len(left)} MPI handle(s) allocated: {sorted({type(h).__name__ for h in left})}"


class CudaObjectCount:
    """Live CUDA streams and events made through ``cupy.cuda.Stream(...)`` and ``cupy.cuda.Event(...)`` while
    installed (as a context manager): both are replaced by counting subclasses. CuPy destroys a stream or an
    event when its object dies, so a live object is a live CUDA stream or event. Inactive off the GPU."""

    NAMES = ("Stream", "Event")

    def __init__(self) -> None:
        self.live = dict.fromkeys(self.NAMES, 0)
        self._originals: dict[str, Any] = {}
        self._cuda: Any = None

    def __enter__(self) -> CudaObjectCount:
        if ON_GPU:
            import cupy

            self._cuda = cupy.cuda
            for name in self.NAMES:
                self._originals[name] = getattr(self._cuda, name)
                setattr(self._cuda, name, self._counting(self._originals[name], name))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._originals.items():
            setattr(self._cuda, name, original)

    def _counting(self, cls: type, name: str) -> type:
        live = self.live

        def died() -> None:
            live[name] -= 1

        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            cls.__init__(obj, *args, **kwargs)
            live[name] += 1
            weakref.finalize(obj, died)

        return type(cls.__name__, (cls,), {"__init__": __init__})


def release_device_memory() -> None:
    """Finish this rank's GPU work and return the pool's free blocks to the driver (nothing off the GPU)."""
    if ON_GPU:
        import cupy

        cupy.cuda.Device().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()


def device_usage(cuda_objects: CudaObjectCount) -> dict[str, int]:
    """GPU measures of this rank (empty off the GPU): pool and device memory (call release_device_memory on
    every rank first: device memory is counted for the whole GPU, which ranks may share), IPC mappings open
    (gridcomm.transports.ipc), NVSHMEM symmetric allocations not freed (gridcomm.shmem), live streams and events."""
    if not ON_GPU:
        return {}
    import cupy

    from gridcomm import shmem
    from gridcomm.transports import ipc

    pool = cupy.get_default_memory_pool()
    free, total = cupy.cuda.runtime.memGetInfo()
    found = {"GPU pool in use [KiB]": pool.used_bytes() // 1024, "GPU memory in use [MiB]": (total - free) >> 20}
    mappings = getattr(getattr(ipc, "_MAPPINGS", None), "_open", None)  # private: counted only while it exists
    if mappings is not None:
        found["CUDA IPC mappings"] = len(mappings)
    found["NVSHMEM symmetric allocations"] = shmem.live_allocations()[0]
    found.update({f"CUDA {name.lower()}s": n for name, n in cuda_objects.live.items()})
    return found


def usage(comm: Any, probe: MpiObjectProbe, alive: weakref.WeakSet, cuda_objects: CudaObjectCount) -> dict[str, int]:
    """This rank's measures (TOLERANCES' names), after a garbage collection, once every rank got here and
    gave its free device memory back (ranks sharing a GPU see each other's memory in the device's count)."""
    gc.collect()
    release_device_memory()
    polite_barrier(comm)
    found: dict[str, int] = dict(probe.leaked())
    found["objects alive after gc"] = len(alive)
    found["Python objects"] = len(gc.get_objects())
    found.update(device_usage(cuda_objects))
    heap = c_heap_bytes()
    if heap is not None:
        found["C heap in use [KiB]"] = heap // 1024
    found.update(
        {
            "resident memory [KiB]": resident_bytes() // 1024,
            "Python memory blocks": sys.getallocatedblocks(),
            "open file descriptors": _count("/proc/self/fd"),
            "threads": _count("/proc/self/task"),
            "/dev/shm mappings": shm_mappings(),
        }
    )
    return found


@dataclass
class Tally:
    """What a measured run made (held weakly) and the problems its objects showed."""

    alive: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    problems: list[str] = field(default_factory=list)


def measure(comm: Any, title: str, step: Callable[[int, Tally], None], warm_up: int, count: int) -> None:
    """Collective: ``step(i, tally)`` for i < warm_up, then measure, ``count`` more steps, measure again. Prints
    the figures on rank 0; raises on every rank if a measure grew beyond its tolerance, or a step found a
    problem, on any rank."""
    tally = Tally()
    for i in range(warm_up):
        step(i, tally)
    with CudaObjectCount() as cuda_objects:
        probe = MpiObjectProbe()
        before = usage(comm, probe, tally.alive, cuda_objects)
        start = time.perf_counter()
        for i in range(warm_up, warm_up + count):
            step(i, tally)
        seconds = time.perf_counter() - start
        after = usage(comm, probe, tally.alive, cuda_objects)
    everyone = comm.allgather((before, after))
    growth = {k: max(a[k] - b[k] for b, a in everyone) for k in after}
    if comm.Get_rank() == 0:
        print(f"# {title} on {comm.Get_size()} rank(s): {seconds:.1f} s; before -> after (rank 0), largest growth")
        for k, g in growth.items():
            print(f"#   {k:26} {before.get(k, 0):>9} -> {after[k]:>9}  growth {g:>6}  (tolerance {TOLERANCES[k]})")
        if not probe.enabled:
            print("#   MPI objects not probed: not MPICH")
    grown = [f"{title}: {k} grew by {g} (tolerance {TOLERANCES[k]})" for k, g in growth.items() if g > TOLERANCES[k]]
    assert_everywhere(comm, "\n".join(grown + tally.problems[:5]) or None)


# -- what is made, used once and closed ---------------------------------------------------------------------


class Workload:
    """Fresh arrays, an exchanger (or transposer) over them, and the check of its one exchange."""

    kind = ""

    def fresh(self) -> list[np.ndarray]:
        """New arrays: the values to send, sentinel bytes wherever the exchange must write."""
        raise NotImplementedError

    def build(self, arrays: list[np.ndarray], transport: Any) -> Any:
        raise NotImplementedError

    def wrong(self, arrays: list[np.ndarray]) -> str | None:
        """What differs, bit for bit, from the serial reference after the exchange (None: nothing)."""
        raise NotImplementedError


class Structured(Workload):
    """Two fields (float64 C-ordered, int16 Fortran-ordered) of a small 3-D grid, periodic in two dimensions."""

    kind = "structured"

    def __init__(self, comm: Any) -> None:
        size = comm.Get_size()
        self.d = CartesianDecomposition(comm, (2 * size + 4, 5, 3), halo=1, periodic=(True, False, True))
        self.globals = [random_global(self.d.global_shape, dtype, seed) for seed, dtype in enumerate(("f8", "i2"))]
        d = self.d
        self.expected = [expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil) for g in self.globals]

    def fresh(self) -> list[np.ndarray]:
        return [local_with_sentinel(self.d, g, order) for g, order in zip(self.globals, "CF", strict=True)]

    def build(self, arrays: list[np.ndarray], transport: Any) -> Any:
        return HaloExchanger(self.d, arrays, transport)

    def wrong(self, arrays: list[np.ndarray]) -> str | None:
        problems = [describe_mismatch(a, e) for a, e in zip(arrays, self.expected, strict=True)]
        return "; ".join(p for p in problems if p) or None


class Staggered(Structured):
    """The structured grid's fields of their own halos and staggering in one exchanger: one on the y faces (the
    bounded axis: one more face than cells), one at cell centres with a narrower halo."""

    kind = "staggered"
    FIELDS = (("f8", (1,), ((1, 0), (1, 1), (0, 1))), ("i2", (), ((0, 1), (1, 0), (1, 1))))

    def __init__(self, comm: Any) -> None:
        size = comm.Get_size()
        self.d = d = CartesianDecomposition(comm, (2 * size + 4, 5, 3), halo=1, periodic=(True, False, True))
        self.kinds = [d.field(halo=halo, stagger=stagger) for _, stagger, halo in self.FIELDS]
        self.owned = [staggered_owned_slices(d.global_shape, d.proc_grid, d.coords, d.periodic, stagger)
                      for _, stagger, _ in self.FIELDS]  # fmt: skip
        shapes = [staggered_shape(d.global_shape, d.periodic, stagger) for _, stagger, _ in self.FIELDS]
        self.globals = [random_global(shape, dtype, seed) for seed, (shape, (dtype, _, _)) in
                        enumerate(zip(shapes, self.FIELDS, strict=True))]  # fmt: skip
        self.expected = [expected_cells(g, o, halo, d.periodic, d.stencil)
                         for g, o, (_, _, halo) in zip(self.globals, self.owned, self.FIELDS, strict=True)]  # fmt: skip

    def fresh(self) -> list[np.ndarray]:
        return [local_with_halo(o, halo, g, order) for o, (_, _, halo), g, order in
                zip(self.owned, self.FIELDS, self.globals, "CF", strict=True)]  # fmt: skip

    def build(self, arrays: list[np.ndarray], transport: Any) -> Any:
        return HaloExchanger(self.kinds, arrays, transport)


class Unstructured(Workload):
    """A ring of ids: rank r owns 8 of them, handed over in reverse, and keeps copies of the first two of the
    next rank and the last two of the previous one (none on one rank); one field with 3 levels."""

    kind = "unstructured"
    WIDTH = 8

    def __init__(self, comm: Any) -> None:
        rank, size, w = comm.Get_rank(), comm.Get_size(), self.WIDTH
        owned = np.arange(rank * w, (rank + 1) * w)[::-1]
        after, before = ((rank + 1) % size) * w, ((rank - 1) % size) * w
        halo = [] if size == 1 else sorted({after, after + 1, before + w - 2, before + w - 1})
        self.d = UnstructuredDecomposition(comm, owned, halo)
        self.ids = np.concatenate([owned, np.asarray(halo, dtype=np.int64)])
        self.n_owned = len(owned)
        self.global_rows = random_global((size * w, 3), "f8", 7)

    def fresh(self) -> list[np.ndarray]:
        local = self.global_rows[self.ids].copy()
        cell_bytes(local)[self.n_owned :] = 0xA5
        return [local]

    def build(self, arrays: list[np.ndarray], transport: Any) -> Any:
        return HaloExchanger(self.d, arrays, transport)

    def wrong(self, arrays: list[np.ndarray]) -> str | None:
        return describe_mismatch(arrays[0], cell_bytes(self.global_rows[self.ids]))


class Transposition(Workload):
    """An all-to-all of 3 int64 per pair of ranks (Transposer.from_counts): rank p sends p * 1000 + q * 10 + k
    (k = 0..2) to rank q, which must find it at q's block p. Under GRIDCOMM_CHECK_DEVICE=gpu the arrays are
    CuPy arrays, handed to gridcomm.Transposer as they are."""

    kind = "transposer"
    M = 3

    def __init__(self, comm: Any) -> None:
        self.comm, self.size, self.rank = comm, comm.Get_size(), comm.Get_rank()
        k = np.arange(self.M)
        self.source = np.concatenate([self.rank * 1000 + q * 10 + k for q in range(self.size)])
        self.expected = np.concatenate([p * 1000 + self.rank * 10 + k for p in range(self.size)])

    def fresh(self) -> list[Any]:
        arrays = [self.source, np.full_like(self.expected, -1)]
        if ON_GPU:
            import cupy

            return [cupy.asarray(a) for a in arrays]
        return arrays

    def build(self, arrays: list[np.ndarray], transport: Any) -> Any:
        counts = [self.M] * self.size
        return Transposer.from_counts(self.comm, counts, None, counts, None, arrays[0], arrays[1], transport)

    def wrong(self, arrays: list[Any]) -> str | None:
        got = arrays[1].get() if ON_GPU else arrays[1]
        return None if np.array_equal(got, self.expected) else f"received {got}, expected {self.expected}"


def closed_use_problem(obj: Any) -> str | None:
    """None when a closed object refuses exchange() with GridcommError and takes a second close() quietly."""
    try:
        obj.exchange()
        problem = "exchange() after close() did not raise"
    except GridcommError:
        problem = None
    except Exception as error:
        problem = f"exchange() after close() raised {type(error).__name__} ({error}), not GridcommError"
    try:
        obj.close()
    except Exception as error:
        problem = f"a second close() raised {type(error).__name__}: {error}"
    return problem


def one_cycle(workload: Workload, transport: Any, closing: str, alive: weakref.WeakSet) -> list[str]:
    """Make, use once and close one object (``closing``: "with" or "close"); what went wrong."""
    arrays = workload.fresh()
    obj = workload.build(arrays, transport)
    alive.add(obj)
    held = mpi_handles(obj)
    if closing == "with":
        with obj:
            obj.exchange()
    else:
        obj.exchange()
        obj.close()
    return [p for p in (workload.wrong(arrays), unfreed(held), closed_use_problem(obj)) if p]


Plan = list[tuple[Workload, str, Any, str]]


def plan_of(workloads: list[Workload], transports: dict[str, Any]) -> Plan:
    """Every workload with every closing ("with" or "close") and every transport."""
    combinations = itertools.product(workloads, ("with", "close"), transports.items())
    return [(w, name, transport, closing) for w, closing, (name, transport) in combinations]


def measure_cycles(comm: Any, title: str, plan: Plan) -> None:
    """Collective: go round ``plan`` (workload, transport name, transport, closing), a cycle per step: twice to
    warm up, then CYCLES cycles measured."""

    def step(i: int, tally: Tally) -> None:
        workload, name, transport, closing = plan[i % len(plan)]
        for p in one_cycle(workload, transport, closing, tally.alive):
            tally.problems.append(f"cycle {i} ({workload.kind}, {name}, {closing}): {p}")

    measure(comm, title, step, 2 * len(plan), CYCLES)


# -- the checks ---------------------------------------------------------------------------------------------


def check_the_mpi_object_probe_counts_a_leak(comm):
    """The instrument first: a communicator, 2 datatypes and 3 requests left alive among freed ones are counted
    exactly (on MPICH; elsewhere the probe is off and the other checks say so)."""
    probe = MpiObjectProbe()
    if not probe.enabled:
        return
    kept = [MPI.COMM_SELF.Dup(), MPI.BYTE.Dup(), MPI.BYTE.Dup()]
    kept += [MPI.COMM_SELF.Recv_init(_SCRATCH, MPI.PROC_NULL) for _ in range(3)]
    for _ in range(50):  # churn, freed in an order of its own
        MPI.BYTE.Create_contiguous(2).Free()
        MPI.COMM_SELF.Dup().Free()
    counted = probe.leaked()
    for obj in kept:
        obj.Free()
    expected = {"MPI communicators leaked": 1, "MPI datatypes leaked": 2, "MPI requests leaked": 3}
    assert_everywhere(comm, None if counted == expected else f"probe counted {counted}, expected {expected}")


def check_exchangers_leak_nothing(comm):
    """CYCLES HaloExchangers, structured (one decomposition, and fields of their own halos and staggering) and
    unstructured, over every transport of harness.TRANSPORTS, half
    closed by a with block and half by close()."""
    plan = plan_of([Structured(comm), Staggered(comm), Unstructured(comm)], TRANSPORTS)
    measure_cycles(comm, f"{CYCLES} HaloExchangers", plan)


def check_transposers_leak_nothing(comm):
    """CYCLES Transposers over every transport of harness.TRANSPORTS and the box-only ones (on the GPU: ipc's
    copy engines), half closed by a with block and half by close()."""
    measure_cycles(comm, f"{CYCLES} Transposers", plan_of([Transposition(comm)], {**TRANSPORTS, **BOX_TRANSPORTS}))


def check_closed_objects_hold_no_buffers(comm):
    """close() frees everything even while the object is still referenced: a closed exchanger or transposer
    holds no buffer (message buffers, iovec tables, device memory, pinned memory, CUDA events) but the user's
    arrays. One object per workload and transport. (tests/test_hygiene.py runs this apart from the others.)"""
    plan = plan_of([Structured(comm), Staggered(comm), Unstructured(comm)], TRANSPORTS)
    plan += plan_of([Transposition(comm)], {**TRANSPORTS, **BOX_TRANSPORTS})
    problems = []
    for workload, name, transport, closing in plan:
        if closing == "close":  # one object per workload and transport
            arrays = workload.fresh()
            obj = workload.build(arrays, transport)
            obj.exchange()
            obj.close()
            # Under harness' GPU mirror: the gridcomm exchanger inside, over the GPU copies of the arrays.
            held = held_buffers(getattr(obj, "exchanger", obj), arrays + list(getattr(obj, "device", [])))
            if held:
                what = ", ".join(sorted(held)[:4]) + (", ..." if len(held) > 4 else "")
                problems.append(f"{workload.kind} over {name}: after close() still holds {len(held)}: {what}")
    assert_everywhere(comm, "\n".join(problems) or None)


def _transform(comm: Communicator) -> tuple[Any, Callable[[Any], Any]]:
    from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients

    dist = DistributedTransform(comm, 8, batch=2)
    coefficients = random_coefficients(dist.truncation, dist.wavenumbers, 2)
    return dist, lambda d: d.direct(d.inverse(coefficients))


def _stencil(comm: Communicator) -> tuple[Any, Callable[[Any], Any]]:
    from gridcomm.lab.apps.stencil2d import Stencil2D

    return Stencil2D(comm, 8, xp="cupy" if ON_GPU else "numpy", transport="auto"), lambda s: s.step(2)


def _communicator(comm: Communicator) -> tuple[Any, Callable[[Any], Any]]:
    return Communicator(comm.mpi), lambda c: c.mpi.Barrier()


def _persistent_stencil(comm: Communicator) -> tuple[Any, Callable[[Any], Any]]:
    """The persistent mode: symmetric fields, signals and lines (gridcomm.shmem's count of live allocations)."""
    from gridcomm.lab.apps.stencil2d import Stencil2D

    return Stencil2D(comm, 8, xp="cupy", mode="persistent"), lambda s: s.step(2)


HOLDERS: dict[str, Callable[[Communicator], tuple[Any, Callable[[Any], Any]]]] = {
    "DistributedTransform": _transform,
    "Stencil2D": _stencil,
    "Communicator": _communicator,
}
if ON_GPU and gridcomm.shmem.unavailable_reason() is None:  # gridcomm[nvshmem] installed
    HOLDERS["Stencil2D persistent"] = _persistent_stencil


def holder_problems(name: str, obj: Any, use: Callable[[Any], Any], alive: weakref.WeakSet) -> list[str]:
    """Use ``obj`` in a with block; afterwards its MPI handles must be freed, a second close() quiet and (but
    for a Communicator, whose use is its mpi4py communicator's) another use must raise GridcommError."""
    alive.add(obj)
    held = mpi_handles(obj) + ([obj.mpi] if isinstance(obj, Communicator) else [])
    with obj as entered:
        if entered is not obj:
            return [f"{name}.__enter__ returned {entered!r}, not the object"]
        use(obj)
    problems = [unfreed(held)]
    try:
        obj.close()
    except Exception as error:
        problems.append(f"a second close() raised {type(error).__name__}: {error}")
    if not isinstance(obj, Communicator):
        try:
            use(obj)
            problems.append("use after close() did not raise")
        except GridcommError:
            pass
        except Exception as error:
            problems.append(f"use after close() raised {type(error).__name__} ({error}), not GridcommError")
    return [f"{name}: {p}" for p in problems if p]


def check_other_resource_holders_are_context_managers(comm):
    """DistributedTransform, Stencil2D and Communicator, SMALL_CYCLES of each made and used in a with block;
    nothing they hold may outlive it."""
    shared = Communicator(comm)
    if ON_GPU:
        gridcomm.use_local_gpu(shared)
    holders = list(HOLDERS.items())

    def step(i: int, tally: Tally) -> None:
        name, make = holders[i % len(holders)]
        tally.problems += holder_problems(name, *make(shared), tally.alive)

    # As many rounds before measuring as measured: on the GPU a holder's first uses load kernels and library state
    # lazily (on one H200, device memory stayed flat from the 10th to the 40th of each, after a one-time step of
    # ~14 MiB), and after other checks device memory took a one-time step of 8 MiB within the first 20 rounds
    # (four 2 MiB pages, whatever ran before and whatever the cycle count; the check run alone did not).
    # A leak grows with every round, so it still shows in the measured ones.
    warm_up = max(3, SMALL_CYCLES) * len(holders)
    measure(comm, f"{SMALL_CYCLES} of each of {', '.join(HOLDERS)}", step, warm_up, SMALL_CYCLES * len(holders))
    shared.close()
