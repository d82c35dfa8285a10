"""GPU helpers over a communicator: which GPU a rank uses, and what the GPUs of a node can do for each other."""

from __future__ import annotations

from typing import Any

from .comm import Communicator
from .device import cupy_or_none, gpu_count
from .errors import DeviceError


def use_local_gpu(comm: Communicator | None = None) -> int:
    """Collective: make GPU ``local_rank % gpu_count()`` this rank's current device (one rank per GPU) and
    return its index. Call it before allocating device memory."""
    comm = Communicator.wrap(comm)
    count = gpu_count()
    if count == 0:
        raise DeviceError("no CUDA GPU is visible to this rank (or CuPy is missing: pip install 'gridcomm[gpu]')")
    device = comm.local_rank % count
    cupy_or_none().cuda.Device(device).use()
    return device


def gpus_in_use(comm: Communicator) -> int:
    """Collective: how many distinct GPUs the ranks of ``comm`` use (fewer than the ranks where they share)."""
    from mpi4py import MPI

    cupy = cupy_or_none()
    mine = (MPI.Get_processor_name(), cupy.cuda.Device().id) if cupy is not None and gpu_count() else None
    return len({g for g in comm.mpi.allgather(mine) if g is not None})


def all_peers_reachable(comm: Communicator) -> str | None:
    """Collective: None when all ranks share one node and every pair of their GPUs has peer access (so CUDA
    IPC mappings work), else why not."""
    from mpi4py import MPI

    node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED)
    same_node = node.Get_size() == comm.size
    node.Free()
    cupy = cupy_or_none()
    mine = cupy.cuda.Device().id if cupy is not None and gpu_count() else -1
    devices = comm.mpi.allgather(mine)
    if not same_node:
        return "some ranks are on other nodes"
    if mine < 0:
        return "no GPU"
    runtime = cupy.cuda.runtime
    blocked = [d for d in set(devices) if d != mine and not runtime.deviceCanAccessPeer(mine, d)]
    problems = [p for p in comm.mpi.allgather(blocked) if p]
    return f"GPUs without peer access: {problems}" if problems else None


def nccl_communicator(comm: Communicator) -> Any:
    """Collective: the NCCL communicator over ``comm``'s ranks, made once per Communicator (bootstrapped over
    MPI: rank 0's unique id is broadcast)."""
    if comm.nccl is None:
        from cupy.cuda import nccl

        uid = nccl.get_unique_id() if comm.rank == 0 else None
        uid = comm.mpi.bcast(uid, root=0)
        comm.nccl = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    return comm.nccl
