"""``gridcomm bench halo``: time per halo exchange against message size and field count.

The problem is the seed's GCL set-up: 3-D fields of ``levels`` vertical levels (the contiguous dimension),
decomposed horizontally over a 2-D process grid, periodic horizontally, a halo of 3 lines, box stencil.
Each case is timed for every MPI transport variant and beside its floor, measured in the same run:

- ``floor``: bare mpi4py Isend/Irecv of the same per-peer byte counts from contiguous buffers that are
  never written (what the issue defines as the floor);
- ``floor_fresh``: the same, but each send buffer is rewritten before it is sent, as it is after a
  compute step (a real exchange always sends freshly written data, which costs cache-coherence traffic).

And beside its peers where they are installed (bench/peers.py): GHEX's halo exchange of the same fields, its
result checked equal to gridcomm's bit for bit before either is timed, waited for by GHEX's ``wait()`` ("GHEX")
and as gridcomm waits ("GHEX polled": test, yield the core, test again). Every figure's samples are taken in
turn with the others' (``time_interleaved``), so that the ratios hold on a machine shared with other work.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...arrays import is_device_array
from ...comm import Communicator
from ...decomp import CartesianDecomposition, choose_proc_grid
from ...errors import GridcommError
from ...exchange import HaloExchanger
from ...transports import CmaTransport, MpiTransport, ShmTransport, Transport, mixes
from ..measure.timing import time_interleaved
from .ceilings import alone_label, mixed_over_slower_group, sync
from .peers import GhexHalo, same_bits

VARIANTS: dict[str, Transport] = {
    "cma": CmaTransport(),
    "shm": ShmTransport(),
    "p2p/datatype": MpiTransport("p2p", "datatype"),
    "p2p/copy": MpiTransport("p2p", "copy"),
    "neighbor/datatype": MpiTransport("neighbor", "datatype"),
    "neighbor/copy": MpiTransport("neighbor", "copy"),
}


def host_variants(
    comm: Communicator, variants: Mapping[str, Transport] | None = None
) -> dict[str, Transport | dict[str, str]]:
    """Collective: the ``variants`` (default VARIANTS) that can serve every peer here (not cma where the ranks
    are on several nodes, declared ones included) and, on several nodes, each mix of a transport of one node
    with one across them (``cma+mpi``: transports.mixes)."""
    usable: dict[str, Transport | dict[str, str]] = {
        name: t for name, t in (variants or VARIANTS).items() if t.unusable_reason(comm, on_device=False) is None
    }
    return usable | mixes(comm, on_device=False)


def gpu_variants(comm: Communicator) -> dict[str, str | dict[str, str]]:
    """Collective: every GPU transport that can serve every peer here and, on several nodes (declared ones
    included), each mix of one that serves this rank's node with one across them (``ipc+nccl``)."""
    from ...transports import usable

    return {name: name for name in usable(comm, on_device=True)} | mixes(comm, on_device=True)


@dataclass(frozen=True)
class HaloCase:
    """One benchmark case: ``n`` × ``n`` horizontal points per rank, ``fields`` float64 fields."""

    n: int
    fields: int
    levels: int
    halo: int


def _floor(comm: Communicator, exchanger: HaloExchanger, fresh: bool) -> Callable[[], None]:
    """Isend/Irecv of contiguous buffers with the exchanger's per-peer byte counts, plus a message to itself
    of the bytes the exchanger copies locally (periodic wrap over one rank)."""
    from mpi4py import MPI

    mpi = comm.mpi
    layout = exchanger.layout
    to_self = [(comm.rank, exchanger.local_copy_nbytes)] if exchanger.local_copy_nbytes else []
    send_sizes = [(m.peer, m.nbytes) for m in layout.sends] + to_self
    recv_sizes = [(m.peer, m.nbytes) for m in layout.recvs] + to_self
    sends = [(p, np.ones(n, np.uint8)) for p, n in send_sizes]
    sources = [np.ones(n, np.uint8) for _, n in send_sizes]
    recvs = [(p, np.empty(n, np.uint8)) for p, n in recv_sizes]
    tag = comm.new_tag()

    def run() -> None:
        if fresh:
            for (_, buffer), source in zip(sends, sources, strict=True):
                np.copyto(buffer, source)
        requests = [mpi.Irecv(b, p, tag) for p, b in recvs] + [mpi.Isend(b, p, tag) for p, b in sends]
        MPI.Request.Waitall(requests)

    return run


def _decomposition(comm: Communicator, case: HaloCase) -> CartesianDecomposition:
    """Each rank owns n × n columns of all levels: the global grid scales with the horizontal process grid."""
    halo = ((case.halo, case.halo), (case.halo, case.halo), (0, 0))
    px, py = choose_proc_grid(comm.size, (case.n, case.n), halo[:2], (True, True))
    return CartesianDecomposition(
        comm,
        (case.n * px, case.n * py, case.levels),
        halo=halo,
        periodic=(True, True, False),
        proc_grid=(px, py, 1),
    )


