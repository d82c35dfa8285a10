"""Transport ``staged``: GPU pack, copy to pinned host memory, MPI, copy back, GPU unpack.

The baseline the seeds measure against (what users hand-roll today), for any MPI, CUDA-aware or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comm import Communicator
from ..gpu import gpu_count
from ..packing.layout import Layout
from .base import Channel, PackerKind, Transport
from .mpi import MpiTransport


class _PinnedBuffers:
    """Host copies of a device packer's send and receive buffers, in page-locked memory."""

    def __init__(self, layout: Layout) -> None:
        import cupy

        self.layout = layout
        self._memory = [cupy.cuda.alloc_pinned_memory(max(n, 1)) for n in (layout.send_nbytes, layout.recv_nbytes)]
        self.send_buffer, self.recv_buffer = (
            np.frombuffer(m, dtype=np.uint8, count=max(n, 1))
            for m, n in zip(self._memory, (layout.send_nbytes, layout.recv_nbytes), strict=True)
        )

    def send_message(self, index: int) -> np.ndarray:
        m = self.layout.sends[index]
        return self.send_buffer[m.offset : m.offset + m.nbytes]

    def recv_message(self, index: int) -> np.ndarray:
        m = self.layout.recvs[index]
        return self.recv_buffer[m.offset : m.offset + m.nbytes]


@dataclass(frozen=True)
class StagedTransport(Transport):
    """Device buffers staged through pinned host memory and moved by (host) MPI."""

    name = "staged"

    def unusable_reason(self, comm: Communicator, on_device: bool) -> str | None:
        if not on_device:
            return "staged moves GPU arrays (host arrays go to MPI directly: use 'mpi' or 'cma')"
        return None if gpu_count() else "no GPU (or CuPy is missing)"

    def packer_kind(self, on_device: bool) -> PackerKind:
        return "copy"

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        return _StagedChannel(comm, packer, tag)


class _StagedChannel(Channel):
    def __init__(self, comm: Communicator, packer: Any, tag: int) -> None:
        self._device = packer
        self._host = _PinnedBuffers(packer.layout)
        self._mpi = MpiTransport("p2p", "copy").bind(comm, self._host, tag)

    def start(self, stream: Any = None) -> None:
        n = self._device.layout.send_nbytes
        if n:
            self._device.send_buffer[:n].get(stream=stream, out=self._host.send_buffer[:n])  # waits for the copy
        self._mpi.start()

    def wait(self, timeout: float, operation: str, stream: Any = None) -> None:
        self._mpi.wait(timeout, operation)
        n = self._device.layout.recv_nbytes
        if n:
            self._device.recv_buffer[:n].set(self._host.recv_buffer[:n], stream=stream)

    def close(self) -> None:
        self._mpi.close()
