"""Conventions over several ranks: the oversubscription warning (rank 0 only, once per process, counted over the
node's ranks and the CPUs they may use) and the log's rank prefix. tests/test_mpi.py runs this on 2 ranks."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator

import numpy as np
from harness import assert_everywhere
from mpi4py import MPI

import gridcomm
import gridcomm.comm
import gridcomm.log
from gridcomm import CartesianDecomposition, Communicator, HaloExchanger, OversubscriptionWarning


@contextlib.contextmanager
def on_one_cpu(comm) -> Iterator[None]:
    """Every rank of ``comm`` runs on the same single CPU meanwhile: a node oversubscribed on any machine."""
    before = os.sched_getaffinity(0)
    common = set.intersection(*map(set, comm.allgather(before)))
    assert common, "the ranks share no CPU to be bound to"
    os.sched_setaffinity(0, {min(common)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _warnings_of(make) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make()
    made.close()
    return [w for w in caught if w.category is OversubscriptionWarning]


def check_oversubscription_warns_once_on_rank_0(comm):
    """Ranks sharing one CPU: the first Communicator of the whole job warns on rank 0 (naming the ranks and the
    CPU, pointing at this file), no other rank warns, nor does a second one, nor one of fewer ranks;
    GRIDCOMM_OVERSUBSCRIBE_OK=1 silences it."""
    rank, size = comm.Get_rank(), comm.Get_size()
    silenced = os.environ.pop(gridcomm.comm.OVERSUBSCRIBE_OK, None)  # the test launcher sets it
    fewer = comm.Split(0 if rank else MPI.UNDEFINED, rank)  # every rank but 0
    problem = None
    try:
        with on_one_cpu(comm):
            gridcomm.comm._job_communicator_built = False  # as in a fresh process
            part = [] if rank == 0 else _warnings_of(lambda: Communicator(fewer))
            first, second = _warnings_of(lambda: Communicator(comm)), _warnings_of(lambda: Communicator(comm))
            os.environ[gridcomm.comm.OVERSUBSCRIBE_OK] = "1"
            gridcomm.comm._job_communicator_built = False
            quiet = _warnings_of(lambda: Communicator(comm))
        expected = 1 if rank == 0 else 0
        if (len(part), len(first), len(second), len(quiet)) != (0, expected, 0, 0):
            problem = f"warnings: part {part}, first {first}, second {second}, silenced {quiet}; want {expected} first"
        elif first and f"{size} ranks run on a node where they may use 1 CPU(s)" not in str(first[0].message):
            problem = f"message: {first[0].message}"
        elif first and first[0].filename != __file__:
            problem = f"the warning points at {first[0].filename}, not at the caller"
    finally:
        if silenced is not None:
            os.environ[gridcomm.comm.OVERSUBSCRIBE_OK] = silenced
        if rank:
            fewer.Free()
    assert_everywhere(comm, problem)


def check_log_lines_name_their_rank(comm):
    """GRIDCOMM_LOG's handler prefixes each line with the rank: which transport each rank's exchanger took."""
    rank = comm.Get_rank()
    handler = gridcomm.log.configure("info")
    handler.setStream(io.StringIO())
    try:
        d = CartesianDecomposition(comm, (8, 6), halo=1, periodic=True)
        HaloExchanger(d, d.zeros(np.float32), "mpi").close()
    finally:
        gridcomm.log.logger.removeHandler(handler)
        gridcomm.log.logger.setLevel(logging.NOTSET)
    text = handler.stream.getvalue()
    line = f"gridcomm: rank {rank}: INFO gridcomm.transports: transport mpi for host arrays: as asked\n"
    assert_everywhere(comm, None if line in text else f"no line {line!r} in:\n{text}")