def _fields(decomposition: CartesianDecomposition, case: HaloCase, xp: Any) -> list[Any]:
    rng = xp.random.RandomState(decomposition.comm.rank)  # drawn where the fields live: GB on a GPU
    return [rng.random_sample(decomposition.local_shape) for _ in range(case.fields)]


def _row(case: HaloCase, decomposition: CartesianDecomposition, exchanger: HaloExchanger) -> dict[str, Any]:
    """What a result row says about the case and its messages (bytes per peer over all ranks)."""
    comm = decomposition.comm
    message_bytes = [m.nbytes for m in exchanger.layout.sends]
    all_bytes = [b for rank_bytes in comm.mpi.allgather(message_bytes) for b in rank_bytes]
    return {
        "n": case.n,
        "fields": case.fields,
        "levels": case.levels,
        "halo": case.halo,
        "proc_grid": list(decomposition.proc_grid),
        "peers_per_rank": len(message_bytes),
        "bytes_per_peer_mean": float(np.mean(all_bytes)) if all_bytes else 0.0,
        "bytes_per_peer_max": int(max(all_bytes, default=0)),
    }


def _ghex_peer(comm: Communicator, decomposition: CartesianDecomposition, fields: list[Any]) -> GhexHalo:
    """GHEX's exchange of ``fields``, checked first on copies of them to give gridcomm's result bit for bit on every
    rank (GridcommError otherwise); collective."""
    ours, theirs = [f.copy() for f in fields], [f.copy() for f in fields]
    with HaloExchanger(decomposition, ours, MpiTransport()) as exchanger:
        exchanger.exchange()
    if fields and is_device_array(fields[0]):
        sync()  # GHEX reads the copies on streams of its own
    checked = GhexHalo(decomposition, theirs)
    checked.run()
    checked.close()
    if not same_bits(comm, ours, theirs):
        raise GridcommError(
            f"GHEX's halos differ from gridcomm's for {decomposition!r}; a peer's figure is only shown for the "
            "same result (check that GHEX was built against the MPI that mpi4py loads)"
        )
    return GhexHalo(decomposition, fields)


def peer_reasons(comm: Communicator, on_device: bool = False) -> dict[str, str | None]:
    """Collective: each peer of ``bench halo`` (by label) and why it is skipped here (None: it runs), for host
    fields or (``on_device``) GPU fields."""
    from .peers import LABELS, ghex_gpu_reason, missing

    return {LABELS["ghex"]: ghex_gpu_reason(comm) if on_device else missing(comm, "ghex")}


