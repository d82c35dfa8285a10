"""Waits that run on the GPU (ipc flags, NVSHMEM signals) and give up instead of hanging it.

A kernel that waits for a peer spins with a time limit read from %globaltimer; when the limit passes it writes
[1, peer, exchange, step] into host-mapped memory and skips its copy. ``GpuWaitReport`` holds that memory and the
limit for one channel, and turns a report into a GridcommTimeout on the host, without synchronising: the
channels' waits on the host are stream-ordered (GpuWaitChannel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import GridcommTimeout
from .base import Channel

WAIT_CLEAR, WAIT_DATA, PEER_GAVE_UP = 1, 2, 3  # as in gpu_waits.cuh
STEP_NAMES = {
    WAIT_CLEAR: "the GPU waited for the peer to clear its halos for writing",
    WAIT_DATA: "the GPU waited for the peer's halos",
    PEER_GAVE_UP: "the peer gave up (its own wait timed out), so its halos never came",
}


class GpuWaitReport:
    """Host-mapped memory where a channel's kernels report a wait that gave up, and their time limit.

    Args:
        rank: this rank (named in the GridcommTimeout).
        transport: the transport's name (named when the GPU never finishes at all).
    """

    def __init__(self, rank: int, transport: str) -> None:
        import cupy

        self._rank, self._transport = rank, transport
        self._memory = cupy.cuda.alloc_pinned_memory(32)
        self.error = np.frombuffer(self._memory, dtype=np.int64, count=4)
        self.error[:] = 0
        self.limit_ns = np.uint64(0)
        self._timeout = 0.0

    @property
    def address(self) -> np.uint64:
        """The kernels' ``error`` argument."""
        return np.uint64(self.error.ctypes.data)

    def set_timeout(self, timeout: float) -> None:
        """Seconds each GPU-side wait may take before it gives up (called before every exchange: the same
        timeout costs one comparison)."""
        if timeout != self._timeout:
            self._timeout, self.limit_ns = timeout, np.uint64(int(timeout * 1e9))

    def check(self, operation: object) -> None:
        """Raise GridcommTimeout if a GPU-side wait gave up (read from host-mapped memory; no sync)."""
        if self.error[0]:
            _, peer, exchange, step = (int(x) for x in self.error)
            self.error[:] = 0
            raise GridcommTimeout(
                f"{operation}: {STEP_NAMES.get(step, 'a GPU-side wait failed')} in exchange {exchange}",
                self._rank,
                [peer],
                float(self.limit_ns) / 1e9,
            )


class GpuWaitChannel(Channel):
    """A channel whose kernels wait for the peers themselves (``self._waits``, a GpuWaitReport).

    When such a wait gives up, the GPU has finished the exchange without the silent peer's data: the exchange
    is abandoned (its halos are undefined), and the next one may start at once; the peers are told by the
    kernels, and the next exchange is right once the silent peer has caught up.

    ``wait()`` is stream-ordered: the kernels already make later work on the stream follow the exchange, so it
    neither enqueues anything nor blocks the host (a host wait for the GPU cost 16.9 of the 22.1 µs of a replayed
    exchange on 4 x H100). It raises for an exchange whose GPU-side wait gave up before it was called (the report
    names that exchange): a silent peer is reported at the first ``wait()``, ``check()`` or ``close()`` after the
    GPU gave up, not necessarily at that exchange's own ``wait()``.
    """

    _waits: GpuWaitReport

    @property
    def gpu_report(self) -> np.ndarray:
        return self._waits.error

    def before_pack(self, stream: Any, timeout: float) -> None:
        self.abandoned = False
        self._waits.set_timeout(timeout)

    def check(self, operation: object) -> None:
        try:
            self._waits.check(operation)
        except GridcommTimeout:
            self.abandoned = True
            raise

    def wait(self, timeout: float, operation: object, stream: Any = None) -> None:
        if self._waits.error[0]:  # the report read here, not through two calls: this is every eager exchange's wait
            self.check(operation)
