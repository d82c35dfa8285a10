"""The communicator gridcomm works on, and what it knows about the MPI library underneath."""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
import time
import weakref
from typing import Any, NoReturn

from .errors import (
    ArgumentError,
    ArgumentTypeError,
    DecompositionError,
    FieldError,
    GridcommError,
    GridcommTimeout,
    PatternError,
    TransportError,
)
from .waiting import poll_until

DEFAULT_TIMEOUT_S = 60.0
ABORT_GRACE_S = 1.0  # seconds between printing a timeout and aborting the job


def default_timeout() -> float:
    """Seconds a rank waits for its peers before raising GridcommTimeout (``GRIDCOMM_TIMEOUT``, else 60)."""
    return check_timeout(os.environ.get("GRIDCOMM_TIMEOUT") or None, DEFAULT_TIMEOUT_S, "GRIDCOMM_TIMEOUT")


_GRIDCOMM_ERRORS = (ArgumentError, ArgumentTypeError, DecompositionError, FieldError, PatternError, TransportError)
_SHARED_ERRORS = {cls.__name__: cls for cls in (*_GRIDCOMM_ERRORS, GridcommError, ValueError, TypeError)}


def gather_or_raise(mpi_comm: Any, local: Any, error: Exception | None, noun: str = "fields") -> list[Any]:
    """Collective: every rank's ``local``, in rank order, unless some rank found a problem (``error``, None if
    none): then that rank raises its own error and every other rank an error of the same class naming it
    ("rank 2 rejected its fields: ..."), so that no rank is left waiting in a later collective."""
    problem = None if error is None else (type(error).__name__, str(error))
    everyone = mpi_comm.allgather((local, problem))
    if error is not None:
        raise error
    for rank, (_, problem) in enumerate(everyone):
        if problem is not None:
            kind, message = problem
            raise _SHARED_ERRORS.get(kind, GridcommError)(f"rank {rank} rejected its {noun}: {message}")
    return [rows for rows, _ in everyone]


def raise_if_any(
    mpi_comm: Any, problem: str | None, error: type[Exception] = GridcommError, before: Any = None
) -> None:
    """Collective: if any rank has a problem (a message; None if none), every rank raises ``error`` with the
    first rank's message (``before()`` runs first, to undo what was set up), so that none is left waiting."""
    problems = [p for p in mpi_comm.allgather(problem) if p]
    if problems:
        if before is not None:
            before()
        raise error(problems[0])


ON_TIMEOUT = ("abort", "raise")


def check_on_timeout(value: str | None) -> str:
    """``value`` if it is one of ON_TIMEOUT; None reads ``GRIDCOMM_ON_TIMEOUT`` (default ``"abort"``)."""
    where = "on_timeout"
    if value is None:
        value, where = os.environ.get("GRIDCOMM_ON_TIMEOUT") or "abort", "GRIDCOMM_ON_TIMEOUT"
    if value not in ON_TIMEOUT:
        raise ArgumentError(
            f"{where}={value!r}: use 'abort' (end the whole job, the default) or 'raise' (GridcommTimeout is "
            "raised for you to handle)"
        )
    return value


