"""A model of time per step on many GPUs, built from figures measured on one, two and four (docs/scaling.md).

Inputs, read from result files of ``gridcomm bench``: each dwarf's time per step on one GPU (its kernels), the
NVLink bandwidth (the peer-copy ceiling at the largest block, every peer at once) and the latency of one exchange
over NVLink (an ipc all-to-all of 8 B replayed from a CUDA graph), both from the all-to-all run of every GPU count
measured (what one GPU gets falls as more of a node's GPUs send at once; counts beyond the largest measured take
its figures); and, stated rather than measured, the network between nodes (bandwidth and latency per GPU) and the
GPUs per node.

An exchange moves its bytes to the peers of its node over NVLink and to other nodes over the network at the
same time: it takes max(latency + bytes / bandwidth) over the two kinds of link it uses. A step is its compute
(the one-GPU kernels' time, divided among the GPUs, never below a floor of kernel launches) plus its exchanges,
with no overlap assumed (an upper bound where the dwarf overlaps them). ``compare`` puts every prediction for a
case that was measured beside the measurement.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...decomp import choose_proc_grid
from .results import bytes_text

#: GPU counts predicted (the issue asks for 16 to 1,024; 1 to 8 are measured or to be measured).
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: Seconds a replayed kernel costs at least, however little it does: the one-GPU persistent stencil step at
#: n = 64 (one block barrier per step, stencil2d-gpu-1r-20261123T215627Z) took 2.5 µs, a graph-replayed stencil
#: step (three kernels) 4.2 µs.
KERNEL_FLOOR_S = 1.5e-6
#: Kernels an MPDATA step launches on several GPUs: five compute phases, and per exchange one pack, one
#: transport and one unpack kernel.
MPDATA_KERNELS = 11
#: MPDATA's exchanges per step, as fields of `levels` values per halo node: psi, then psi1 and its gradient.
MPDATA_EXCHANGED_FIELDS = (1, 4)
#: The transposition's bytes per grid value and field level: the Fourier coefficients as float64 pairs are
#: as many bytes as the grid's float64 values (the local transposition on one GPU moves that at HBM speed).
SPECTRAL_BYTES_PER_VALUE = 8


#: The one-way protocol's latency holds while its time stays within this factor of its smallest message's.
ONE_WAY_FLAT = 1.25


@dataclass(frozen=True)
class Link:
    """NVLink as measured with ``gpus`` GPUs of one node exchanging at once (an all-to-all): the bandwidth per GPU
    and direction of every peer copy at once (GB/s), the latency of one exchange (s), and where they came from."""

    gpus: int
    GBps: float
    latency_s: float
    source: str = "stated"
    one_way_s: float | None = None  # the latency of messages of at most one_way_bytes (ipc's one-way protocol)
    one_way_bytes: int = 0

    def latency_for(self, message_bytes: float | None) -> float:
        """The latency of an exchange whose largest message is ``message_bytes`` (None: unknown, or large)."""
        small = self.one_way_s is not None and message_bytes is not None and message_bytes <= self.one_way_bytes
        return self.one_way_s if small else self.latency_s


@dataclass(frozen=True)
class Machine:
    """The links of the modelled machine (bandwidths per GPU and direction, GB/s; latencies in seconds). NVLink
    is calibrated per count of GPUs exchanging at once: a node's GPUs share the switch, so what one GPU gets
    falls as more of them send together (388 GB/s on 2 x H200, 354 GB/s out of each of 4)."""

    nvlink: tuple[Link, ...]
    network_GBps: float = 50.0  # one 400 Gb/s NIC per GPU
    network_latency_s: float = 10e-6
    gpus_per_node: int = 8

    def nvlink_at(self, gpus: int) -> Link:
        """NVLink's figures for ``gpus`` GPUs exchanging at once (a node's at most): those measured on the most
        GPUs not above that count, or on the fewest measured where every calibration has more."""
        on_node = min(gpus, self.gpus_per_node)
        ordered = sorted(self.nvlink, key=lambda link: link.gpus)
        return next((link for link in reversed(ordered) if link.gpus <= on_node), ordered[0])

    def exchange_s(
        self, on_node_bytes: float, off_node_bytes: float, gpus: int, message_bytes: float | None = None
    ) -> float:
        """One exchange moving these bytes out of one GPU, NVLink and network at once, with ``gpus`` GPUs in all
        exchanging; ``message_bytes``, the largest message to one peer where known (small ones go one way)."""
        link = self.nvlink_at(gpus)
        on = link.latency_for(message_bytes) + on_node_bytes / (link.GBps * 1e9) if on_node_bytes > 0 else 0.0
        off = self.network_latency_s + off_node_bytes / (self.network_GBps * 1e9) if off_node_bytes > 0 else 0.0
        return max(on, off)


# -- the measured inputs ---------------------------------------------------------------------------------------


#: A result file of a whole benchmark run on the GPUs: benchmark, ranks, time stamp.
RESULT_NAME = re.compile(r"(mpdata|spectral|stencil2d|alltoall)-gpu-(\d+)r-\d{8}T\d{6}Z")


def _runs(folder: Path) -> dict[tuple[str, int], list[Path]]:
    """The result files of whole runs in ``folder`` and in its reports' ``raw`` folders (``gridcomm report``) by
    (benchmark, ranks), newest first (by their time stamp); files of one variant (e.g. stencil2d-gpu-2r-ipc-...)
    are left out."""
    runs: dict[tuple[str, int], list[Path]] = {}
    files = [*folder.glob("*-gpu-*r-*.json"), *folder.glob("report-*/raw/*-gpu-*r-*.json")]
    for path in sorted(files, key=lambda p: p.stem.rsplit("-", 1)[-1], reverse=True):
        if named := RESULT_NAME.fullmatch(path.stem):
            runs.setdefault((named[1], int(named[2])), []).append(path)
    return runs


def _newest(
    runs: dict[tuple[str, int], list[Path]],
    name: str,
    ranks: int,
    accept: Any = lambda payload: True,
    device: str | None = None,
) -> tuple[str, dict] | None:
    """(name, content) of the newest run of benchmark ``name`` on ``ranks`` ranks whose content ``accept`` takes,
    on ``device`` (the machine's GPU name) where given; an all-to-all only where it ran on one node."""
    for path in runs.get((name, ranks), []):
        payload = json.loads(path.read_text())
        here = device is None or payload["machine"].get("device") == device
        if here and accept(payload) and (name != "alltoall" or _one_node(payload)):
            return path.stem, payload
    return None


def _device(runs: dict[tuple[str, int], list[Path]], asked: str | None = None) -> str | None:
    """The GPU the model is of; every input and measured point comes from it, so that a run on another (4 x H100
    beside 2 x H200) is not taken for it. ``asked``: the GPU whose name holds it (e.g. ``"H100"``), among those
    with a 2-GPU all-to-all of one node; by default the newest of those with every input of the model (a one-GPU
    stencil in graph mode, MPDATA and TCo639 besides), else the newest. ValueError where none is named so."""
    devices = []  # GPUs with a 2-GPU all-to-all of one node, newest first
    for path in runs.get(("alltoall", 2), []):
        payload = json.loads(path.read_text())
        if _one_node(payload) and (name := payload["machine"].get("device")) not in devices:
            devices.append(name)
    if asked is not None:
        named = [d for d in devices if d and asked.lower() in d.lower()]
        if not named:
            known = ", ".join(map(str, devices)) or "none"
            raise ValueError(
                f"no 2-GPU all-to-all on a GPU named {asked!r} (those with one: {known}): run gridcomm bench "
                "alltoall --np 2 on 2 such GPUs"
            )
        return named[0]
    complete = [d for d in devices if _has_every_input(runs, d)]
    return (complete or devices or [None])[0]


def _has_every_input(runs: dict[tuple[str, int], list[Path]], device: str | None) -> bool:
    return all(
        _newest(runs, name, 1, accept, device)
        for name, accept in (("stencil2d", _has_graph_mode), ("mpdata", lambda p: True), ("spectral", _is_tco639))
    )


def _is_tco639(payload: dict[str, Any]) -> bool:
    """A one-GPU spectral run the model takes: TCo639's 137 levels over at least 20 steps."""
    first = payload["results"][0]
    return first.get("steps", 0) >= 20 and first.get("levels") == 137


@dataclass
class Inputs:
    """What the model is built from, each figure with the result file it came from."""

    machine: Machine
    sources: dict[str, str]
    stencil_1gpu_s: dict[int, float]  # graph mode, per n
    mpdata_1gpu_s: dict[str, tuple[int, int, float]]  # grid -> (nodes, levels, seconds), no exchange
    spectral_1gpu: dict[str, Any] | None  # the TCo639 row (points, batch, split_s, time_per_step_s)
    measured: list[dict[str, Any]]  # multi-GPU points to compare with: (dwarf, case, gpus, seconds)
    device: str | None = None  # the GPU every input and point comes from

    def stencil_kernel_s(self) -> float:
        """One kernel's time in the one-GPU stencil step where it is all latency: half the smallest step (its two
        kernels, interior and strips)."""
        return min(self.stencil_1gpu_s.values()) / 2 if self.stencil_1gpu_s else KERNEL_FLOOR_S


def load_inputs(
    folder: str | Path, machine: Machine | None = None, device: str | None = None, **stated: float
) -> Inputs:
    """The model's inputs from the newest fitting result files in ``folder`` on one GPU (``device``: a part of its
    name; default in ``_device``); ``stated`` overrides the network (network_GBps, network_latency_s,
    gpus_per_node). NVLink is calibrated on every GPU count an all-to-all was run on (``links``). ValueError
    naming the missing benchmark."""
    runs = _runs(Path(folder))
    sources: dict[str, str] = {}
    device = _device(runs, device)

    def _newest_here(name: str, gpus: int, accept: Any = lambda payload: True) -> tuple[str, dict] | None:
        return _newest(runs, name, gpus, accept, device)

    alltoalls = {gpus: found for (name, gpus) in sorted(runs) if name == "alltoall" and gpus > 1
                 if (found := _newest_here(name, gpus, _reaches_bandwidth))}  # fmt: skip
    if machine is None:
        if 2 not in alltoalls:
            raise ValueError(f"no alltoall-gpu-2r-*.json in {folder}: run gridcomm bench alltoall --np 2 on 2 GPUs")
        machine = Machine(nvlink=tuple(_link(gpus, *found) for gpus, found in alltoalls.items()), **stated)
    for gpus, (stem, _) in alltoalls.items():
        sources[f"links, {gpus} GPUs"] = stem
    measured: list[dict[str, Any]] = []
    for gpus, (_, payload) in alltoalls.items():
        for r in payload["results"]:
            measured.append(_point("alltoall", r["bytes_per_peer"], gpus, r["times"]["ipc graph"]))
    stencil: dict[int, float] = {}
    if found := _newest_here("stencil2d", 1, _has_graph_mode):
        sources["stencil2d"] = found[0]
        stencil = {r["n"]: r["time_per_step_s"] for r in found[1]["results"] if _ipc_graph(r)}
    for gpus in sorted(g for name, g in runs if name == "stencil2d" and g > 1):
        if found := _newest_here("stencil2d", gpus, _whole_stencil_sweep):
            for r in found[1]["results"]:
                if _ipc_graph(r):
                    measured.append(_point("stencil2d", r["n"], gpus, r["time_per_step_s"]))
    mpdata: dict[str, tuple[int, int, float]] = {}
    if found := _newest_here("mpdata", 1):
        sources["mpdata"] = found[0]
        for r in found[1]["results"]:
            if r["transport"] == "none":
                mpdata[r["grid"]] = (r["nodes"], r["levels"], r["time_per_step_s"])
        measured += _mpdata_points(runs, mpdata, device, found[0])
    spectral = None
    if found := _newest_here("spectral", 1, _is_tco639):
        sources["spectral"] = found[0]
        spectral = found[1]["results"][0]
        measured += _spectral_points(runs, spectral, device)
    return Inputs(machine, sources, stencil, mpdata, spectral, measured, device)


def _one_node(payload: dict[str, Any]) -> bool:
    """Whether an all-to-all ran on one node, ipc timed (not on declared nodes, where only mixes reach every
    peer)."""
    return all("ipc graph" in r["times"] for r in payload["results"])


def _ipc_graph(row: dict[str, Any]) -> bool:
    """Whether a stencil2d row is of the graph mode over ipc (the one the model takes: its exchange is ipc's)."""
    return row["mode"] == "graph" and row.get("transport", "ipc") == "ipc"


def _has_graph_mode(payload: dict[str, Any]) -> bool:
    """Whether a stencil2d run timed the graph mode over ipc (a report also runs it over nccl: not that one)."""
    return any(_ipc_graph(r) for r in payload["results"])


def _whole_stencil_sweep(payload: dict[str, Any]) -> bool:
    """Whether a stencil2d run timed the graph mode over ipc up to n = 8192 (the bench's largest size by default):
    a run of a few small sizes (timing the eager path) would leave the larger points out of the comparison."""
    return any(_ipc_graph(r) and r["n"] >= 8192 for r in payload["results"])


#: The least largest block per peer of an all-to-all run the links are taken from: its peer copy runs at the links'
#: rate there (a run of small blocks only, timing latency, gives no bandwidth).
BANDWIDTH_BLOCK_BYTES = 32 << 20


def _reaches_bandwidth(payload: dict[str, Any]) -> bool:
    """Whether an all-to-all run went up to blocks large enough to give the links' bandwidth."""
    return bool(payload["results"]) and payload["results"][-1]["bytes_per_peer"] >= BANDWIDTH_BLOCK_BYTES


def _link(gpus: int, stem: str, payload: dict[str, Any]) -> Link:
    """NVLink on ``gpus`` GPUs from an all-to-all run: the bandwidth of the peer-copy ceiling (every peer at once)
    at the largest block, bytes out of each GPU per second, and the latency of an ipc all-to-all of the smallest
    block replayed from a CUDA graph: of the two-trip kernel ("ipc/two-way graph", where the run has it) and of the
    one-way protocol ("ipc graph"), which holds up to the largest block it took under 0.9 times the two-trip's and
    within ONE_WAY_FLAT times its smallest block's: beyond, its one block per peer copies at a rate of its own
    (4 x H100: 6.1 µs up to 8 KiB, 10.2 at 32 KiB against 11.9 for two trips), which the two-trip latency and the
    link's bandwidth fit better."""
    rows = sorted(payload["results"], key=lambda r: r["bytes_per_peer"])
    largest = rows[-1]
    ceiling = largest["times"].get("peer copy kernel") or largest["times"]["peer copy"]
    out_of_each_gpu = largest["bytes_per_peer"] * (gpus - 1) / ceiling["median_s"] / 1e9
    ipc = rows[0]["times"]["ipc graph"]["median_s"]
    if "ipc/two-way graph" not in rows[0]["times"]:  # before the one-way protocol: one latency
        return Link(gpus, out_of_each_gpu, ipc, stem)
    one_way_bytes = 0
    for r in rows:
        one_way = r["times"]["ipc graph"]["median_s"]
        if one_way >= 0.9 * r["times"]["ipc/two-way graph"]["median_s"] or one_way > ONE_WAY_FLAT * ipc:
            break
        one_way_bytes = r["bytes_per_peer"]
    two_way = rows[0]["times"]["ipc/two-way graph"]["median_s"]
    return Link(gpus, out_of_each_gpu, two_way, stem, ipc, one_way_bytes)


def _spectral_points(
    runs: dict[tuple[str, int], list[Path]], one_gpu: dict[str, Any], device: str | None
) -> list[dict[str, Any]]:
    """The fastest step measured on each GPU count for the one-GPU input's grid, levels and batch, each
    transport's run without a pipeline (the model counts the transpositions whole), from the newest run on
    ``device`` that has one."""

    def steps(payload: dict[str, Any]) -> list[float]:
        same = (one_gpu["grid"], one_gpu["levels"], one_gpu["batch"])
        return [r["time_per_step_s"] for r in payload["results"]
                if (r["grid"], r.get("levels"), r.get("batch")) == same and (r.get("pipeline") or 1) == 1]  # fmt: skip

    points = []
    for gpus in sorted(g for name, g in runs if name == "spectral" and g > 1):
        if found := _newest(runs, "spectral", gpus, lambda payload: bool(steps(payload)), device):
            points.append(_point("spectral", one_gpu["truncation"], gpus, min(steps(found[1]))))
    return points


#: The MPDATA transports the model's exchange stands for: over NVLink, from GPU memory.
MPDATA_GPU_TRANSPORTS = ("ipc", "nccl", "nvshmem", "mpi")


#: A multi-GPU MPDATA run older than the one-GPU input by more than this ran other kernels (a session before):
#: the kernels changed between sessions, and a strong-scaling point needs the same kernels at both ends.
MPDATA_SESSION_S = 3600.0


def _stamp(stem: str) -> float:
    """The time stamp ending a result file's name (…-20261126T190119Z), seconds since the epoch."""
    return datetime.strptime(stem.rsplit("-", 1)[-1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


def _mpdata_points(
    runs: dict[tuple[str, int], list[Path]],
    one_gpu: dict[str, tuple[int, int, float]],
    device: str | None,
    one_gpu_stem: str,
) -> list[dict[str, Any]]:
    """The fastest step over NVLink (MPDATA_GPU_TRANSPORTS) measured on each GPU count for each grid and level
    count of the one-GPU input (from the run ``one_gpu_stem``), from the newest run on ``device`` that has one
    and is of the same session (MPDATA_SESSION_S); size: the grid's nodes."""
    since = _stamp(one_gpu_stem) - MPDATA_SESSION_S

    def steps(payload: dict[str, Any], case: tuple[str, int]) -> list[float]:
        return [r["time_per_step_s"] for r in payload["results"]
                if (r["grid"], r["levels"]) == case and r["transport"] in MPDATA_GPU_TRANSPORTS]  # fmt: skip

    points = []
    for gpus in sorted(g for name, g in runs if name == "mpdata" and g > 1):
        for grid, (nodes, levels, _) in one_gpu.items():
            case = (grid, levels)
            found = _newest(runs, "mpdata", gpus, lambda payload, case=case: bool(steps(payload, case)), device)
            if found and _stamp(found[0]) >= since:
                point = _point("mpdata", nodes, gpus, min(steps(found[1], case)))
                points.append({**point, "grid": grid, "levels": levels})
    return points


def _point(dwarf: str, size: int, gpus: int, seconds: Any) -> dict[str, Any]:
    """A measured point: the dwarf, its size (bytes per peer, n, or the spectral truncation), GPUs and seconds
    (a timing's median)."""
    measured = seconds["median_s"] if isinstance(seconds, dict) else seconds
    return {"dwarf": dwarf, "size": int(size), "gpus": gpus, "measured_s": measured}


# -- the dwarfs ------------------------------------------------------------------------------------------------


def alltoall_s(m: Machine, gpus: int, bytes_per_peer: float) -> float:
    """One all-to-all of ``bytes_per_peer`` to every other GPU."""
    if gpus == 1:
        return 0.0
    node = min(gpus, m.gpus_per_node)
    return m.exchange_s((node - 1) * bytes_per_peer, (gpus - node) * bytes_per_peer, gpus, bytes_per_peer)


def stencil2d_s(
    m: Machine, gpus: int, n: int, one_gpu_s: float, kernel_s: float = KERNEL_FLOOR_S, itemsize: int = 8
) -> float:
    """A step of n x n points per GPU (weak scaling) on the process grid gridcomm picks, ranks filling nodes in
    order, as the graph-replayed step runs it: each rank's exchange beside its interior update (the one-GPU step),
    then its boundary strips, one kernel per side that has a neighbour, one after another. The first strip ends
    ``kernel_s`` (one kernel's time where a step is all latency) after the exchange has landed, a launch that
    waits for it, or KERNEL_FLOOR_S after the interior update, queued behind it, whichever is later; each further
    strip follows at KERNEL_FLOOR_S. A strip takes at least its points' share of the one-GPU step. The slowest
    rank's, at least the one-GPU step."""
    if gpus == 1:
        return one_gpu_s
    side = n * gpus
    px, py = (int(v) for v in choose_proc_grid(gpus, (side, side), ((1, 1), (1, 1)), (False, False)))
    worst = 0.0
    for rank in range(gpus):
        i, j = divmod(rank, py)
        on = off = 0
        for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            if 0 <= i + di < px and 0 <= j + dj < py:
                peer = (i + di) * py + (j + dj)
                if peer // m.gpus_per_node == rank // m.gpus_per_node:
                    on += n * itemsize
                else:
                    off += n * itemsize
        strips = (on + off) // (n * itemsize)
        if strips:
            share = one_gpu_s / n  # a strip's points' share of the one-GPU step
            first = max(m.exchange_s(on, off, gpus, n * itemsize) + max(kernel_s, share),
                        one_gpu_s + max(KERNEL_FLOOR_S, share))  # fmt: skip
            worst = max(worst, first + (strips - 1) * max(KERNEL_FLOOR_S, share))
    return max(one_gpu_s, worst)


def halo_coefficient(grid: str = "O96", parts: int = 16, layers: int = 2) -> float:
    """Halo nodes of ``layers`` layers per square root of owned nodes, median over the parts of an equal-regions
    partition of ``grid`` (a part's halo grows with its perimeter)."""
    from statistics import median

    from ...grids.mesh import MedianDualMesh
    from ...grids.octahedral import OctahedralGrid
    from ...grids.partition import equal_regions, partition_report

    octahedral = OctahedralGrid(grid)
    mesh = MedianDualMesh(octahedral)
    report = partition_report(mesh, equal_regions(octahedral, parts), layers)
    return float(median(p["halo"][-1] / math.sqrt(p["owned"]) for p in report))


def mpdata_s(m: Machine, gpus: int, nodes: int, levels: int, one_gpu_s: float, halo_per_sqrt: float) -> float:
    """A step of MPDATA on ``nodes`` x ``levels`` split over the GPUs (strong scaling): the kernels' share, never
    below MPDATA_KERNELS launches, plus two exchanges of the two-layer halo (half of it off the node once there
    are several nodes: a part's neighbours in its own latitude band share its node, those across bands do not)."""
    if gpus == 1:
        return one_gpu_s
    compute = max(one_gpu_s / gpus, MPDATA_KERNELS * KERNEL_FLOOR_S)
    halo_nodes = halo_per_sqrt * math.sqrt(nodes / gpus)
    off_share = 0.5 if gpus > m.gpus_per_node else 0.0
    exchanges = 0.0
    for fields in MPDATA_EXCHANGED_FIELDS:
        nbytes = halo_nodes * levels * 8 * fields
        exchanges += m.exchange_s(nbytes * (1 - off_share), nbytes * off_share, gpus)
    return compute + exchanges


def spectral_s(m: Machine, gpus: int, row: dict[str, Any]) -> float:
    """A step of the spectral transform (one inverse, one direct: two transpositions) over the GPUs: FFT and
    Legendre divided among them, each transposition an all-to-all of the Fourier data plus the local copy of the
    block a GPU keeps, at the HBM copy bandwidth measured beside the one-GPU run (``hbm_GBps``)."""
    split = row["split_s"]
    compute = (split["legendre"] + split["fft"]) / gpus
    if gpus == 1:
        return compute + split["transposition"]  # none on one GPU now; a local copy in runs before 2026-11-24
    data = row["points"] * row["batch"] * SPECTRAL_BYTES_PER_VALUE  # one transposition, all GPUs together
    per_peer = data / gpus**2
    local = 2 * 2 * per_peer / (row["hbm_GBps"] * 1e9)  # the kept block, read and written, in each transposition
    return compute + local + 2 * alltoall_s(m, gpus, per_peer)


# -- predictions and comparisons -------------------------------------------------------------------------------

#: Block sizes per peer of the all-to-all predictions, bytes.
ALLTOALL_SIZES = (8, 1 << 20, 32 << 20)


def case_name(dwarf: str, size: int | str, batch: int | None = None) -> str:
    """How a case is named in predictions and tables: bytes per peer for the all-to-all, the truncation and batch
    for the spectral transform, the grid and levels for MPDATA (``size``: the grid, ``batch``: the levels), else
    n."""
    if dwarf == "mpdata":
        return f"{size} x {batch}"
    if dwarf == "alltoall":
        return f"{bytes_text(size)} per peer"
    return f"TCo{size} (batch {batch})" if dwarf == "spectral" else f"n = {size}"


def predict(inputs: Inputs, gpu_counts: Sequence[int] = GPU_COUNTS, halo_per_sqrt: float | None = None) -> dict:
    """Predicted seconds per step (per exchange for the all-to-all) for every dwarf and case, per GPU count."""
    m = inputs.machine
    out: dict[str, dict[str, dict[int, float]]] = {"alltoall": {}, "stencil2d": {}, "mpdata": {}, "spectral": {}}
    for nbytes in ALLTOALL_SIZES:
        out["alltoall"][case_name("alltoall", nbytes)] = {p: alltoall_s(m, p, nbytes) for p in gpu_counts}
    kernel_s = inputs.stencil_kernel_s()
    for n, t in sorted(inputs.stencil_1gpu_s.items()):
        out["stencil2d"][case_name("stencil2d", n)] = {p: stencil2d_s(m, p, n, t, kernel_s) for p in gpu_counts}
    if inputs.mpdata_1gpu_s:
        halo = halo_per_sqrt if halo_per_sqrt is not None else halo_coefficient()
        for grid, (nodes, levels, t) in sorted(inputs.mpdata_1gpu_s.items(), key=lambda kv: kv[1][0]):
            curve = {p: mpdata_s(m, p, nodes, levels, t, halo) for p in gpu_counts}
            out["mpdata"][case_name("mpdata", grid, levels)] = curve
    if inputs.spectral_1gpu is not None:
        row = inputs.spectral_1gpu
        out["spectral"][case_name("spectral", row["truncation"], row["batch"])] = {
            p: spectral_s(m, p, row) for p in gpu_counts
        }
    return out


def compare(inputs: Inputs, halo_per_sqrt: float | None = None) -> list[dict[str, Any]]:
    """Every measured multi-GPU point beside the model's prediction for it (ratio = predicted / measured), with
    the case named as in ``predict`` (``halo_per_sqrt`` as there)."""
    m, rows = inputs.machine, []
    for point in inputs.measured:
        size, batch = point["size"], None
        if point["dwarf"] == "mpdata" and point["grid"] in inputs.mpdata_1gpu_s:
            if halo_per_sqrt is None:
                halo_per_sqrt = halo_coefficient()
            nodes, levels, t = inputs.mpdata_1gpu_s[point["grid"]]
            predicted = mpdata_s(m, point["gpus"], nodes, levels, t, halo_per_sqrt)
            size, batch = point["grid"], levels
        elif point["dwarf"] == "alltoall":
            predicted = alltoall_s(m, point["gpus"], point["size"])
        elif point["dwarf"] == "spectral" and inputs.spectral_1gpu is not None:
            batch = inputs.spectral_1gpu["batch"]
            predicted = spectral_s(m, point["gpus"], inputs.spectral_1gpu)
        elif point["dwarf"] == "stencil2d" and point["size"] in inputs.stencil_1gpu_s:
            one_gpu_s = inputs.stencil_1gpu_s[point["size"]]
            predicted = stencil2d_s(m, point["gpus"], point["size"], one_gpu_s, inputs.stencil_kernel_s())
        else:
            continue
        case = case_name(point["dwarf"], size, batch)
        rows.append({**point, "case": case, "predicted_s": predicted, "ratio": predicted / point["measured_s"]})
    return rows


def model_config(inputs: Inputs, comparisons: list[dict[str, Any]], halo_per_sqrt: float) -> dict[str, Any]:
    """The ``config`` record of a model's results file: the machine model, its sources, the comparisons."""
    return {
        "machine_model": asdict(inputs.machine),
        "kernel_floor_s": KERNEL_FLOOR_S,
        "mpdata_halo_nodes_per_sqrt_owned": halo_per_sqrt,
        "sources": inputs.sources,
        "device": inputs.device,
        "comparisons": comparisons,
    }


def targets(predictions: dict) -> list[list[str]]:
    """The scaling issue's targets as the model predicts them: [what, predicted figure and target]."""
    out = []
    mpdata = list(predictions.get("mpdata", {}).items())  # smallest grid first: the largest is the target's
    for case, curve in mpdata[-1:]:
        if 8 in curve:
            out.append([f"MPDATA {case}, 1 to 8 GPUs", f"{curve[1] / (8 * curve[8]):.1%} efficiency (target 80 %)"])
    for case, curve in predictions.get("spectral", {}).items():
        if 2 in curve and 8 in curve:
            out.append([f"{case}, 2 to 8 GPUs", f"{curve[2] / curve[8]:.2f}x (target 3.6x; the seed 3.2x for 4 to 16)"])
    sizes = {case_name("alltoall", size): size for size in ALLTOALL_SIZES}
    for case, curve in predictions.get("alltoall", {}).items():
        size = sizes[case]
        for p in (4, 8):
            if size >= 1 << 20 and p in curve:
                busbw = size * (p - 1) / curve[p] / 1e9
                out.append([f"all-to-all {case} on {p} GPUs", f"{busbw:.0f} GB/s busbw (ipc; target 1.2x NCCL's)"])
    return out


def measured_curves(folder: str | Path, device: str | None = None) -> dict[str, dict[str, dict[int, float]]]:
    """Strong and weak scaling as measured: for every dwarf and transport (or mode), seconds per step against
    GPUs, from the newest GPU result file per GPU count in ``folder`` on the model's GPU (``_device``): MPDATA's
    largest grid and the spectral transform's largest case (strong), stencil2d's graph and persistent modes at
    n = 64, 1024 and 8192 (weak, from the run with the graph mode over ipc), the all-to-all at the largest block
    every GPU count ran. ``device`` as for ``load_inputs``."""
    runs = _runs(Path(folder))
    device = _device(runs, device)

    def accept(name: str) -> Any:  # a report runs the stencil over several transports: the ipc graph run
        def whole_alltoall(payload: dict[str, Any]) -> bool:  # of one node, up to the links' rate
            return _one_node(payload) and _reaches_bandwidth(payload)

        return {"stencil2d": _has_graph_mode, "alltoall": whole_alltoall}.get(name, lambda payload: True)

    newest = {key: found[1] for key in runs if (found := _newest(runs, *key, accept(key[0]), device))}
    curves: dict[str, dict[str, dict[int, float]]] = {"alltoall": {}, "stencil2d": {}, "mpdata": {}, "spectral": {}}
    common = min((max(r["bytes_per_peer"] for r in p["results"]) for (n, _), p in newest.items() if n == "alltoall"),
                 default=0)  # fmt: skip
    for (name, gpus), payload in sorted(newest.items()):
        rows = payload["results"]
        if name == "mpdata":
            largest = max(rows, key=lambda r: r["nodes"])["grid"]
            for r in rows:
                if r["grid"] == largest and r["transport"] != "host":
                    curves["mpdata"].setdefault(f"{largest}, {r['transport']}", {})[gpus] = r["time_per_step_s"]
        elif name == "spectral":
            r = max(rows, key=lambda r: (r["points"], r.get("batch", 0)))
            curves["spectral"].setdefault(f"{r['grid']} batch {r.get('batch')}, {r['transport']}", {})[gpus] = r[
                "time_per_step_s"
            ]
        elif name == "stencil2d":
            for r in rows:
                if r["n"] in (64, 1024, 8192) and r["mode"] in ("graph", "persistent"):
                    label = f"n = {r['n']}, {r['mode']} ({r['transport']})"
                    curves["stencil2d"].setdefault(label, {})[gpus] = r["time_per_step_s"]
        else:  # the largest block every GPU count ran (a quick report's all-to-all stops at 32 MiB)
            r = max((r for r in rows if r["bytes_per_peer"] <= common), key=lambda r: r["bytes_per_peer"])
            for transport, timing in r["times"].items():
                curves["alltoall"].setdefault(f"{bytes_text(r['bytes_per_peer'])}, {transport}", {})[gpus] = timing[
                    "median_s"
                ]
    return curves


def plot_scaling(
    predictions: dict, comparisons: list[dict[str, Any]], png: str | Path, measured: dict | None = None
) -> Path:
    """Predicted time per step against GPUs (top row of panels: one per dwarf, ideal strong scaling dashed for
    MPDATA and the spectral transform, the measured points compared as dots) and, below, every dwarf and
    transport as measured at each GPU count with its ideal line (strong: the fewest GPUs' time shared out;
    weak: flat). Returns the PNG's path."""
    from ...extras import figure

    fig = figure(figsize=(18, 9))
    grid = fig.subplots(2, 4)
    axes = grid[0]
    for ax, (dwarf, curves) in zip(grid[1], (measured or {}).items(), strict=False):
        for k, (label, curve) in enumerate(curves.items()):
            gpus = sorted(curve)
            line = ax.loglog(gpus, [curve[p] * 1e6 for p in gpus], "o-", label=label, color=f"C{k % 10}")[0]
            if len(gpus) > 1:
                first = gpus[0]
                ideal = [curve[first] * (1 if dwarf == "stencil2d" else first / p) for p in gpus]
                ax.loglog(gpus, [t * 1e6 for t in ideal], ":", color=line.get_color(), alpha=0.6)
        ax.set_title(f"{dwarf} as measured (ideal dotted)", fontsize=9)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("µs")
        ax.grid(True, which="both", alpha=0.3)
        if curves:
            ax.legend(fontsize=5)
    titles = {"alltoall": "all-to-all (per exchange)", "stencil2d": "stencil2d, n x n per GPU (weak)",
              "mpdata": "MPDATA (strong)", "spectral": "spectral transform (strong)"}  # fmt: skip
    for ax, (dwarf, cases) in zip(axes, predictions.items(), strict=False):
        for k, (case, curve) in enumerate(cases.items()):
            gpus = sorted(p for p in curve if curve[p] > 0)  # a log axis: no all-to-all on one GPU
            line = ax.loglog(gpus, [curve[p] * 1e6 for p in gpus], "-", label=case, color=f"C{k}")[0]
            if dwarf in ("mpdata", "spectral"):
                ax.loglog(gpus, [curve[1] / p * 1e6 for p in gpus], "--", color=line.get_color(), alpha=0.5)
            seen = [c for c in comparisons if c["dwarf"] == dwarf and c["case"] == case]
            if seen:
                ax.loglog([c["gpus"] for c in seen], [c["measured_s"] * 1e6 for c in seen], "o", color=line.get_color())
        ax.set_title(titles.get(dwarf, dwarf), fontsize=9)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("µs")
        ax.grid(True, which="both", alpha=0.3)
        if cases:
            ax.legend(fontsize=6)
    fig.suptitle("model: lines; measured: dots; ideal strong scaling: dashed", fontsize=9)
    fig.tight_layout()
    path = Path(png)
    fig.savefig(path, dpi=100)
    return path
