"""Transport ``mpi``: messages moved by MPI, as persistent point-to-point requests or a neighbourhood collective.

The requests are made once when the exchange is bound (MPI-4 persistent operations), so an exchange only
starts them and tests them: no Python objects or MPI requests are created per exchange.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..comm import Communicator
from ..errors import ArgumentError, GridcommTimeout
from ..mpi_waits import RequestWait
from ..mpilib import mpi_cuda_aware, mpi_library_version
from .base import Channel, PackerKind, Transport


@dataclass(frozen=True)
class MpiTransport(Transport):
    """MPI transport.

    Args:
        method: ``"p2p"``: one persistent receive and send per peer (MPI_Recv_init/MPI_Send_init);
            ``"neighbor"``: one persistent MPI_Neighbor_alltoallw over a graph communicator of the peers.
        packing: ``"copy"``: gridcomm packs into contiguous buffers, which MPI moves with one copy;
            ``"datatype"``: MPI reads and writes the fields through derived datatypes (host memory only),
            which saves gridcomm's copies but sends through MPI's own staging buffers.
            The defaults are the fastest in ``gridcomm bench halo`` (docs/design.md has the figures).
    """

    method: Literal["p2p", "neighbor"] = "p2p"
    packing: PackerKind = "copy"
    name = "mpi"
    memories = frozenset({"host", "device"})

    def __post_init__(self) -> None:
        if self.method not in ("p2p", "neighbor"):
            raise ArgumentError(f"MpiTransport(method={self.method!r}): use 'p2p' or 'neighbor'")
        if self.packing not in ("datatype", "copy"):
            raise ArgumentError(f"MpiTransport(packing={self.packing!r}): use 'datatype' or 'copy'")

    def local_reason(self, on_device: bool) -> str | None:
        if on_device and not mpi_cuda_aware():
            return (
                "the fields are in GPU memory but this MPI is not CUDA-aware (MPIX_Query_cuda_support() "
                "says no, or the CUDA driver does not load); handing it device pointers would crash it. Use "
                "transport='staged' or 'nccl', or an MPI built with CUDA (docs/installation.md, 'A CUDA-aware "
                "MPI'; set GRIDCOMM_MPI_CUDA_AWARE=1 only if you know it is)"
            )
        if on_device and self.method == "neighbor" and mpi_library_version().startswith("Open MPI"):
            # Its CUDA support covers point-to-point and blocking collectives, not coll/libnbc's non-blocking
            # ones: MPI_Ineighbor_alltoallw on device buffers segfaulted in opal_convertor_pack (Open MPI 4.1.4).
            return (
                "Open MPI's neighbourhood collectives do not take GPU memory (its CUDA support covers "
                "point-to-point and blocking collectives); use MpiTransport(method='p2p'), the default, for GPU "
                "fields"
            )
        return None

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy" if on_device else self.packing

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        if self.method == "neighbor":
            return _NeighborChannel(comm, packer)
        return _P2PChannel(comm, packer, tag)


def _timeout(comm: Communicator, operation: object, silent: list[int], elapsed: float) -> GridcommTimeout:
    return GridcommTimeout(operation, comm.rank, silent, elapsed)


class _P2PChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any, tag: int) -> None:
        from mpi4py import MPI

        self._startall, self._testall = MPI.Prequest.Startall, MPI.Request.Testall  # no lookups per exchange
        self._comm = comm
        layout = packer.layout
        self._recvs = [comm.mpi.Recv_init(packer.recv_message(i), m.peer, tag) for i, m in enumerate(layout.recvs)]
        self._sends = [comm.mpi.Send_init(packer.send_message(i), m.peer, tag) for i, m in enumerate(layout.sends)]
        self._recv_peers = [m.peer for m in layout.recvs]
        self._send_peers = [m.peer for m in layout.sends]
        self._all = self._recvs + self._sends
        self._waiting = RequestWait()
        # Made once, not at every wait (on the host a Python call is a tenth of an 8-byte exchange).
        self._polled, self._wait_for = not self._waiting.blocking, self._waiting.wait
        self._on_timeout = self._silent_peers
        self._operation: object = None  # the exchange waited for now, named if it times out

    def start(self, stream: Any = None) -> None:
        if stream is not None:
            stream.synchronize()  # the packed data must be in memory before MPI reads it
        self._startall(self._all)

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        if self._polled and self._testall(self._all):  # done already
            return
        self._operation = operation
        self._wait_for(self._recvs, self._sends, timeout, self._on_timeout)

    def _silent_peers(self, elapsed: float, outstanding: Sequence[int]) -> GridcommTimeout:
        """Receives not arrived name the silent peers; unfinished sends only if every receive is in."""
        receives = len(self._recvs)
        silent = sorted({self._recv_peers[i] for i in outstanding if i < receives})
        if not silent:
            silent = sorted({self._send_peers[i - receives] for i in outstanding if i >= receives})
        return _timeout(self._comm, self._operation, silent, elapsed)

    def close(self) -> None:
        for request in self._all:
            request.Free()
        self._all, self._recvs, self._sends = [], [], []
        self._waiting.close()


class _NeighborChannel(Channel):
    """All messages in one MPI_Neighbor_alltoallw over a distributed-graph communicator: a persistent request
    started at each exchange where MPI has them (MPI 4: MPICH 4, Open MPI 5), else one non-blocking collective
    posted at each exchange (MPI 3: Open MPI 4.1, which raises NotImplementedError for the persistent one)."""

    #: Whether to ask for the persistent collective (False: the MPI 3 way, as on a library without it).
    persistent: ClassVar[bool] = True

    def __init__(self, comm: Communicator, packer: Any) -> None:
        from mpi4py import MPI

        self._comm = comm
        layout = packer.layout
        self._sources = [m.peer for m in layout.recvs]
        destinations = [m.peer for m in layout.sends]
        self._graph = comm.mpi.Create_dist_graph_adjacent(self._sources, destinations, reorder=False)
        self._types = [
            self._absolute(message)
            for message in [packer.send_message(i) for i in range(len(destinations))]
            + [packer.recv_message(i) for i in range(len(self._sources))]
        ]
        sends, recvs = self._types[: len(destinations)], self._types[len(destinations) :]
        self._messages = (
            [MPI.BOTTOM, [1] * len(sends), [0] * len(sends), sends],
            [MPI.BOTTOM, [1] * len(recvs), [0] * len(recvs), recvs],
        )
        self._persistent = self.persistent
        if self._persistent:
            try:
                self._request = self._graph.Neighbor_alltoallw_init(*self._messages)
            except NotImplementedError:  # every rank runs the same library: all take the same way
                self._persistent = False
        if not self._persistent:
            self._request = MPI.REQUEST_NULL
        self._waiting = RequestWait()

    @staticmethod
    def _absolute(message: Any) -> Any:
        """An absolute-address datatype (for MPI.BOTTOM) of a message given as a buffer or [BOTTOM, 1, type]."""
        from mpi4py import MPI

        if isinstance(message, list) and message[0] is MPI.BOTTOM:
            return message[2].Dup()
        return MPI.Datatype.Create_struct([message.nbytes], [MPI.Get_address(message)], [MPI.BYTE]).Commit()

    def start(self, stream: Any = None) -> None:
        if stream is not None:
            stream.synchronize()
        if self._persistent:
            self._request.Start()
        else:
            self._request = self._graph.Ineighbor_alltoallw(*self._messages)

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        # A collective completes for all or none: every neighbour is a suspect.
        def silent_peers(elapsed: float, outstanding: Sequence[int]) -> GridcommTimeout:
            return _timeout(self._comm, operation, sorted(set(self._sources)), elapsed)

        self._waiting.wait((), [self._request], timeout, silent_peers)

    def close(self) -> None:
        self._waiting.close()
        if self._persistent:
            self._request.Free()
        for datatype in self._types:
            datatype.Free()
        self._graph.Free()
