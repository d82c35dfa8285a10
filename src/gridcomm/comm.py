"""The communicator gridcomm works on, and what it knows about the MPI library underneath."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import math
import operator
import os
import sys
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from .arguments import whole_number
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    DecompositionError,
    DeviceError,
    FieldError,
    GridcommError,
    GridcommTimeout,
    OversubscriptionWarning,
    PatternError,
    TransportError,
)
from .waiting import poll_until

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
ABORT_GRACE_S = 1.0  # seconds between printing a timeout and aborting the job


def default_timeout() -> float:
    """Seconds a rank waits for its peers before raising GridcommTimeout (``GRIDCOMM_TIMEOUT``, else 60)."""
    return check_timeout(os.environ.get("GRIDCOMM_TIMEOUT") or None, DEFAULT_TIMEOUT_S, "GRIDCOMM_TIMEOUT")


_GRIDCOMM_ERRORS = (
    ArgumentError, ArgumentTypeError, DecompositionError, DeviceError, FieldError, PatternError, TransportError,
)  # fmt: skip
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


# What each rank contributes to ``agree``'s one collective: a digest of the call, a problem flag, a short note.
_DIGEST_BYTES, _NOTE_BYTES = 16, 30
_RECORD_BYTES = _DIGEST_BYTES + 2 + _NOTE_BYTES


def agree(
    mpi_comm: Any,
    operation: str,
    timeout: float,
    on_timeout: str,
    signature: Mapping[str, Any] | None = None,
    problem: Exception | None = None,
    note: str = "",
) -> list[str]:
    """Collective: the first step of every collective call of gridcomm (a constructor, gather, scatter).

    Every rank of ``mpi_comm`` contributes one small fixed-size record to a non-blocking all-gather, polled
    until ``timeout`` (then ``give_up``: a rank that never comes ends in a timeout, not a hang): a digest of
    ``operation`` (e.g. ``"gather()"``) and ``signature`` (what every rank must pass alike: shapes, dtypes,
    root, the decomposition), whether this rank found a ``problem`` with its own arguments, and ``note`` (up
    to 30 ASCII characters this rank shares, e.g. the dtype of the array it scatters).

    When every record matches and no rank found a problem, returns every rank's note in rank order. Otherwise
    every rank raises, having learnt the details in a second collective: the rank with a problem its own
    error, the others an error of its class naming that rank; ranks that called different operations, or
    passed different signatures, a PatternError naming what differs on which ranks. After a timeout with
    ``on_timeout="raise"`` the all-gather is still posted: the communicator is not fit for further
    collectives (a late rank would match it); abort, or make a new one.
    """
    from mpi4py import MPI

    mine = _record(operation, {} if problem is not None else dict(signature or {}), problem is not None, note)
    everyone = np.empty((mpi_comm.Get_size(), _RECORD_BYTES), dtype=np.uint8)
    request = mpi_comm.Iallgather([mine, MPI.BYTE], [everyone, MPI.BYTE])
    rank = mpi_comm.Get_rank()

    def late(elapsed: float) -> GridcommTimeout:
        return GridcommTimeout(f"{operation} (waiting for every rank to call it)", rank, (), elapsed)

    try:
        poll_until(request.Test, timeout, late)
    except GridcommTimeout as error:
        give_up(error, mpi_comm, on_timeout)
    digests = everyone[:, :_DIGEST_BYTES]
    if not everyone[:, _DIGEST_BYTES].any() and (digests == digests[0]).all():
        return [bytes(row[_DIGEST_BYTES + 2 : _DIGEST_BYTES + 2 + row[_DIGEST_BYTES + 1]]).decode() for row in everyone]
    # Rare, so pickled: every rank's call in full, then the same error everywhere.
    calls = gather_or_raise(mpi_comm, (operation, dict(signature or {})), problem, f"arguments to {operation}")
    raise PatternError(disagreement(calls))


def _record(operation: str, signature: dict[str, Any], problem: bool, note: str) -> np.ndarray:
    """One rank's record for ``agree``: digest, problem flag, note length, note."""
    text = note.encode("ascii")
    if len(text) > _NOTE_BYTES:
        raise ValueError(f"agree: note {note!r} is longer than {_NOTE_BYTES} bytes")  # a bug in gridcomm, not input
    described = repr((operation, sorted(signature.items()))).encode()
    record = np.zeros(_RECORD_BYTES, dtype=np.uint8)
    record[:_DIGEST_BYTES] = np.frombuffer(hashlib.blake2b(described, digest_size=_DIGEST_BYTES).digest(), np.uint8)
    record[_DIGEST_BYTES : _DIGEST_BYTES + 2] = (problem, len(text))
    record[_DIGEST_BYTES + 2 : _DIGEST_BYTES + 2 + len(text)] = np.frombuffer(text, np.uint8)
    return record


