"""``gridcomm bench p2p`` and ``bench alltoall``: moving contiguous blocks between GPUs, per transport.

Each rank sends ``nbytes`` to each peer (p2p: the other of 2 ranks; alltoall: every other rank) and
receives as much from each: through gridcomm's HaloExchanger on a 1-D byte field (so every transport runs
its real pack, move and unpack path), beside NCCL's own grouped send/recv of the same bytes and the
peer-copy ceiling (a copy kernel, and the copy engines, writing straight into the peers' memory), all in
the same run. Latency is the time per exchange of the smallest sizes; bandwidth is bytes sent per rank
per second, and busbw (as nccl-tests) that times (n - 1) / n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comm import Communicator
from ..exchange import HaloExchanger
from ..pattern import Box, Pattern, PeerPlan
from .ceilings import PeerBuffers, nccl_sendrecv, peer_copy, sync, time_exchanger, time_gpu

GPU_TRANSPORTS = ("staged", "nccl", "ipc")


@dataclass
class BlockExchange:
    """A 'decomposition' whose pattern sends block r of the first half of a 1-D byte field to rank r, which
    receives it into block (this rank) of its second half: an all-to-all among ``peers``."""

    comm: Communicator
    nbytes: int
    peers: Sequence[int]

    @property
    def length(self) -> int:
        return 2 * self.comm.size * self.nbytes

    def pattern(self) -> Pattern:
        n, size = self.nbytes, self.comm.size
        plans = tuple(
            PeerPlan(r, (Box((r * n,), ((r + 1) * n,)),), (Box(((size + r) * n,), ((size + r + 1) * n,)),))
            for r in sorted(self.peers)
        )
        return Pattern((self.length,), plans)


def sizes_between(smallest: int, largest: int, factor: int = 4) -> list[int]:
    """smallest, smallest*factor, ... up to largest (bytes)."""
    out, n = [], smallest
    while n <= largest:
        out.append(n)
        n *= factor
    return out


def run_transfer(
    comm: Communicator, sizes: Sequence[int], transports: Sequence[str] = GPU_TRANSPORTS, samples: int = 7
) -> list[dict[str, Any]]:
    """Collective: one row per message size, with every transport, NCCL and the ceilings [s per exchange]."""
    import cupy

    peers = [r for r in range(comm.size) if r != comm.rank]
    buffers = PeerBuffers(comm, max(sizes))
    rows = []
    for nbytes in sizes:
        block = BlockExchange(comm, nbytes, peers)
        field = cupy.zeros(block.length, dtype=np.uint8)
        field[: comm.size * nbytes] = comm.rank + 1
        timings: dict[str, Any] = {}
        for name in transports:
            field[comm.size * nbytes :] = 0  # each transport must deliver on its own
            with HaloExchanger(block, field, name) as exchanger:
                timings.update(time_exchanger(comm, exchanger, name, samples))
            _check_received(comm, field, nbytes, peers)
        timings["nccl send/recv"] = time_gpu(comm, nccl_sendrecv(comm, nbytes, peers), samples)
        timings["peer copy kernel"] = time_gpu(comm, peer_copy(comm, buffers, nbytes, engine=False), samples)
        timings["peer copy engine"] = time_gpu(comm, peer_copy(comm, buffers, nbytes, engine=True), samples)
        sent = nbytes * len(peers)
        ceiling = min(timings["peer copy kernel"].median, timings["peer copy engine"].median)
        rows.append(
            {
                "bytes_per_peer": nbytes,
                "peers": len(peers),
                "times": {k: t.as_dict() for k, t in timings.items()},
                "GBps": {k: sent / t.median / 1e9 for k, t in timings.items()},
                "busbw_GBps": {k: sent * (comm.size - 1) / comm.size / t.median / 1e9 for k, t in timings.items()},
                "ceiling_GBps": sent / ceiling / 1e9,
            }
        )
        del field
    buffers.close()
    return rows


def _check_received(comm: Communicator, field: Any, nbytes: int, peers: Sequence[int]) -> None:
    """Every received block holds its sender's bytes (rank + 1): a benchmark never times a broken path."""
    sync()
    host = field[comm.size * nbytes :].get().reshape(comm.size, nbytes)
    wrong = [r for r in peers if not (host[r] == (r + 1) % 256).all()]
    if wrong:
        raise AssertionError(f"rank {comm.rank}: blocks from ranks {wrong} arrived wrong ({nbytes} B each)")
