"""The communicator gridcomm works on, and what it knows about the MPI library underneath."""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from typing import Any

DEFAULT_TIMEOUT_S = 60.0


def default_timeout() -> float:
    """Seconds a rank waits for its peers before raising GridcommTimeout (``GRIDCOMM_TIMEOUT``, else 60)."""
    value = os.environ.get("GRIDCOMM_TIMEOUT")
    if value is None or value == "":
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"GRIDCOMM_TIMEOUT={value!r} is not a number of seconds; set it to e.g. 60") from None
    if seconds <= 0:
        raise ValueError(f"GRIDCOMM_TIMEOUT={value!r} must be positive (seconds)")
    return seconds


def _loaded_libraries(fragment: str) -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if fragment in line and ".so" in line}
    except OSError:
        return []
    return sorted(paths)


@functools.cache
def mpi_cuda_aware() -> bool:
    """Whether the MPI library under mpi4py accepts device pointers.

    ``GRIDCOMM_MPI_CUDA_AWARE=0/1`` overrides; otherwise MPIX_Query_cuda_support(), which both MPICH and
    Open MPI export when built with CUDA, is asked at run time. A library that cannot answer is taken as
    not CUDA-aware: handing device memory to such an MPI segfaults, so guessing "no" is the safe side.
    """
    override = os.environ.get("GRIDCOMM_MPI_CUDA_AWARE")
    if override is not None and override != "":
        return override.strip().lower() in ("1", "true", "yes", "on")
    from mpi4py import MPI  # noqa: F401  (loads libmpi so that it shows in the process maps)

    for path in _loaded_libraries("libmpi"):
        try:
            query = ctypes.CDLL(path).MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        return bool(query())
    return False


def mpi_library_version() -> str:
    """The first line of MPI_Get_library_version (e.g. 'MPICH Version: 4.2.0')."""
    from mpi4py import MPI

    text = MPI.Get_library_version().replace("\x00", " ")  # Open MPI's ends in a NUL byte
    return " ".join(text.strip().splitlines()[0].split())


def _check_launcher_matches(world_size: int) -> None:
    """A launcher of another MPI starts N singletons that each believe they are alone: say so."""
    for variable in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        launched = os.environ.get(variable, "")
        if launched.isdigit() and int(launched) > 1 and world_size == 1:
            from .errors import GridcommError

            raise GridcommError(
                f"this process was started as one of {launched} ranks ({variable}) but MPI sees only 1: the "
                "mpiexec/mpirun used belongs to a different MPI than the one mpi4py loaded. Launch with "
                "'gridcomm run --np N ...', which picks the matching mpiexec"
            )


@functools.cache
def _kept_keyval() -> int:
    """The MPI attribute key under which an mpi4py communicator keeps its gridcomm Communicator."""
    from mpi4py import MPI

    def release(_base: Any, _keyval: int, kept: Communicator) -> None:
        if not MPI.Is_finalized():
            kept.close()

    return MPI.Comm.Create_keyval(delete_fn=release)


class Communicator:
    """The ranks that take part in gridcomm's exchanges: a private duplicate of an mpi4py communicator.

    Construction is collective over ``mpi_comm``. The duplicate keeps gridcomm's messages apart from the
    application's own.

    Args:
        mpi_comm: an mpi4py communicator, or None for MPI.COMM_WORLD.
        timeout: seconds to wait for a peer before raising GridcommTimeout; None reads GRIDCOMM_TIMEOUT
            (default 60 s). Each exchanger may override it.
    """

    def __init__(self, mpi_comm: Any = None, *, timeout: float | None = None) -> None:
        from mpi4py import MPI

        base = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if isinstance(base, Communicator):
            base = base.mpi
        if not isinstance(base, MPI.Comm):
            raise TypeError(f"mpi_comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD), got {type(base).__name__}")
        if base == MPI.COMM_NULL:
            raise ValueError("mpi_comm is MPI.COMM_NULL; pass a communicator this rank belongs to")
        if base == MPI.COMM_WORLD:
            _check_launcher_matches(base.Get_size())
        self.mpi = base.Dup()
        self.rank: int = self.mpi.Get_rank()
        self.size: int = self.mpi.Get_size()
        self.timeout: float = default_timeout() if timeout is None else float(timeout)
        if self.timeout <= 0:
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")
        self._next_tag = 0
        self.facts: dict[str, Any] = {}  # collective findings about these ranks, e.g. which transports work
        self.graphs: weakref.WeakSet[Any] = weakref.WeakSet()  # captured exchanges, released by close()

    @classmethod
    def wrap(cls, comm: Any) -> Communicator:
        """``comm`` itself if it already is a Communicator, else the one gridcomm keeps for that mpi4py
        communicator (None: COMM_WORLD), made on first use (collective then).

        The kept Communicator is cached as an attribute of the mpi4py communicator, as MPI libraries cache
        their inner communicators: decompositions made again and again over the same communicator share one
        duplicate instead of using up MPI's communicator ids, and it is freed when that communicator is.
        """
        if isinstance(comm, Communicator):
            return comm
        from mpi4py import MPI

        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(base, MPI.Comm) or base == MPI.COMM_NULL:
            return cls(base)  # raises the constructor's error
        kept = base.Get_attr(_kept_keyval())
        if kept is None or kept.mpi == MPI.COMM_NULL:  # none yet, or closed by its user
            kept = cls(base)
            base.Set_attr(_kept_keyval(), kept)
        return kept

    @functools.cached_property
    def cuda_aware(self) -> bool:
        """Whether device buffers may be handed to this MPI (see :func:`mpi_cuda_aware`)."""
        return mpi_cuda_aware()

    @functools.cached_property
    def local_rank(self) -> int:
        """This rank's index among the ranks on the same node (used to pick a GPU)."""
        from mpi4py import MPI

        node = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.Get_rank()
        finally:
            node.Free()

    TAGS_PER_EXCHANGER = 4

    def new_tag(self) -> int:
        """The first of ``TAGS_PER_EXCHANGER`` message tags reserved for a new exchanger. Exchangers are built
        collectively in the same order on every rank, so every rank draws the same tags."""
        from mpi4py import MPI

        upper = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767
        blocks = (upper + 1) // self.TAGS_PER_EXCHANGER
        tag = (self._next_tag % blocks) * self.TAGS_PER_EXCHANGER
        self._next_tag += 1
        return tag

    def close(self) -> None:
        """Free the duplicated communicator (collective)."""
        from mpi4py import MPI

        for graph in list(self.graphs):  # NCCL frees a communicator only once no graph that used it lives
            graph.close()
        nccl = self.facts.pop("nccl", None)
        if nccl is not None:
            nccl.destroy()
        if self.mpi != MPI.COMM_NULL:
            self.mpi.Free()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Communicator(rank={self.rank}, size={self.size}, timeout={self.timeout:g} s)"
