"""``gridcomm bench soak``: a long run of halo exchanges of one 3-D field, checked bit for bit along the way, with
time per exchange and memory recorded, to show that nothing drifts: results, memory, speed.

Each step every rank writes its interior as a function of global index and step, then exchanges the halos
(periodic in every dimension, box stencil: faces, edges, corners, and the wrap onto itself where a dimension is
not split). Every ``check_every`` steps each rank compares its whole local array, halos included, with the serial
reference, the same function evaluated at the global index each local point stands for (``SoakField``); and
each block of ``check_every`` steps records the time per exchange (median and largest; each step's slowest rank),
every rank's resident memory and, on the GPU, its device memory, and the machine's load average.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...comm import Communicator
from ...decomp import CartesianDecomposition
from ...exchange import HaloExchanger
from .results import write_results

WARMUP_STEPS = 20  # exchanges before the first timed one (connections, first touch, caches)


@dataclass(frozen=True)
class SoakConfig:
    """One soak run: a float64 field of global ``shape`` with ``halo`` ghost points per side, ``steps``
    exchanges over ``transport``, checked (and recorded) every ``check_every`` steps; on the GPU if ``gpu``."""

    shape: tuple[int, int, int] = (64, 64, 32)
    halo: int = 2
    transport: str = "auto"
    steps: int = 100_000
    check_every: int = 1000
    gpu: bool = False

    def __post_init__(self) -> None:
        if len(self.shape) != 3 or min(self.shape) < 1:
            raise ValueError(f"shape {self.shape}: give 3 dimensions of at least 1 point")
        if self.halo < 1 or self.steps < 1 or self.check_every < 1:
            raise ValueError(f"halo {self.halo}, steps {self.steps}, check_every {self.check_every}: must be >= 1")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shape": list(self.shape), "dtype": "float64", "warmup_steps": WARMUP_STEPS}


def resident_bytes() -> int:
    """This process's resident memory [bytes] (/proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def device_memory_bytes() -> tuple[int, int]:
    """(bytes CuPy's memory pool holds in use, bytes in use on this rank's GPU by every process [cudaMemGetInfo])."""
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    return cupy.get_default_memory_pool().used_bytes(), total - free


def base_values(index: tuple[np.ndarray, ...]) -> np.ndarray:
    """The field's spatial part at global ``index`` (broadcastable int64 arrays): a hash of the index, an
    integer in [0, 2**32) as float64, so that a halo taken from a wrong point (or step) is seen."""
    i, j, k = (np.asarray(a, dtype=np.uint64) for a in index)
    mixed = (i * np.uint64(73856093)) ^ (j * np.uint64(19349663)) ^ (k * np.uint64(83492791))
    return (mixed & np.uint64(0xFFFFFFFF)).astype(np.float64)


def step_offset(step: int) -> float:
    """The field's time part: an integer in [0, 2**20) (base + offset stays an exact float64)."""
    return float((step * 2654435761) % (1 << 20))


class SoakField:
    """One rank's field (``xp`` array, halo included) and its serial reference.

    The value at global point g after step s is ``base_values(g) + step_offset(s)``. ``reference`` holds
    base_values at the global point each local point stands for (halo points wrapped around the periodic grid),
    computed on the host with NumPy from the global index alone, independently of any exchange.
    """

    def __init__(self, decomposition: CartesianDecomposition, xp: Any) -> None:
        self.xp = xp
        d = decomposition
        wrapped = [
            np.arange(s.start - lo, s.start - lo + n) % size
            for s, (lo, _), n, size in zip(d.global_slices, d.halo, d.local_shape, d.global_shape, strict=True)
        ]
        self.reference = xp.asarray(base_values(np.ix_(*wrapped)))
        self.interior = d.interior_slices
        self.interior_base = xp.ascontiguousarray(self.reference[self.interior])
        self.field = xp.zeros(d.local_shape, dtype=np.float64)

    def update(self, step: int) -> None:
        """Write the interior of step ``step``."""
        self.xp.add(self.interior_base, step_offset(step), out=self.field[self.interior])

    def mismatches(self, step: int) -> int:
        """Points of the whole local array whose bits differ from the reference after step ``step``."""
        expected = self.reference + step_offset(step)
        return int((self.field.view(np.uint64) != expected.view(np.uint64)).sum())


def _synchronizer(xp: Any) -> Callable[[], None]:
    """Waits for the current stream on the GPU (where work is asynchronous); nothing on the host."""
    if xp is np:
        return lambda: None
    return lambda: xp.cuda.get_current_stream().synchronize()


