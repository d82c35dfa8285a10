"""Transport ``nccl``: grouped NCCL send/recv per peer, enqueued on the exchange's stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..comm import Communicator
from ..device import gpu_count
from ..errors import GridcommError, GridcommTimeout
from ..gpu import nccl_communicator
from .base import Channel, PackerKind, Transport, wait_on_stream


@dataclass(frozen=True)
class NcclTransport(Transport):
    """NCCL point-to-point (``cupy.cuda.nccl``), bootstrapped over MPI; graph-capturable."""

    name = "nccl"
    memories = frozenset({"device"})
    graph_capturable = True

    def local_reason(self, on_device: bool) -> str | None:
        if (reason := super().local_reason(on_device)) is not None:
            return reason
        try:
            from cupy.cuda import nccl  # noqa: F401
        except Exception as error:
            return f"cupy.cuda.nccl is not available ({error})"
        return None if gpu_count() else "no GPU"

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _NcclChannel(comm, packer)


class _NcclChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any) -> None:
        import cupy
        from cupy.cuda import nccl

        self._nccl = nccl
        self._owner = comm
        self._comm = nccl_communicator(comm)
        layout = packer.layout
        self._sends = [(packer.send_message(i).data.ptr, m.nbytes, m.peer) for i, m in enumerate(layout.sends)]
        self._recvs = [(packer.recv_message(i).data.ptr, m.nbytes, m.peer) for i, m in enumerate(layout.recvs)]
        self._received = cupy.cuda.Event(block=False, disable_timing=True)
        self._aborted = ""  # why the communicator was aborted: nothing may use it afterwards
        # NCCL connects a pair of ranks on their first send/recv, and that needs both on the host: connect
        # now, while every rank is here (binding is collective), so that no exchange blocks in groupEnd.
        warm_up = cupy.cuda.Stream(non_blocking=True)
        self.start(warm_up)
        warm_up.synchronize()

    def _usable(self) -> None:
        if self._aborted:
            raise GridcommError(
                f"rank {self._owner.rank}: this exchanger's NCCL communicator was aborted after {self._aborted}; "
                "its halos are undefined. Make a new HaloExchanger (NCCL cannot recover an aborted communicator)"
            )

    def before_pack(self, stream: Any, timeout: float) -> None:
        self._usable()

    def start(self, stream: Any = None) -> None:
        self._usable()
        if not (self._recvs or self._sends):
            # Nothing to move (one rank; a periodic wrap is the pack kernel's): an empty group would only cost,
            # and NCCL 2.27+ leaks ~160 B of host memory per group on a communicator of one rank (NCCL #1944;
            # measured: 1.7 MiB per 10,000 exchanges in gridcomm bench soak --gpu --np 1).
            return
        nccl, comm, ptr = self._nccl, self._comm, stream.ptr
        nccl.groupStart()
        for address, nbytes, peer in self._recvs:
            comm.recv(address, nbytes, nccl.NCCL_UINT8, peer, ptr)
        for address, nbytes, peer in self._sends:
            comm.send(address, nbytes, nccl.NCCL_UINT8, peer, ptr)
        nccl.groupEnd()

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        """The transfers complete in stream order, before the unpack; the host waits for them (except while
        the stream is captured into a graph) so that a silent peer ends in GridcommTimeout, not a hang."""

        def silent(elapsed: float) -> GridcommTimeout:
            # NCCL cannot say which peer is missing, and its kernels would spin forever: abort the
            # communicator (it cannot be used afterwards) so that the GPU is free again.
            self._owner.nccl = None
            self._comm.abort()
            peers = sorted({p for _, _, p in self._recvs})
            self._aborted = f"a timeout in {operation}"
            self.abandoned = True
            return GridcommTimeout(f"{operation} (nccl; communicator aborted)", self._owner.rank, peers, elapsed)

        self._usable()
        wait_on_stream(stream, self._received, timeout, silent)

    def close(self) -> None:
        self._sends = self._recvs = []
