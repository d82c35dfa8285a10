"""``gridcomm bench p2p`` and ``bench alltoall``: moving contiguous blocks between GPUs, per transport.

Each rank sends ``nbytes`` to each peer (p2p: the other of 2 ranks; alltoall: every other rank) and
receives as much from each: through gridcomm's Transposer (``from_counts``: block r of a byte source goes to
rank r and lands in block (this rank) of its destination), so that every transport runs its real path, both
ipc methods (one kernel; copy engines on per-peer streams), beside NCCL's own grouped send/recv of the same
bytes and the peer-copy ceiling (a copy kernel, and the copy engines, writing straight into the peers'
memory), all in the same run. Latency is the time per exchange of the smallest sizes; bandwidth (``GBps``) is
the bytes a rank sends to the other ranks per second, which is nccl-tests' busbw of an all-to-all (its algbw,
the whole send buffer, own block included, per second, times (n - 1) / n). Result files written before
2026-11-26 09:00 UTC also hold a ``busbw_GBps`` that applied (n - 1) / n a second time (half the bandwidth on 2
GPUs, three quarters on 4); their ``GBps`` is the nccl-tests figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...comm import Communicator
from ...transports import LABELLED, Transport, mixes, usable
from ...transpose import Transposer
from .ceilings import (
    HostSendRecv,
    PeerBuffers,
    PinnedCopiesBothWays,
    PinnedCopy,
    bind_unless_refused,
    mixed_over_slower_group,
    mpi4jax_alltoall,
    mpi4jax_reason,
    nccl_sendrecv,
    nvlink_nominal_gbps,
    peer_copy,
    sync,
    time_exchanger,
    time_gpu,
    time_groups_alone,
    torch_alltoall,
    torch_process_group,
)


def variants(names: Sequence[str]) -> dict[str, str | Transport]:
    """The transports to time, by label: each name, and each configured variant of it (``transports.LABELLED``:
    ipc's copy-engine method beside its kernel)."""
    out: dict[str, str | Transport] = {name: name for name in names}
    for label, transport in LABELLED.items():
        if transport.name in out:
            out[label] = transport
    return out


def block_transposer(comm: Communicator, nbytes: int, source: Any, destination: Any, transport: Any) -> Transposer:
    """``nbytes`` of ``source`` block r to every other rank r, landing in block (this rank) of its destination."""
    counts = [0 if r == comm.rank else nbytes for r in range(comm.size)]
    displs = [r * nbytes for r in range(comm.size)]
    return Transposer.from_counts(comm, counts, displs, counts, displs, source, destination, transport)


def sizes_between(smallest: int, largest: int, factor: int = 4) -> list[int]:
    """smallest, smallest*factor, ... up to largest (bytes)."""
    out, n = [], smallest
    while n <= largest:
        out.append(n)
        n *= factor
    return out


NCCL_PEERS = ("nccl send/recv", "torch all_to_all")  # NCCL called directly, not through gridcomm
#: The staged transport's legs alone, timed where it is: its copies down and up (all the bytes a rank sends or
#: receives, pinned host memory), the two at once (as a pipelined exchange runs them), and MPI between host
#: buffers. Perfectly pipelined, staged takes the slowest: of the copies on one node (node memory), of the copies
#: and MPI across nodes.
STAGED_LEGS = ("pinned copy down", "pinned copy up", "pinned copies both ways", "host MPI")


def run_transfer(
    comm: Communicator,
    sizes: Sequence[int],
    transports: Mapping[str, str | Transport | Mapping[str, Any]] | None = None,
    samples: int = 7,
    progress: Callable[[int], Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Collective: one row per message size, with every transport (``{label: name, Transport or mapping}``,
    default the variants of every transport usable here and, where the ranks are on several nodes, declared
    ones included, each mix of a transport of one node with one across them, e.g. ``ipc+nccl``), NCCL's own
    calls and the ceilings [s per exchange],
    ``progress(sizes done)`` after each; and what the rows share (the NVLink nominal rate, why a peer is
    missing)."""
    import cupy

    if transports is None:  # on declared or real nodes, the mixed plans beside the single transports
        transports = {**variants(usable(comm, on_device=True)), **mixes(comm, on_device=True)}
    peers = [r for r in range(comm.size) if r != comm.rank]
    buffers = PeerBuffers(comm, max(sizes))
    no_torch = torch_process_group(comm)
    no_jax = mpi4jax_reason(comm)
    nominal = comm.mpi.allgather(nvlink_nominal_gbps())
    shared: dict[str, Any] = {
        "nvlink_nominal_GBps": min(nominal) if all(nominal) else None,
        "torch_missing": no_torch,
        "mpi4jax_missing": no_jax,
        "refused": {},  # transport -> why it could not bind (TransportError, raised on every rank together)
    }
    rows = []
    for nbytes in sizes:
        source = cupy.full(comm.size * nbytes, comm.rank + 1, dtype=np.uint8)
        destination = cupy.zeros(comm.size * nbytes, dtype=np.uint8)
        timings: dict[str, Any] = {}
        for name, transport in transports.items():
            bound = (comm, nbytes, source, destination, transport)
            if (transposer := bind_unless_refused(name, shared["refused"], block_transposer, *bound)) is None:
                continue
            destination.fill(0)  # each transport must deliver on its own
            with transposer:
                timings.update(time_exchanger(comm, transposer, name, samples))
                timings.update(time_groups_alone(comm, transposer, name, samples))
            _check_received(comm, destination, nbytes, peers)
        timings["nccl send/recv"] = time_gpu(comm, nccl_sendrecv(comm, nbytes, peers), samples)
        if no_torch is None:
            timings["torch all_to_all"] = time_gpu(comm, torch_alltoall(comm, nbytes), samples)
        if no_jax is None:
            timings["mpi4jax alltoall"] = time_gpu(comm, mpi4jax_alltoall(comm, nbytes), samples)
        timings["peer copy kernel"] = time_gpu(comm, peer_copy(comm, buffers, nbytes, engine=False), samples)
        timings["peer copy engine"] = time_gpu(comm, peer_copy(comm, buffers, nbytes, engine=True), samples)
        sent = nbytes * len(peers)
        staged = [k for k in timings if _transport_of(k) == "staged"]
        if staged:
            legs = (PinnedCopy(sent, down=True), PinnedCopy(sent, down=False), PinnedCopiesBothWays(sent),
                    HostSendRecv(comm, nbytes, peers))  # fmt: skip
            timings.update({name: time_gpu(comm, leg, samples) for name, leg in zip(STAGED_LEGS, legs, strict=True)})
        ceiling = min(timings["peer copy kernel"].median, timings["peer copy engine"].median)
        # gridcomm's fastest way that is not NCCL, against NCCL's fastest (its own calls, or gridcomm's nccl).
        nccl_best = min(t.median for k, t in timings.items() if k.startswith("nccl") or k in NCCL_PEERS)
        ours = {k: t.median for k, t in timings.items() if _transport_of(k) in set(transports) - {"nccl"}}
        best = min(ours, key=ours.__getitem__) if ours else None
        rows.append(
            {
                "bytes_per_peer": nbytes,
                "peers": len(peers),
                "times": {k: t.as_dict() for k, t in timings.items()},
                "GBps": {k: sent / t.median / 1e9 for k, t in timings.items()},
                "ceiling_GBps": sent / ceiling / 1e9,
                "best": best,
                "best_vs_nccl_best": nccl_best / ours[best] if best else None,
                "mixed_over_slower_group": mixed_over_slower_group(timings),
                **(_staged_share(timings, staged, sent) if staged else {}),
            }
        )
        del source, destination
        if progress is not None:
            progress(len(rows))
    buffers.close()
    return rows, shared


def _staged_share(timings: Mapping[str, Any], staged: Sequence[str], sent: int) -> dict[str, Any]:
    """The staged transport's ceiling (its slower pinned copy alone, down or up: on one node the chunks need no
    other leg, and host MPI, timed beside them, is the leg across nodes), as GB/s, which copy it is, and the
    fastest staged timing's share of it; and that timing's share of the two copies run at once, as an exchange
    runs them (``staged_share_of_both_ways``)."""
    slowest = max(STAGED_LEGS[:2], key=lambda k: timings[k].median)
    fastest = min(timings[k].median for k in staged)
    return {
        "staged_ceiling_GBps": sent / timings[slowest].median / 1e9,
        "staged_ceiling_leg": slowest,
        "staged_share_of_ceiling": timings[slowest].median / fastest,
        "staged_share_of_both_ways": timings[STAGED_LEGS[2]].median / fastest,
    }


def _transport_of(label: str) -> str:
    """The transport a timing's label names: "ipc/copy-engine graph" -> "ipc"."""
    return label.split()[0].split("/")[0]


def _check_received(comm: Communicator, destination: Any, nbytes: int, peers: Sequence[int]) -> None:
    """Every received block holds its sender's bytes (rank + 1): a benchmark never times a broken path."""
    sync()
    host = destination.get().reshape(comm.size, nbytes)
    wrong = [r for r in peers if not (host[r] == (r + 1) % 256).all()]
    if wrong:
        raise AssertionError(f"rank {comm.rank}: blocks from ranks {wrong} arrived wrong ({nbytes} B each)")
