"""Transport ``nvshmem``: the packed messages put into the peers' symmetric receive buffers, with signals.

The packer receives into a buffer of NVSHMEM's symmetric heap (``receive_buffer``); per exchange one kernel
(nvshmem.cu) puts every message with ``nvshmemx_putmem_signal_block`` and waits on the GPU for
the sources' signals, so the exchange needs no host work and can be captured in a CUDA graph. Within a node the
puts are NVLink stores; across nodes NVSHMEM's network transports carry them. Needs ``gridcomm[nvshmem]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import shmem
from ..agreement import raise_if_any
from ..comm import Communicator
from ..errors import TransportError
from .base import Channel, PackerKind, Transport
from .gpu_waits import GpuWaitChannel, GpuWaitReport

SOURCE = Path(__file__).with_name("nvshmem.cu")
SEND_OFFSET, RECV_OFFSET, NBYTES, PE, RANK, ROW = range(6)  # as in nvshmem.cu
THREADS = 512


@dataclass(frozen=True)
class NvshmemTransport(Transport):
    """NVSHMEM puts with signals into symmetric receive buffers, all issued from one kernel; graph-capturable."""

    name = "nvshmem"
    memories = frozenset({"device"})
    graph_capturable = True
    replayable = True

    def local_reason(self, on_device: bool) -> str | None:
        return super().local_reason(on_device) or shmem.unavailable_reason()

    def ranks_reason(self, comm: Communicator) -> str | None:
        from mpi4py import MPI

        world = MPI.COMM_WORLD.Get_size()
        if comm.size != world:
            return f"NVSHMEM needs a communicator of all {world} processes of the job (this one has {comm.size})"
        return None

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def receive_buffer(self, comm: Communicator, nbytes: int) -> Any:
        """Collective: a symmetric buffer as large as the largest rank's receive buffer."""
        shmem.initialise(comm)
        return shmem.symmetric_array(comm.mpi.allreduce(int(nbytes), op=_max()), comm)

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _NvshmemChannel(comm, packer)


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


class _NvshmemChannel(GpuWaitChannel):
    def __init__(self, comm: Communicator, packer: Any) -> None:
        import cupy

        layout = packer.layout
        self._comm = comm
        self._recv = packer.recv_buffer
        self._signals = shmem.symmetric_array(16 * comm.size, comm).view(np.int64)
        pes = shmem.pe_of_ranks(comm)
        # Where each source's message lands in this rank's receive buffer, told to that source.
        landing = {m.peer: (m.offset, m.nbytes) for m in layout.recvs}
        theirs = comm.mpi.alltoall([landing.get(r) for r in range(comm.size)])
        rows, problem = [], None
        for m in layout.sends:
            there = theirs[m.peer]
            if there is None or there[1] != m.nbytes:
                problem = f"rank {comm.rank} sends {m.nbytes} bytes to rank {m.peer}, which expects {there}"
                break
            rows.append([m.offset, there[0], m.nbytes, pes[m.peer], m.peer])
        raise_if_any(comm.mpi, problem, TransportError, self._free)
        self._ndest = len(rows)
        self._table = cupy.asarray(np.array(rows or [[0] * ROW], dtype=np.int64))
        sources = [m.peer for m in layout.recvs]
        self._nsrc = len(sources)
        self._source_ranks = cupy.asarray(np.array(sources or [0], dtype=np.int32))
        self._source_pes = cupy.asarray(np.array([pes[s] for s in sources] or [0], dtype=np.int32))
        self._epoch = cupy.zeros(1, dtype=np.int64)
        self._finished = cupy.zeros(1, dtype=np.uint32)
        self._waits = GpuWaitReport(comm.rank, "nvshmem")
        self._send = packer.send_buffer
        self._kernel = shmem.load_module(SOURCE, comm).get_function("gridcomm_nvshmem_exchange")
        cupy.cuda.Device().synchronize()
        comm.mpi.Barrier()

    def start(self, stream: Any = None) -> None:
        if not (self._ndest or self._nsrc):
            return  # nothing moves between ranks (one rank: a periodic wrap is the pack kernel's)
        self._kernel(
            (max(self._ndest, 1),),
            (THREADS,),
            (
                self._send,
                self._recv,
                self._table,
                np.int32(self._ndest),
                self._source_pes,
                self._source_ranks,
                np.int32(self._nsrc),
                self._signals,
                np.int32(self._comm.rank),
                np.int32(self._comm.size),
                self._epoch,
                self._finished,
                self._waits.limit_ns,
                self._waits.address,
            ),
            stream=stream,
        )

    def _free(self) -> None:
        import cupy

        cupy.cuda.Device().synchronize()
        self._comm.mpi.Barrier()  # no peer puts into our memory any more
        for array in (self._signals, self._recv):
            if array is not None:
                shmem.free_symmetric(array)
        self._signals = self._recv = None

    def close(self) -> None:
        self._free()
