"""The halo exchange GPU codes do today, kept as the baseline our transports are measured against: every
exchanged field copied whole from the GPU to the host, exchanged there, and copied back (the seed's original
MPDATA mechanism, ``!$ACC update self`` / Atlas's host halo exchange / ``!$ACC update device``)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

from ....exchange import HaloExchanger


class HostRoundTrip:
    """Exchanges the halos of GPU ``fields`` through host copies of the whole fields (pinned memory) and a CPU
    HaloExchanger over ``decomposition`` (collective construction). Needs the host in every exchange, so it
    cannot be captured in a CUDA graph."""

    transport = types.SimpleNamespace(name="host", graph_capturable=False)

    def __init__(self, decomposition: Any, fields: Sequence[Any]) -> None:
        import cupyx

        self.device = list(fields)
        self.host = [cupyx.empty_pinned(f.shape, f.dtype) for f in self.device]
        self.exchanger = HaloExchanger(decomposition, self.host)

    def start(self, stream: Any = None) -> HostRoundTrip:
        """Copy the fields down, exchange on the host, enqueue the copies back on ``stream``."""
        for d, h in zip(self.device, self.host, strict=True):
            d.get(out=h, stream=stream, blocking=False)
        if stream is not None:
            stream.synchronize()
        else:
            import cupy

            cupy.cuda.Device().synchronize()
        self.exchanger.exchange()
        for d, h in zip(self.device, self.host, strict=True):
            d.set(h, stream=stream)
        return self

    def wait(self) -> None:
        pass

    def check(self) -> None:
        pass

    def close(self) -> None:
        self.exchanger.close()