def _time_steps(field: SoakField, exchanger: HaloExchanger, first: int, seconds: np.ndarray, sync: Callable) -> None:
    """Run steps ``first`` .. ``first + len(seconds) - 1``, writing the seconds of each exchange on this rank into
    ``seconds`` (the update before it is finished first; the exchange's GPU work is included)."""
    for k in range(len(seconds)):
        field.update(first + k)
        sync()
        start = time.perf_counter()
        exchanger.exchange()
        sync()
        seconds[k] = time.perf_counter() - start


class BlockLog:
    """The figures of every block of steps, in arrays made once: the soak must not grow its own memory while it
    measures the library's. Collective ``add``, per block; ``records()`` turns them into result rows at the end."""

    def __init__(self, comm: Communicator, blocks: int, block_steps: int, gpu: bool) -> None:
        self.comm, self.gpu, self.count = comm, gpu, 0
        self.seconds = np.empty(block_steps)  # this rank's seconds per exchange in the current block
        self._slowest = np.empty(block_steps)
        self.step, self.exchanges, self.mismatched = (np.zeros(blocks, dtype=np.int64) for _ in range(3))
        self.median_us, self.max_us, self.mean_us, self.load_average = (np.zeros(blocks) for _ in range(4))
        memories = ["resident_MiB", "gpu_pool_MiB", "gpu_used_MiB"] if gpu else ["resident_MiB"]
        self.memory = {key: np.zeros((blocks, comm.size)) for key in memories}
        self._mine = np.zeros(len(memories))
        self._everyone = np.zeros((comm.size, len(memories)))
        self._counts = np.zeros(2, dtype=np.int64)

    def add(self, step: int, exchanges: int, mismatches: int) -> None:
        """Collective: the block that ended after step ``step``, its ``exchanges`` timed in ``seconds[:exchanges]``
        and this rank's ``mismatches`` at its end."""
        from mpi4py import MPI

        k, mpi = self.count, self.comm.mpi
        slowest = self._slowest[:exchanges]
        mpi.Allreduce(self.seconds[:exchanges], slowest, op=MPI.MAX)  # each step's slowest rank
        self.step[k], self.exchanges[k] = step, exchanges
        self.median_us[k] = 1e6 * np.median(slowest)
        self.max_us[k] = 1e6 * slowest.max()
        self.mean_us[k] = 1e6 * slowest.mean()
        self._counts[0] = mismatches
        mpi.Allreduce(MPI.IN_PLACE, self._counts, op=MPI.SUM)
        self.mismatched[k] = self._counts[0]
        self.load_average[k] = os.getloadavg()[0]  # of the whole machine: other work there slows exchanges too
        self._mine[0] = resident_bytes()
        if self.gpu:
            self._mine[1:] = device_memory_bytes()
        mpi.Allgather(self._mine, self._everyone)
        for i, series in enumerate(self.memory.values()):
            series[k] = self._everyone[:, i] / 2**20
        self.count += 1

    def records(self) -> list[dict[str, Any]]:
        """One row per block: step (the last of the block), exchanges, median_us / max_us / mean_us (time per
        exchange, each step's slowest rank), resident_MiB (and on the GPU gpu_pool_MiB, gpu_used_MiB) per rank,
        mismatched_points (all ranks), load_average (1 minute, rank 0's machine) and passed."""
        rows = []
        for k in range(self.count):
            row = {
                "step": int(self.step[k]),
                "exchanges": int(self.exchanges[k]),
                "median_us": float(self.median_us[k]),
                "max_us": float(self.max_us[k]),
                "mean_us": float(self.mean_us[k]),
                **{key: series[k].tolist() for key, series in self.memory.items()},
                "mismatched_points": int(self.mismatched[k]),
                "load_average": float(self.load_average[k]),
                "passed": bool(self.mismatched[k] == 0),
            }
            rows.append(row)
        return rows