def disagreement(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """What differs between the ranks' calls (each rank's (operation, signature), in rank order)."""
    operations = [operation for operation, _ in calls]
    if len(set(operations)) > 1:
        return (
            f"the ranks called different operations ({by_value(operations)}); every rank must make the same "
            "collective gridcomm calls in the same order"
        )
    differ = []
    for key in sorted({key for _, signature in calls for key in signature}):
        values = [signature.get(key) for _, signature in calls]
        if len({repr(v) for v in values}) > 1:
            differ.append(f"{key}: {by_value(values)}")
    return f"the ranks passed different arguments to {operations[0]} ({'; '.join(differ)}); pass the same on every rank"


def by_value(values: Sequence[Any]) -> str:
    """``values`` (one per rank) grouped by value, e.g. "float64 on ranks 0, 2-5; float32 on rank 1"."""
    groups: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(value if isinstance(value, str) else repr(value), []).append(rank)
    return "; ".join(f"{value} on {rank_list(ranks)}" for value, ranks in groups.items())


def rank_list(ranks: Sequence[int]) -> str:
    """ "rank 3", or "ranks 0, 2-5" (ascending ranks, runs of consecutive ranks as ranges)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    text = ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
    return f"rank{'s' if len(ranks) > 1 else ''} {text}"


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
    log.warning("%s (on_timeout=%r)", error, on_timeout)
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


def _cpu_mask() -> int:
    """The CPUs this process may run on, as a bit mask (bit c: CPU c)."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        cpus = set(range(os.cpu_count() or 1))
    return sum(1 << c for c in cpus)


#: Set to 1 to silence the warning about more ranks on a node than CPUs for them.
OVERSUBSCRIBE_OK = "GRIDCOMM_OVERSUBSCRIBE_OK"
# Whether this process has built a Communicator of the whole job yet: the first one looks at the node.
_job_communicator_built = False


def warn_if_oversubscribed(ranks: int, cpus: int) -> None:
    """Warn (OversubscriptionWarning) when ``ranks`` ranks share a node's ``cpus`` CPUs, unless
    GRIDCOMM_OVERSUBSCRIBE_OK is set: ranks that wait for each other then take turns on the CPUs."""
    if ranks <= cpus or os.environ.get(OVERSUBSCRIBE_OK, "").strip().lower() in ("1", "true", "yes", "on"):
        return
    warnings.warn(
        f"{ranks} ranks run on a node where they may use {cpus} CPU(s): ranks then take turns on the CPUs, and "
        f"waiting for each other (exchanges) takes most of the run time. Start at most {cpus} ranks per node "
        f"(fewer --np, or more nodes); to run so on purpose, set {OVERSUBSCRIBE_OK}=1 or filter "
        "gridcomm.OversubscriptionWarning",
        OversubscriptionWarning,
        stacklevel=_outside_gridcomm(),
    )


# Modules a warning's location skips: gridcomm itself, and the libraries of its command line.
_NOT_THE_CALLER = ("gridcomm", "typer", "click")


def _outside_gridcomm() -> int:
    """The ``stacklevel`` that makes a warning issued by the caller name the first frame outside gridcomm (and
    its command line's libraries): where the user's code called gridcomm."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in _NOT_THE_CALLER:
        frame, level = frame.f_back, level + 1
    return level


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

    The first Communicator of the whole job (every rank of MPI.COMM_WORLD) looks at the node: rank 0 warns
    (OversubscriptionWarning) when more ranks run on it than the CPUs they may use;
    ``GRIDCOMM_OVERSUBSCRIBE_OK=1`` silences it.
    """

    def __init__(self, mpi_comm: Any = None, *, timeout: float | None = None, on_timeout: str | None = None) -> None:
        from mpi4py import MPI

        base = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if isinstance(base, Communicator):
            base.check_open()
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
            problem, waits = None, (self.timeout, self.on_timeout)
        except (ArgumentError, ArgumentTypeError) as error:
            problem, waits = error, (DEFAULT_TIMEOUT_S, "abort")
        agree(base, "Communicator()", *waits, problem=problem)
        self.mpi = base.Dup()
        self.rank: int = self.mpi.Get_rank()
        self.size: int = self.mpi.Get_size()
        self._next_tag = 0
        self.facts: dict[str, Any] = {}  # collective findings about these ranks, e.g. which transports work
        self.graphs: weakref.WeakSet[Any] = weakref.WeakSet()  # captured exchanges, released by close()
        if self.size == MPI.COMM_WORLD.Get_size() and not _job_communicator_built:
            self._look_at_the_node()

    def _look_at_the_node(self) -> None:
        """Collective, once per process: rank 0 warns if its node runs more ranks than CPUs for them. Done for
        the first Communicator of the whole job only (every process builds that one, at the same point of its
        collective calls, so all take this step together), not for every communicator of a few ranks."""
        global _job_communicator_built
        _job_communicator_built = True
        _, ranks, cpus = self._node
        if self.rank == 0:
            warn_if_oversubscribed(ranks, cpus)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has freed this communicator."""
        from mpi4py import MPI

        return self.mpi == MPI.COMM_NULL

    def check_open(self) -> None:
        """GridcommError if this communicator was closed (local: a closed communicator cannot reach its peers;
        ``close()`` is collective, so every rank finds it closed alike)."""
        if self.closed:
            raise GridcommError(
                "this Communicator was closed (close(), or the end of its with block); make a new one, e.g. "
                "gridcomm.Communicator(comm), or pass the mpi4py communicator and let gridcomm keep one"
            )

    def agree(
        self,
        operation: str,
        signature: Mapping[str, Any] | None = None,
        problem: Exception | None = None,
        note: str = "",
    ) -> list[str]:
        """Collective: every rank has reached ``operation`` with the same ``signature`` and no rank found a
        ``problem``, or every rank raises (see ``agree``); at most the communicator's timeout, then act on
        ``on_timeout``. Returns every rank's ``note``."""
        self.check_open()
        return agree(self.mpi, operation, self.timeout, self.on_timeout, signature, problem, note)

    def check_root(self, root: Any, role: str) -> int:
        """``root`` (the rank that ``role``, e.g. "receives the array") as an int, one of this communicator's
        ranks; ArgumentTypeError or ArgumentError naming it (local)."""
        return whole_number(root, "root", 0, self.size - 1, meaning=f"the rank that {role}")

    def rendezvous(self, operation: str) -> None:
        """Collective: wait until every rank has reached ``operation`` (e.g. "HaloExchanger()"), at most the
        communicator's timeout, and check that they all did (``agree`` with nothing more to compare). Called
        first by a constructor whose own checks follow: a rank that never comes ends in a timeout instead of a
        hang in the blocking collectives after it, and ranks that make different calls raise together."""
        self.agree(operation)

    @classmethod
    def wrap(cls, comm: Any) -> Communicator:
        """``comm`` itself if it already is a Communicator, else the one gridcomm keeps for that mpi4py
        communicator (None: COMM_WORLD), made on first use (collective then).

        The kept Communicator is cached as an attribute of the mpi4py communicator, as MPI libraries cache
        their inner communicators: decompositions made again and again over the same communicator share one
        duplicate instead of using up MPI's communicator ids, and it is freed when that communicator is.
        """
        if isinstance(comm, Communicator):
            comm.check_open()
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
    def _node(self) -> tuple[int, int, int]:
        """(rank, size) among the ranks on the same node, and how many CPUs those ranks may run on together
        (the union of their affinity masks: a batch system's share of the node, not the whole node);
        collective on first use."""
        from mpi4py import MPI

        node = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            cpus = functools.reduce(operator.or_, node.allgather(_cpu_mask()), 0)
            return node.Get_rank(), node.Get_size(), cpus.bit_count()
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
