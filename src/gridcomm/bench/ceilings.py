"""Ceilings measured on the GPUs of this run: HBM copy, peer copy (kernel and copy engine), NCCL send/recv.

Every GPU benchmark prints its figures beside these, measured in the same run on the same bytes: what the
memory can do, what a plain copy to the peer GPU can do, and what NCCL (the peer a user would otherwise
pick) does with contiguous buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..comm import Communicator
from ..gpu import nccl_communicator
from ..packing.cuda import device_allocation
from .timing import Timing, time_collective


def sync() -> None:
    """Wait for everything queued on this rank's GPU."""
    import cupy

    cupy.cuda.Device().synchronize()


def time_gpu(comm: Communicator, run: Callable[[], Any], samples: int = 7, min_sample_s: float = 0.02) -> Timing:
    """Seconds per ``run()`` of GPU work on every rank: batches end with a device synchronisation."""
    return time_collective(comm.mpi, run, samples=samples, min_sample_s=min_sample_s, finish=sync)


def time_gpu_alone(comm: Communicator, run: Callable[[], Any], samples: int = 7) -> Timing:
    """Seconds per ``run()`` of work local to this rank's GPU (collective): the ranks time their own ``run``
    one at a time while the others wait, so that ranks sharing a GPU do not share its bandwidth."""
    from mpi4py import MPI

    mine = None
    for rank in range(comm.size):
        if rank == comm.rank:
            mine = time_collective(MPI.COMM_SELF, run, samples=samples, finish=sync)
        comm.mpi.Barrier()
    assert mine is not None
    return mine


def hbm_copy_gbps(comm: Communicator, nbytes: int = 1 << 30, samples: int = 5) -> float:
    """Device-to-device copy on this GPU, bytes read plus bytes written per second [GB/s] (slowest rank; each
    rank timed alone, so that ranks sharing a GPU measure all of it)."""
    src, dst = device_allocation(nbytes), device_allocation(nbytes)
    src.fill(1)
    t = time_gpu_alone(comm, lambda: dst.__setitem__(slice(None), src), samples)
    return min(comm.mpi.allgather(2 * nbytes / t.median / 1e9))


class PeerBuffers:
    """One device buffer per rank, mapped by CUDA IPC into every other rank of the node (collective).

    ``peer(r)`` is a CuPy uint8 array over rank r's buffer that kernels on this GPU may read and write.
    """

    def __init__(self, comm: Communicator, nbytes: int) -> None:
        import cupy

        runtime = cupy.cuda.runtime
        self.nbytes = nbytes
        self.local = device_allocation(nbytes)
        self.local.fill(comm.rank + 1)
        sync()
        handles = comm.mpi.allgather(runtime.ipcGetMemHandle(self.local.data.ptr))
        self._mapped = {r: runtime.ipcOpenMemHandle(h) for r, h in enumerate(handles) if r != comm.rank}
        here = cupy.cuda.Device().id
        self._views = {
            r: cupy.ndarray(
                (nbytes,), np.uint8, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(p, nbytes, self, here), 0)
            )
            for r, p in self._mapped.items()
        }
        self._comm = comm

    def peer(self, rank: int) -> Any:
        return self._views[rank]

    def close(self) -> None:
        import cupy

        sync()
        self._comm.mpi.Barrier()  # nobody writes into a buffer that is about to go
        for address in self._mapped.values():
            cupy.cuda.runtime.ipcCloseMemHandle(address)
        self._mapped, self._views = {}, {}


def peer_copy(comm: Communicator, buffers: PeerBuffers, nbytes: int, engine: bool) -> Callable[[], None]:
    """Every rank writes ``nbytes`` into each other rank's buffer at once: a copy kernel (``engine``
    False) or the copy engines (cudaMemcpyAsync, one per peer on the current stream)."""
    import cupy

    src = buffers.local[:nbytes]
    targets = [buffers.peer(r)[:nbytes] for r in range(comm.size) if r != comm.rank]
    if not engine:

        def run() -> None:
            for t in targets:
                t[...] = src

        return run
    runtime = cupy.cuda.runtime

    def run_engine() -> None:
        stream = cupy.cuda.get_current_stream().ptr
        for t in targets:
            runtime.memcpyAsync(t.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, stream)

    return run_engine


def nccl_sendrecv(comm: Communicator, nbytes: int, peers: list[int]) -> Callable[[], None]:
    """NCCL's own grouped send/recv of ``nbytes`` to and from each peer, contiguous buffers, current stream."""
    import cupy
    from cupy.cuda import nccl

    nc = nccl_communicator(comm)
    send = device_allocation(max(nbytes, 1) * max(len(peers), 1))
    recv = device_allocation(max(nbytes, 1) * max(len(peers), 1))
    send.fill(comm.rank)

    def run() -> None:
        stream = cupy.cuda.get_current_stream().ptr
        nccl.groupStart()
        for k, p in enumerate(peers):
            nc.recv(recv.data.ptr + k * nbytes, nbytes, nccl.NCCL_UINT8, p, stream)
        for k, p in enumerate(peers):
            nc.send(send.data.ptr + k * nbytes, nbytes, nccl.NCCL_UINT8, p, stream)
        nccl.groupEnd()

    return run


def time_exchanger(comm: Communicator, exchanger: Any, name: str, samples: int) -> dict[str, Timing]:
    """``{name: seconds per exchange}``, and ``{name + " graph": seconds per replay}`` of the exchange captured
    in a CUDA graph where the transport allows it."""
    import cupy

    timings = {name: time_gpu(comm, exchanger.exchange, samples)}
    if exchanger.transport.graph_capturable:
        graph, stream = exchanger.capture(), cupy.cuda.get_current_stream()
        timings[f"{name} graph"] = time_gpu(comm, lambda: graph.launch(stream), samples)
    return timings
