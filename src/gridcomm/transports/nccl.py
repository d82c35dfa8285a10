"""Transport ``nccl``: grouped NCCL send/recv per peer, enqueued on the exchange's stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..comm import Communicator
from ..gpu import gpu_count, nccl_communicator
from .base import Channel, PackerKind, Transport


@dataclass(frozen=True)
class NcclTransport(Transport):
    """NCCL point-to-point (``cupy.cuda.nccl``), bootstrapped over MPI; graph-capturable."""

    name = "nccl"
    graph_capturable = True

    def unusable_reason(self, comm: Communicator, on_device: bool) -> str | None:
        if not on_device:
            return "nccl moves GPU arrays only"
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
        from cupy.cuda import nccl

        self._nccl = nccl
        self._comm = nccl_communicator(comm)
        layout = packer.layout
        self._sends = [(packer.send_message(i).data.ptr, m.nbytes, m.peer) for i, m in enumerate(layout.sends)]
        self._recvs = [(packer.recv_message(i).data.ptr, m.nbytes, m.peer) for i, m in enumerate(layout.recvs)]

    def start(self, stream: Any = None) -> None:
        nccl, comm, ptr = self._nccl, self._comm, stream.ptr
        nccl.groupStart()
        for address, nbytes, peer in self._recvs:
            comm.recv(address, nbytes, nccl.NCCL_UINT8, peer, ptr)
        for address, nbytes, peer in self._sends:
            comm.send(address, nbytes, nccl.NCCL_UINT8, peer, ptr)
        nccl.groupEnd()

    def wait(self, timeout: float, operation: str, stream: Any = None) -> None:
        """Nothing to do on the host: the transfers complete in stream order, before the unpack."""

    def close(self) -> None:
        self._sends = self._recvs = []