def run_soak(
    comm: Communicator, config: SoakConfig, progress: Callable[[int], Any] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """Collective: the soak run of ``config``; (the transport used, BlockLog.records() of its blocks).
    ``progress(steps done)`` is called after each block."""
    xp = _array_module(config.gpu)
    halo = ((config.halo, config.halo),) * 3
    decomposition = CartesianDecomposition(comm, config.shape, halo=halo, periodic=True)
    field = SoakField(decomposition, xp)
    sync = _synchronizer(xp)
    log = BlockLog(comm, -(-config.steps // config.check_every), config.check_every, config.gpu)
    with HaloExchanger(decomposition, field.field, config.transport) as exchanger:
        for _ in range(WARMUP_STEPS):
            exchanger.exchange()
        comm.mpi.Barrier()
        for first in range(0, config.steps, config.check_every):
            count = min(config.check_every, config.steps - first)
            _time_steps(field, exchanger, first, log.seconds[:count], sync)
            last = first + count - 1
            log.add(last, count, field.mismatches(last))
            if progress is not None:
                progress(last + 1)
        return exchanger.transport.name, log.records()


def _array_module(gpu: bool) -> Any:
    if not gpu:
        return np
    import cupy

    return cupy


# -- what a run says -------------------------------------------------------------------------------------------

#: Per-rank memory series of a record: (key, label in tables and plots).
MEMORY_SERIES = (
    ("resident_MiB", "resident memory"),
    ("gpu_pool_MiB", "GPU pool in use"),
    ("gpu_used_MiB", "GPU memory in use"),
)


def summarise(records: list[dict[str, Any]], runtime_s: float) -> dict[str, Any]:
    """First block against last: time per exchange (µs) and its trend, memory drift per rank (MiB), checks."""
    first, last = records[0], records[-1]
    steps = np.array([r["step"] for r in records], dtype=np.float64)
    medians = np.array([r["median_us"] for r in records])
    trend = float(np.polyfit(steps, medians, 1)[0] * 1e5) if len(records) > 2 else 0.0
    summary: dict[str, Any] = {
        "runtime_s": runtime_s,
        "exchanges": int(sum(r["exchanges"] for r in records)),
        "checks": len(records),
        "checks_passed": sum(r["passed"] for r in records),
        "all_checks_passed": all(r["passed"] for r in records),
        "first_block": {k: first[k] for k in ("step", "exchanges", "median_us", "max_us", "mean_us")},
        "last_block": {k: last[k] for k in ("step", "exchanges", "median_us", "max_us", "mean_us")},
        "median_drift": last["median_us"] / first["median_us"] - 1,
        "median_trend_us_per_100k_steps": trend,
        "load_average_first_last": [first["load_average"], last["load_average"]],
    }
    for key, _ in MEMORY_SERIES:
        if key in first:
            base = np.array(first[key])
            summary[f"{key}_first"], summary[f"{key}_last"] = first[key], last[key]
            summary[f"{key}_drift"] = float(np.max(np.array(last[key]) - base))  # the rank that grew most
            summary[f"{key}_peak_growth"] = float(max(np.max(np.array(r[key]) - base) for r in records))
    return summary


def soak_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Rows of the first-against-last table: figure, first block, last block, change."""
    first, last = summary["first_block"], summary["last_block"]
    rows = [
        [f"time per exchange, {k} (µs)", f"{first[f'{k}_us']:.1f}", f"{last[f'{k}_us']:.1f}",
         f"{100 * (last[f'{k}_us'] / first[f'{k}_us'] - 1):+.1f} %"]
        for k in ("median", "mean", "max")
    ]  # fmt: skip
    for key, label in MEMORY_SERIES:
        if f"{key}_first" in summary:
            a, b = max(summary[f"{key}_first"]), max(summary[f"{key}_last"])
            rows.append([f"{label}, largest rank (MiB)", f"{a:.1f}", f"{b:.1f}", f"{summary[f'{key}_drift']:+.2f} MiB"])
    return rows


def write_soak(
    out: Path, machine: dict[str, Any], config: dict[str, Any], records: list[dict[str, Any]], summary: dict[str, Any]
) -> Path:
    """The run as bench/results.write_results writes it (soak-<device>-<ranks>r-<time>.json), plus the summary."""
    path = write_results(out, "soak", machine, config, records)
    payload = json.loads(path.read_text())
    payload["summary"] = summary
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def plot_soak(payload: dict[str, Any], png: Path) -> Path:
    """Time per exchange (median and largest per block) and every rank's memory against the step."""
    from .results import machine_title, panels_figure

    records, config = payload["results"], payload["config"]
    fig, (times, memory) = panels_figure(2)
    steps = [r["step"] + 1 for r in records]
    times.semilogy(steps, [r["max_us"] for r in records], ".", color="0.6", label="largest in block")
    times.semilogy(steps, [r["mean_us"] for r in records], "-", color="C1", label="mean of block")
    times.semilogy(steps, [r["median_us"] for r in records], "-", color="C0", label="median of block")
    times.set(xlabel="step", ylabel="time per exchange [µs] (slowest rank)")
    times.set(title=f"{config['check_every']} steps per point, transport {config['transport_used']}")
    for key, label in MEMORY_SERIES:
        if key in records[0]:
            for rank in range(len(records[0][key])):
                memory.plot(steps, [r[key][rank] for r in records], label=f"{label}, rank {rank}")
    memory.set(xlabel="step", ylabel="MiB", title="memory per rank")
    for ax in (times, memory):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    shape = "x".join(str(n) for n in config["shape"])
    machine_title(fig, f"soak: {shape} float64, halo {config['halo']}", payload["machine"])
    fig.savefig(png, dpi=110)
    return png