def run_case(
    comm: Communicator, case: HaloCase, samples: int, peers: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """Time every variant, both floors and every peer that runs here (``peers``: from ``peer_reasons``) for
    ``case`` (collective, host fields), their samples interleaved; returns one result row."""
    decomposition = _decomposition(comm, case)
    fields = _fields(decomposition, case, np)
    variants = host_variants(comm)
    with contextlib.ExitStack() as bound:
        exchangers = {
            name: bound.enter_context(HaloExchanger(decomposition, fields, transport))
            for name, transport in variants.items()
        }
        first = next(iter(exchangers.values()))  # the floors move the same per-peer bytes as the exchanges
        runs = {name: exchanger.exchange for name, exchanger in exchangers.items()}
        alone = {  # a mix's groups each alone (exchanger.only), beside the mix that runs them together
            alone_label(name, reach): functools.partial(_group_alone, exchanger, reach)
            for name, exchanger in exchangers.items()
            if len(exchanger.reaches) > 1
            for reach in exchanger.reaches
        }
        runs |= alone
        runs |= {"floor": _floor(comm, first, fresh=False), "floor_fresh": _floor(comm, first, fresh=True)}
        if (peers or {}).get("GHEX", "not asked for") is None:
            ghex = _ghex_peer(comm, decomposition, fields)
            bound.callback(ghex.close)
            runs |= {"GHEX": ghex.run, "GHEX polled": ghex.run_polled}
        timings = time_interleaved(comm.mpi, runs, samples=samples)
        row = _row(case, decomposition, first)
    floor, floor_fresh = timings.pop("floor"), timings.pop("floor_fresh")
    groups = {name: timings.pop(name) for name in alone}
    peer_timings = {name: timings.pop(name) for name in [k for k in timings if k not in variants]}
    best = min(timings, key=lambda k: timings[k].median)
    return {
        **row,
        "peers": {k: t.as_dict() for k, t in peer_timings.items()},
        "peers_over_best": {k: t.median / timings[best].median for k, t in peer_timings.items()},
        "floor": floor.as_dict(),
        "floor_fresh": floor_fresh.as_dict(),
        "variants": {k: t.as_dict() for k, t in timings.items()},
        "best": best,
        "best_over_floor": timings[best].median / floor.median,
        "best_over_floor_fresh": timings[best].median / floor_fresh.median,
        "groups_alone": {k: t.as_dict() for k, t in groups.items()},
        "mixed_over_slower_group": mixed_over_slower_group(timings | groups),
    }


def _group_alone(exchanger: Any, reach: str) -> None:
    """One exchange of the peers ``exchanger`` reaches so (``only``): a mix's group timed alone."""
    with exchanger.only(reach):
        exchanger.exchange()


def cases(sizes: Sequence[int], field_counts: Sequence[int], levels: int, halo: int) -> list[HaloCase]:
    return [HaloCase(n, f, levels, halo) for f in field_counts for n in sizes]


def run_gpu_case(
    comm: Communicator,
    case: HaloCase,
    samples: int,
    transports: Mapping[str, Any],
    hbm_gbps: float,
    refused: dict[str, str] | None = None,
    libraries: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """Time each of ``transports`` (label -> transport or mapping, as gpu_variants gives them) for ``case``
    (GPU fields; graph replays too where the transport allows),
    beside NCCL's own grouped send/recv of the same per-peer bytes, the peer-copy ceiling and every peer library
    that runs here (``libraries``: from ``peer_reasons(comm, on_device=True)``; GHEX checked bit for bit first);
    and the pack and unpack launches alone, as GB/s (bytes read plus written) beside the HBM copy ``hbm_gbps``.
    A transport that refuses to bind (TransportError, on every rank together) is left out and named in
    ``refused`` with why, and not tried again in later cases given the same dict."""
    import cupy

    from .ceilings import (
        PeerBuffers,
        bind_unless_refused,
        nccl_sendrecv,
        peer_copy,
        time_exchanger,
        time_gpu,
        time_groups_alone,
    )

    decomposition = _decomposition(comm, case)
    fields = _fields(decomposition, case, cupy)
    row, peers, pack_gbps, unpack_gbps = _pack_unpack(comm, case, decomposition, fields, samples)
    timings: dict[str, Any] = {}
    refused = {} if refused is None else refused
    for name, transport in transports.items():
        exchanger = bind_unless_refused(name, refused, HaloExchanger, decomposition, fields, transport)
        if exchanger is None:
            continue
        with exchanger:
            timings.update(time_exchanger(comm, exchanger, name, samples))
            timings.update(time_groups_alone(comm, exchanger, name, samples))
    largest = row["bytes_per_peer_max"]  # over all ranks: every rank times the same ceilings
    if largest:
        timings["nccl send/recv"] = time_gpu(comm, nccl_sendrecv(comm, largest, peers), samples)
        buffers = PeerBuffers(comm, largest)
        timings["peer copy"] = time_gpu(comm, peer_copy(comm, buffers, largest, False), samples)
        buffers.close()
    if (libraries or {}).get("GHEX", "not asked for") is None:
        ghex = _ghex_peer(comm, decomposition, fields)
        timings["GHEX"] = time_gpu(comm, ghex.run, samples)
        ghex.close()
    exchanges = {
        k: t
        for k, t in timings.items()
        if k not in ("nccl send/recv", "peer copy", "GHEX") and not k.endswith(" alone")
    }
    best = min(exchanges, key=lambda k: exchanges[k].median)
    return {
        **row,
        "times": {k: t.as_dict() for k, t in timings.items()},
        "best": best,
        "best_over_nccl": exchanges[best].median / timings["nccl send/recv"].median if largest else None,
        "mixed_over_slower_group": mixed_over_slower_group(timings),
        "pack_GBps": pack_gbps,
        "unpack_GBps": unpack_gbps,
        "hbm_copy_GBps": hbm_gbps,
    }


def pack_unpack_gbps(comm: Communicator, case: HaloCase, samples: int) -> tuple[float, float]:
    """The pack and unpack launches of ``case`` alone on GPU fields [GB/s, bytes read plus written]."""
    import cupy

    decomposition = _decomposition(comm, case)
    fields = _fields(decomposition, case, cupy)
    return _pack_unpack(comm, case, decomposition, fields, samples)[2:]


def _pack_unpack(
    comm: Communicator, case: HaloCase, decomposition: CartesianDecomposition, fields: list[Any], samples: int
) -> tuple[dict[str, Any], list[int], float, float]:
    """(the case's row, its peers, pack GB/s, unpack GB/s), timed on the packer of a staged exchanger (which
    writes device message buffers), one rank at a time: the slowest rate of the ranks with bytes to move
    (0 where none has any); the field-to-field copies of the pack launch count as read and written."""
    from .ceilings import time_gpu_alone

    with HaloExchanger(decomposition, fields, "staged") as staged:
        row = _row(case, decomposition, staged)
        packed = 2 * (staged.layout.send_nbytes + staged.packer.local_nbytes)
        unpacked = 2 * staged.layout.recv_nbytes
        pack = time_gpu_alone(comm, staged.packer.pack, samples)
        unpack = time_gpu_alone(comm, staged.packer.unpack, samples)
        rates = comm.mpi.allgather((packed / pack.median / 1e9, unpacked / unpack.median / 1e9))
        pack_gbps, unpack_gbps = (min((r[k] for r in rates if r[k] > 0), default=0.0) for k in (0, 1))
        return row, [m.peer for m in staged.layout.sends], pack_gbps, unpack_gbps
