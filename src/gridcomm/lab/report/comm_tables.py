"""The communication benchmarks' result files as tables of figures: ``bench halo`` (CPU and GPU) and ``bench
p2p`` / ``bench alltoall``. Each figure stands beside its ceiling and its peers measured in the same run."""

from __future__ import annotations

from ..bench.results import bytes_text
from .figures import Cell, Column, FigureTable, cell, ratio, union
from .folder import Result

US = 1e6  # seconds -> µs
MIB = 1 << 20

#: Figures the GPU benchmarks time beside gridcomm's transports, and what they are to them.
ROLES = {
    "nccl send/recv": "peer",  # NCCL's own grouped send/recv of the same bytes
    "torch all_to_all": "peer",  # torch.distributed's all_to_all_single over NCCL, the same bytes
    "GHEX": "peer",  # GHEX's halo exchange of the same GPU fields (bench halo --gpu, where GHEX runs on the GPU)
    "mpi4jax alltoall": "peer",  # mpi4jax's alltoall of JAX arrays over MPI (through the host without CUDA-aware MPI)
    "peer copy": "ceiling",  # a copy kernel writing straight into the peer's memory
    "peer copy kernel": "ceiling",
    "peer copy engine": "ceiling",
}
ROLE_NOTE = (
    "peer: nccl send/recv is NCCL's own grouped send/recv of the same bytes from contiguous buffers, torch "
    "all_to_all torch.distributed's all_to_all_single (NCCL) of them, mpi4jax alltoall mpi4jax's alltoall of JAX "
    "arrays over MPI; ceiling: peer copy is a copy straight into every peer GPU's memory at once (one kernel "
    "over all peers, or the copy engines on a stream per peer); "
    "a transport's own column is exchange() called from Python (a launch of the exchanger's own CUDA graph with "
    "ipc and nvshmem), 'enqueued' the same with each part enqueued from Python (GRIDCOMM_REPLAY=0), "
    "'graph' the exchange captured once and its graph launched in a loop; mpi appears where MPI is CUDA-aware."
)


def labelled(name: str) -> str:
    """A GPU figure's column name: the transport's own, or "peer: ..." / "ceiling: ..."."""
    role = ROLES.get(name)
    return f"{role}: {name}" if role else name


def _kib(r: dict) -> Cell:
    return Cell(r["bytes_per_peer_mean"] / 1024)


def _peer_columns(rows: list[dict]) -> tuple[list[str], list[Column]]:
    """The library peers of a host benchmark's rows (GHEX, mpi4py-fft, a hand-written pack + Alltoallv) and
    their columns: each one's time, and the fastest one's over gridcomm's best (above 1: gridcomm is faster)."""
    peers = union(rows, "peers")
    columns = [Column(f"peer: {p}", "µs") for p in peers]
    return peers, [*columns, Column("fastest peer / best", "x")] if peers else []


def _peer_cells(r: dict, peers: list[str]) -> dict[str, Cell]:
    cells = {f"peer: {p}": cell(r["peers"][p]["median_s"], US) for p in peers if p in r.get("peers", {})}
    over = r.get("peers_over_best") or {}
    return cells | ({"fastest peer / best": cell(min(over.values()))} if over else {})


def _skipped_peers(result: Result) -> list[str]:
    """One note per peer the run skipped, with why (not installed, cannot load)."""
    return [f"{why}." for why in (result.config.get("peers") or {}).values() if why]


def halo_cpu(result: Result) -> list[FigureTable]:
    """Time per exchange for every MPI variant beside the floors (bare Isend/Irecv of the same bytes) and the
    library peers that ran (GHEX)."""
    rows = result.rows
    variants = union(rows, "variants")
    peers, peer_columns = _peer_columns(rows)
    columns = [
        Column("KiB/peer", compared=False),
        *(Column(v, "µs") for v in variants),
        Column("floor: Isend/Irecv", "µs"),
        Column("floor, buffers rewritten", "µs"),
        Column("best", compared=False),
        Column("best / floor", "x"),
        Column("best / floor rewritten", "x"),
        *peer_columns,
    ]
    table = FigureTable(f"time per halo exchange, {result.where} (median, slowest rank)", ["n x n", "fields"], columns)
    for r in rows:
        cells = {v: cell(r["variants"][v]["median_s"], US) for v in variants if v in r["variants"]}
        cells |= {
            "KiB/peer": _kib(r),
            "floor: Isend/Irecv": cell(r["floor"]["median_s"], US),
            "floor, buffers rewritten": cell(r["floor_fresh"]["median_s"], US),
            "best": Cell(text=r["best"]),
            "best / floor": cell(r["best_over_floor"]),
            "best / floor rewritten": cell(r["best_over_floor_fresh"]),
        }
        table.add((r["n"], r["fields"]), cells | _peer_cells(r, peers))
    table.notes.append(
        "floor: bare mpi4py Isend/Irecv of the same per-peer bytes from contiguous buffers never written; "
        "'buffers rewritten': the same with each send buffer rewritten first, as after a compute step; "
        "peer: another library's exchange of the same fields, checked equal bit for bit first."
    )
    table.notes += _skipped_peers(result)
    return [table]


