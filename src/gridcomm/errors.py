"""Exceptions (and the one warning) raised by gridcomm.

Every error names what was wrong (the argument and its value) and what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence


class GridcommError(Exception):
    """Base class of every gridcomm error."""


class ArgumentError(GridcommError, ValueError):
    """An argument or setting has a value gridcomm cannot use (a negative timeout, an unknown option)."""


class ArgumentTypeError(GridcommError, TypeError):
    """An argument has the wrong type (e.g. a list where an mpi4py communicator is expected)."""


class DecompositionError(GridcommError, ValueError):
    """A decomposition cannot be built from the given shape, halo, periodicity or process grid."""


class FieldError(GridcommError, ValueError):
    """An array handed to gridcomm does not fit what it is for: a field that does not fit its exchanger's
    decomposition, or a transform's input of the wrong shape (shape, layout, dtype, memory)."""


class TransportError(GridcommError, RuntimeError):
    """A transport cannot be used for these fields on this machine (e.g. device memory, MPI not CUDA-aware)."""


class DeviceError(GridcommError, RuntimeError):
    """A GPU was asked for where none is usable: no CUDA device visible to the rank, or CuPy not installed."""


class MissingDependencyError(GridcommError, ImportError):
    """An optional dependency is not installed: names the extra that installs it (``pip install 'gridcomm[plot]'``)."""


class PatternError(GridcommError, ValueError):
    """Ranks disagree about a collective call: they called different ones, or passed different arguments to one
    (shapes, dtypes, root, decomposition), or an exchange's message sizes, field lists or indices do not match."""


class ValidationError(GridcommError, RuntimeError):
    """Validation mode (``validate=True`` or ``GRIDCOMM_VALIDATE=1``) found received data that differs from what
    the peer sent: names the field, the peer and the element range."""


class GridcommTimeout(GridcommError, TimeoutError):
    """A rank waited longer than its timeout for peers that never answered.

    Attributes:
        operation: what was being waited for, e.g. ``"halo exchange #3 (exchanger tag 0, 1 field(s))"``.
        rank: the rank that waited.
        peers: the ranks it had not heard from.
        elapsed: seconds waited.
    """

    def __init__(self, operation: object, rank: int, peers: Sequence[int], elapsed: float) -> None:
        self.operation = str(operation)  # exchanges name themselves lazily (see exchange._InFlight)
        self.rank = rank
        self.peers = tuple(peers)
        self.elapsed = elapsed
        super().__init__(
            f"rank {rank}: {operation} timed out after {elapsed:.1f} s waiting for rank(s) "
            f"{', '.join(map(str, self.peers)) or '?'}; a peer is stuck, crashed or did not call the same "
            "exchange. Raise the limit with timeout=... or GRIDCOMM_TIMEOUT (seconds) if it is only slow."
        )

    def __reduce__(self) -> tuple[type, tuple[str, int, tuple[int, ...], float]]:
        # Pickled by mpi4py's lower-case collectives and process pools: rebuild from the attributes.
        return type(self), (self.operation, self.rank, self.peers, self.elapsed)


class OversubscriptionWarning(UserWarning):
    """More ranks run on a node than it has CPUs for them (issued once, by rank 0): ranks then take turns on the
    CPUs and exchanges take most of the time. ``GRIDCOMM_OVERSUBSCRIBE_OK=1`` or a warnings filter silences it."""
