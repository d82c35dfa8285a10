"""How long a rank waits for its peers, and what it does then: the timeout and on_timeout settings, and giving
up (raise, or print and abort the job)."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, NoReturn

from .errors import ArgumentError, ArgumentTypeError, GridcommTimeout

log = logging.getLogger("gridcomm.comm")

DEFAULT_TIMEOUT_S = 60.0
ABORT_GRACE_S = 1.0  # seconds between printing a timeout and aborting the job


def default_timeout() -> float:
    """Seconds a rank waits for its peers before raising GridcommTimeout (``GRIDCOMM_TIMEOUT``, else 60)."""
    return check_timeout(os.environ.get("GRIDCOMM_TIMEOUT") or None, DEFAULT_TIMEOUT_S, "GRIDCOMM_TIMEOUT")


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