def check_timeout(value: float | str | None, default: float, name: str = "timeout") -> float:
    """``value`` (the argument or setting ``name``) as positive, finite seconds, or ``default`` when None."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{name}={value!r}: give a number of seconds, not a bool")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"{name}={value!r} is not a number of seconds; give e.g. 60") from None
    if not 0 < seconds < math.inf:
        raise ArgumentError(
            f"{name}={value!r} must be a positive, finite number of seconds (an endless wait is a hang)"
        )
    return seconds


def give_up(error: GridcommTimeout, mpi_comm: Any, on_timeout: str) -> NoReturn:
    """What a rank does when it has waited too long: raise ``error`` (``on_timeout="raise"``), or print it and
    abort every rank of ``mpi_comm`` (``"abort"``): the ranks still waiting would otherwise burn the job's
    allocation until the batch system kills it."""
    if on_timeout == "raise":
        raise error
    sys.stderr.write(
        f"gridcomm: {error}\ngridcomm: rank {error.rank} aborts the job (on_timeout='abort'); pass "
        "on_timeout='raise' or set GRIDCOMM_ON_TIMEOUT=raise to handle timeouts yourself\n"
    )
    sys.stderr.flush()
    # Ranks waiting on the culprit time out at about the same moment as ranks waiting on those: a short grace
    # lets all of them say whom they waited for before the first abort ends every process.
    time.sleep(ABORT_GRACE_S)
    mpi_comm.Abort(1)
    raise error  # Abort does not return; this line only satisfies the type checker


def rendezvous(mpi_comm: Any, operation: str, timeout: float, on_timeout: str) -> None:
    """Collective: wait until every rank of ``mpi_comm`` has reached ``operation`` (a non-blocking barrier,
    polled), or give up after ``timeout`` seconds (see ``give_up``). Called before the blocking
    collectives of a constructor, so that a rank that never comes ends in a timeout instead of a hang.

    After a timeout with ``on_timeout="raise"`` the barrier is still posted: the communicator is not fit for
    further collectives (a late rank would match it); abort, or make a new one."""
    request = mpi_comm.Ibarrier()
    rank = mpi_comm.Get_rank()

    def late(elapsed: float) -> GridcommTimeout:
        return GridcommTimeout(f"{operation} (waiting for every rank to call it)", rank, (), elapsed)

    try:
        poll_until(request.Test, timeout, late)
    except GridcommTimeout as error:
        give_up(error, mpi_comm, on_timeout)


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
        on_timeout: what a rank does after GridcommTimeout: ``"abort"`` prints it and aborts every rank
            (MPI_Abort: no rank is left waiting), ``"raise"`` raises it for you to handle; None reads
            GRIDCOMM_ON_TIMEOUT (default ``"abort"``). Each exchanger may override it.
    """

    def __init__(self, mpi_comm: Any = None, *, timeout: float | None = None, on_timeout: str | None = None) -> None:
        from mpi4py import MPI

        base = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if isinstance(base, Communicator):
            base = base.mpi
        if not isinstance(base, MPI.Comm):
            raise ArgumentTypeError(
                f"mpi_comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD), got {type(base).__name__}"
            )
        if base == MPI.COMM_NULL:
            raise ArgumentError("mpi_comm is MPI.COMM_NULL; pass a communicator this rank belongs to")
        if base == MPI.COMM_WORLD:
            _check_launcher_matches(base.Get_size())
        try:  # every rank must hear of a bad argument on one, or the others would wait in Dup forever
            self.timeout: float = check_timeout(timeout, default_timeout())
            self.on_timeout: str = check_on_timeout(on_timeout)
            problem = None
        except (ArgumentError, ArgumentTypeError) as error:
            problem = error
        if problem is None:
            rendezvous(base, "Communicator()", self.timeout, self.on_timeout)
        else:
            rendezvous(base, "Communicator()", DEFAULT_TIMEOUT_S, "abort")
        gather_or_raise(base, None, problem, "arguments")
        self.mpi = base.Dup()
        self.rank: int = self.mpi.Get_rank()
        self.size: int = self.mpi.Get_size()
        self._next_tag = 0
        self.facts: dict[str, Any] = {}  # collective findings about these ranks, e.g. which transports work
        self.graphs: weakref.WeakSet[Any] = weakref.WeakSet()  # captured exchanges, released by close()

    def rendezvous(self, operation: str) -> None:
        """Collective: wait until every rank has reached ``operation`` (e.g. "HaloExchanger()"), at most the
        communicator's timeout, then act on ``on_timeout`` (see ``rendezvous``)."""
        rendezvous(self.mpi, operation, self.timeout, self.on_timeout)

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
        """Whether device buffers may be handed to this MPI (see ``mpi_cuda_aware``)."""
        return mpi_cuda_aware()

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks on the same node (used to pick a GPU)."""
        return self._node[0]

    @property
    def local_size(self) -> int:
        """The number of this communicator's ranks on this rank's node (they share its CPUs and GPUs)."""
        return self._node[1]

    @functools.cached_property
    def _node(self) -> tuple[int, int]:
        """(rank, size) among the ranks on the same node; collective on first use."""
        from mpi4py import MPI

        node = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.Get_rank(), node.Get_size()
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
        return (
            f"Communicator(rank={self.rank}, size={self.size}, timeout={self.timeout:g} s, "
            f"on_timeout={self.on_timeout!r})"
        )
