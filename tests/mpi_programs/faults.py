"""A job that goes wrong on purpose: a rank dies, or stays silent, while the others exchange.

Usage: mpiexec -n N python faults.py FAULT TRANSPORT PIDS_DIR
  FAULT: ``kill`` (the last rank kills itself with SIGKILL after a few exchanges), ``silent`` (the last rank
  never takes part in the exchanges), ``late`` (the last rank never builds the exchanger).
  TRANSPORT: a transport name, or ``neighbor`` (the MPI transport's neighbourhood collective).
  With GRIDCOMM_CHECK_DEVICE=gpu the field lives on the GPU (one per rank), for the GPU transports.

Every rank writes its process id to PIDS_DIR/<rank> first, so that the test can check none is left over. The
job must end on its own: by the launcher's cleanup after a death, or by gridcomm's timeout (GRIDCOMM_TIMEOUT)
and the abort that follows it. Reaching the end of the loop is a failure (exit code 3).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import gridcomm
from gridcomm import CartesianDecomposition, HaloExchanger
from gridcomm.transports import MpiTransport

EXCHANGES_BEFORE_FAULT = 20
MAX_EXCHANGES = 1_000_000


def main() -> int:
    fault, transport_name, pids = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    (pids / str(rank)).write_text(str(os.getpid()))
    # Every rank up before gridcomm's short timeout applies: on a busy machine one rank's start-up (imports)
    # can lag another's by seconds. Polled with sleeps, so that the ranks still starting get the cores.
    started = world.Ibarrier()
    while not started.Test():
        time.sleep(0.01)
    faulty = rank == size - 1
    transport = MpiTransport(method="neighbor") if transport_name == "neighbor" else transport_name
    d = CartesianDecomposition(world, (8 * size, 6, 5), halo=1, periodic=True, proc_grid=(size, 1, 1))
    field = d.zeros(np.float64)
    if os.environ.get("GRIDCOMM_CHECK_DEVICE", "") == "gpu":
        gridcomm.use_local_gpu(d.comm)
        import cupy

        field = cupy.asarray(field)
    if fault == "late" and faulty:
        time.sleep(3600)  # never builds the exchanger: the others' constructor must give up
    exchanger = HaloExchanger(d, field, transport)
    for step in range(MAX_EXCHANGES):
        if faulty and step == EXCHANGES_BEFORE_FAULT:
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)  # silent: alive, but never exchanges again
        d.interior(field)[...] = step
        exchanger.exchange()
    return 3


if __name__ == "__main__":
    sys.exit(main())