def transpose(result: Result) -> list[FigureTable]:
    """Time per slab redistribution of an N³ array for every gridcomm variant beside the hand-written pack +
    Alltoallv and mpi4py-fft (where it ran)."""
    rows = result.rows
    variants = union(rows, "variants")
    peers, peer_columns = _peer_columns(rows)
    columns = [Column("MiB/rank", compared=False), *(Column(v, "µs") for v in variants),
               Column("best", compared=False), *peer_columns]  # fmt: skip
    title = f"time per slab redistribution (axis 0 -> axis 1), {result.where} (median, slowest rank)"
    table = FigureTable(title, ["N", "dtype"], columns)
    for r in rows:
        cells = {v: cell(r["variants"][v]["median_s"], US) for v in variants if v in r["variants"]}
        cells |= {"MiB/rank": Cell(r["bytes_per_rank_max"] / MIB), "best": Cell(text=r["best"])}
        table.add((r["n"], r["dtype"]), cells | _peer_cells(r, peers))
    table.notes.append(
        "each result checked equal bit for bit to gridcomm's before timing; the figures of a case sampled in turn."
    )
    table.notes += _skipped_peers(result)
    return [table]


def halo_gpu(result: Result) -> list[FigureTable]:
    """Time per exchange for every GPU transport beside NCCL and the peer copy; pack and unpack beside HBM."""
    rows = result.rows
    names = union(rows, "times")
    columns = [
        Column("KiB/peer", compared=False),
        *(Column(labelled(n), "µs") for n in names),
        Column("best", compared=False),
        Column("best / nccl send/recv", "x"),
        Column("pack", "GB/s"),
        Column("unpack", "GB/s"),
        Column("ceiling: HBM copy", "GB/s"),
        Column("pack / HBM", "%"),
    ]
    table = FigureTable(f"time per halo exchange on GPUs, {result.where} (median, slowest rank)",
                        ["n x n", "fields"], columns)  # fmt: skip
    for r in rows:
        cells = {labelled(n): cell(t["median_s"], US) for n, t in r["times"].items()}
        cells |= {
            "KiB/peer": _kib(r),
            "best": Cell(text=r["best"]),
            "best / nccl send/recv": cell(r["best_over_nccl"]),
            "pack": cell(r["pack_GBps"]),
            "unpack": cell(r["unpack_GBps"]),
            "ceiling: HBM copy": cell(r["hbm_copy_GBps"]),
            "pack / HBM": ratio(r["pack_GBps"], r["hbm_copy_GBps"], 100),
        }
        table.add((r["n"], r["fields"]), cells)
    table.notes.append(ROLE_NOTE + " pack and unpack: the packing launches alone, bytes read plus written.")
    return [table]


def transfer(result: Result) -> list[FigureTable]:
    """bench p2p / alltoall: time per exchange below 1 MiB per peer, GB/s sent per rank from 1 MiB, per transport
    beside NCCL and the peer-copy ceiling."""
    rows = result.rows
    names = union(rows, "times")
    kind = f"{result.benchmark} on {result.where}"
    latency = FigureTable(f"{kind}: time per exchange (median, slowest rank)", ["per peer"],
                          [Column(labelled(n), "µs") for n in names], kind="latency")  # fmt: skip
    gbps = FigureTable(
        f"{kind}: bandwidth, bytes sent per rank per second",
        ["per peer"],
        [*(Column(labelled(n), "GB/s") for n in names), Column("ceiling", "GB/s"), Column("best / ceiling", "%")],
        kind="bandwidth",
    )
    for r in rows:
        key = (bytes_text(r["bytes_per_peer"]),)
        if r["bytes_per_peer"] < MIB:
            latency.add(key, {labelled(n): cell(t["median_s"], US) for n, t in r["times"].items()})
            continue
        ours = [v for n, v in r["GBps"].items() if n not in ROLES]
        cells = {labelled(n): cell(v) for n, v in r["GBps"].items()}
        cells |= {
            "ceiling": cell(r["ceiling_GBps"]),
            "best / ceiling": ratio(max(ours, default=None), r["ceiling_GBps"], 100),
        }
        gbps.add(key, cells)
    for t in (latency, gbps):
        t.notes.append(ROLE_NOTE + " ceiling: the faster peer copy of the same bytes.")
    return [t for t in (latency, gbps) if t.rows]
