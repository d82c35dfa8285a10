"""gridcomm's log: the ``logging`` logger ``gridcomm`` and one child per module (``gridcomm.exchange``, ...).

It says which transport each exchanger or transposer took and why, when gridcomm falls back to another one,
and when a rank times out. Silent by default (a NullHandler); ``GRIDCOMM_LOG=info`` (or ``debug``) prints it
to stderr with the rank in front, and the standard logging configuration works as for any library, e.g.
``logging.basicConfig(level=logging.INFO)`` or ``logging.getLogger("gridcomm").setLevel(logging.DEBUG)``.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

logger = logging.getLogger("gridcomm")

#: The environment variable that turns on gridcomm's own handler, and the levels it takes.
LOG_VARIABLE = "GRIDCOMM_LOG"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def rank_prefix() -> str:
    """ "rank r: " once MPI runs with several ranks, else nothing (mpi4py is not imported for it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        return f"rank {mpi.COMM_WORLD.Get_rank()}: "
    return ""


class _RankPrefix(logging.Filter):
    """Adds ``rank`` ("rank r: " or nothing) to each record, read when the record is made: MPI may start
    after gridcomm is imported."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = rank_prefix()
        return True


def configure(setting: str | None = None) -> logging.Handler | None:
    """Attach a stderr handler at the level ``setting`` names (default: ``GRIDCOMM_LOG``); none when it is
    unset or empty. Returns the handler. An unknown level is reported with a warning and ignored: a typo in
    an environment variable should not stop the job."""
    value = (os.environ.get(LOG_VARIABLE, "") if setting is None else setting).strip().lower()
    if not value:
        return None
    if value not in LEVELS:
        warnings.warn(f"{LOG_VARIABLE}={value!r} is not a level; use one of {', '.join(LEVELS)}", stacklevel=2)
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RankPrefix())
    handler.setFormatter(logging.Formatter("gridcomm: %(rank)s%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(LEVELS[value])
    return handler


logger.addHandler(logging.NullHandler())  # silent unless configured: no "No handlers" fallback to stderr
configure()
