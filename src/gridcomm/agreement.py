"""Ranks agreeing before a collective goes on: every rank hears of a problem found on any of them, and raises
the same error, instead of waiting for ranks that have given up (gather_or_raise, raise_if_any), and the one
small all-gather that begins every collective call of gridcomm (agree)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import (
    ArgumentError,
    ArgumentTypeError,
    DecompositionError,
    DeviceError,
    FieldError,
    GridcommError,
    GridcommTimeout,
    PatternError,
    TransportError,
)
from .timeouts import give_up
from .waiting import poll_until

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
