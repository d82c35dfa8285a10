"""Time per step of the 2-D Jacobi dwarf against the block size per rank, beside its compute ceiling and the
figures of the NVSHMEM stencil study (seed 004) that it reproduces.

For every n (points per rank side) and every mode, ``benchmark_stencil2d`` measures the time per step of
``Stencil2D`` and, in the same run, the same update on the same rank with no exchange at all (the compute ceiling:
what the step would cost if moving halos were free). Each row also carries the seed's two figures for that domain
size (time per step of its "traditional" code and of its persistent kernel), kept with their source in
gridcomm.lab.bench.seeds.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...comm import Communicator
from ...transports import NvshmemTransport, Transport, choose
from ..apps.stencil2d import CPU_MODES, Stencil2D
from ..apps.stencil2d.config import SHMEM_MODES, check_mode, resolve_xp
from ..measure.energy import GPUS_ONLY, energy_of_steps
from .seeds import SEED_004_SOURCE, SEED_004_US, seed_reference

DEFAULT_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)


class _Clock:
    """Times ``k`` steps of a Stencil2D: CUDA events on its compute stream on the GPU, perf_counter on the CPU."""

    def __init__(self, sim: Stencil2D) -> None:
        self.sim = sim
        if sim.on_gpu:
            cuda = sim.xp.cuda
            self._begin = cuda.Event()  # recorded on the compute stream before the first timed step
            self._end = cuda.Event()  # recorded on it after the last: every step's work (exchange too) precedes it

    def seconds(self, k: int) -> float:
        """Seconds that ``k`` steps took on this rank."""
        sim = self.sim
        if not sim.on_gpu:
            start = time.perf_counter()
            sim.step(k)
            return time.perf_counter() - start
        sim.stream.record(self._begin)
        sim.step(k)
        sim.stream.record(self._end)
        self._end.synchronize()
        sim.synchronize()  # reports a GPU-side timeout of a replayed graph
        return sim.xp.cuda.get_elapsed_time(self._begin, self._end) / 1e3


NO_ENERGY_ON_CPU = {"joules_per_step": None, "watts": None, "energy_why": GPUS_ONLY}


def energy_per_step(sim: Stencil2D, step_s: float) -> dict[str, Any]:
    """Collective: joules per step of the GPUs used (and their power, W) over a region of at least
    ENERGY_REGION_S of steps, or None figures and why."""

    def run_steps(steps: int) -> None:
        sim.step(steps)
        sim.synchronize()

    energy, steps = energy_of_steps(sim.comm, run_steps, step_s, multiple=2)  # graph mode: two-step graphs
    return {"joules_per_step": energy.per(steps), "watts": energy.watts, "energy_why": energy.why}


def time_steps(
    sim: Stencil2D, samples: int = 7, min_sample_s: float = 0.05, warmup_s: float = 0.1, max_steps: int = 100_000
) -> dict[str, Any]:
    """Collective: time per step of ``sim``, each sample the slowest rank's mean over a batch of steps.

    Warms up for about ``warmup_s`` seconds (at least 4 steps: module loads, first graph launches, caches), then
    sizes the batch (the same on every rank, even so that graph mode replays whole two-step graphs) so that a
    sample lasts at least ``min_sample_s``. Returns median_s and min_s (seconds per step), samples,
    steps_per_sample.
    """
    from mpi4py import MPI

    mpi, clock = sim.comm.mpi, _Clock(sim)
    mpi.Barrier()
    clock.seconds(4)
    once = mpi.allreduce(clock.seconds(2) / 2, op=MPI.MAX)
    extra = min(max_steps, int(warmup_s / max(once, 1e-7)))
    extra = mpi.allreduce(extra - extra % 2, op=MPI.MAX)
    if extra:
        clock.seconds(extra)
    steps = max(2, min(max_steps, math.ceil(min_sample_s / max(once, 1e-7))))
    steps = mpi.allreduce(steps + steps % 2, op=MPI.MAX)
    per_step = np.empty(samples)
    for s in range(samples):
        mpi.Barrier()
        per_step[s] = clock.seconds(steps) / steps
    mpi.Allreduce(MPI.IN_PLACE, per_step, op=MPI.MAX)
    return {
        "median_s": float(statistics.median(per_step)),
        "min_s": float(per_step.min()),
        "samples": samples,
        "steps_per_sample": int(steps),
    }


def default_modes(comm: Communicator, on_gpu: bool, transport: str | Transport = "auto") -> list[str]:
    """Every mode this machine runs: on the CPU traditional and overlapped; on the GPU graph too where the
    transport's exchange can be captured (ipc, nccl), and nvshmem and persistent where NVSHMEM is usable."""
    if not on_gpu:
        return list(CPU_MODES)
    modes = list(CPU_MODES)
    if choose(transport, comm, on_device=True).graph_capturable:
        modes.append("graph")
    if NvshmemTransport().unusable_reason(comm, on_device=True) is None:
        modes += list(SHMEM_MODES)
    return modes


def benchmark_stencil2d(
    comm: Any = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    modes: Sequence[str] | None = None,
    *,
    xp: Any = None,
    dtype: Any = np.float64,
    transport: str | Transport = "auto",
    samples: int = 7,
    min_sample_s: float = 0.05,
    progress: Callable[[int, int], Any] | None = None,
) -> list[dict[str, Any]]:
    """Collective: time per Jacobi step for every n in ``sizes`` and every mode, beside the compute ceiling and
    the seed's figures; the same rows (ready for JSON) on every rank.

    Args:
        comm: a gridcomm Communicator, an mpi4py communicator, or None (COMM_WORLD).
        sizes: points per rank side (the seed's "domain size per GPU").
        modes: modes to time; None: every mode the device runs (``default_modes``).
        xp: numpy, cupy (or their names); None: cupy when a GPU is usable, else numpy.
        dtype, transport: as for Stencil2D.
        samples, min_sample_s: samples per figure (median reported) and the least duration of one, seconds.
        progress: called as ``progress(done, total)`` after each timed case.

    Each row: n, ranks, proc_grid, global_shape, mode, device ("cpu"/"gpu"), dtype, transport,
    time_per_step_s (median over samples; slowest rank per sample), min_s, samples, steps_per_sample,
    no_exchange_s (median time per step of the same update with no exchange: the compute ceiling),
    over_no_exchange (time_per_step_s / no_exchange_s), bytes_per_step (sent by the busiest rank),
    point_updates_per_s (global points updated per second), seed_traditional_us and seed_persistent_us (seed
    004's time per step for this n, None where the seed has none), over_seed_traditional and
    over_seed_persistent (time_per_step_s over the seed's figure, None likewise).
    """
    from mpi4py import MPI

    comm = Communicator.wrap(comm)
    module = resolve_xp(xp)
    on_gpu = module.__name__ == "cupy"
    if modes is None:
        modes = default_modes(comm, on_gpu, transport)
    modes = list(modes)
    for mode in modes:
        check_mode(mode, on_gpu)
    rows: list[dict[str, Any]] = []
    total, done = len(sizes) * (len(modes) + 1), 0
    for n in sizes:
        with Stencil2D(comm, n, dtype, module, "traditional", exchange=False) as ceiling_sim:
            ceiling = time_steps(ceiling_sim, samples, min_sample_s)
        done += 1
        if progress is not None:
            progress(done, total)
        for mode in modes:
            with Stencil2D(comm, n, dtype, module, mode, transport) as sim:
                timing = time_steps(sim, samples, min_sample_s)
                energy = energy_per_step(sim, timing["median_s"]) if on_gpu else NO_ENERGY_ON_CPU
                sent = comm.mpi.allreduce(sim.bytes_per_step, op=MPI.MAX)
                seed = SEED_004_US.get(int(n))
                t = timing["median_s"]
                rows.append(
                    {
                        "n": int(n),
                        "ranks": comm.size,
                        "proc_grid": list(sim.proc_grid),
                        "global_shape": list(sim.global_shape),
                        "mode": mode,
                        "device": "gpu" if on_gpu else "cpu",
                        "dtype": str(sim.dtype),
                        "transport": sim.transport,
                        "time_per_step_s": t,
                        "min_s": timing["min_s"],
                        "samples": timing["samples"],
                        "steps_per_sample": timing["steps_per_sample"],
                        "no_exchange_s": ceiling["median_s"],
                        "over_no_exchange": t / ceiling["median_s"],
                        "bytes_per_step": int(sent),
                        "point_updates_per_s": sim.points_per_step / t,
                        "seed_traditional_us": seed[0] if seed else None,
                        "seed_persistent_us": seed[1] if seed else None,
                        "over_seed_traditional": t * 1e6 / seed[0] if seed else None,
                        "over_seed_persistent": t * 1e6 / seed[1] if seed else None,
                        **energy,
                    }
                )
            done += 1
            if progress is not None:
                progress(done, total)
    return rows


def benchmark_config(
    sizes: Sequence[int], modes: Sequence[str], dtype: Any, transport: str, samples: int
) -> dict[str, Any]:
    """The ``config`` record stored beside the rows (bench/results.write_results), the seed's table included."""
    return {
        "sizes": [int(n) for n in sizes],
        "modes": list(modes),
        "dtype": str(np.dtype(dtype)),
        "transport": transport,
        "samples": samples,
        "problem": "2-D Jacobi, five-point star stencil, n x n points per rank, fixed outer boundary, halo 1",
        "seed_004": {"source": SEED_004_SOURCE, "rows": seed_reference()},
    }


def plot_stencil2d(payload: dict[str, Any], png: str | Path) -> Path:
    """Time per step [µs] against points per rank side, log-log: every mode measured, the compute ceiling (no
    exchange) and seed 004's traditional and persistent-kernel curves. ``payload`` is a result file's content
    (``results`` rows; ``machine`` used in the title when present). Returns the PNG's path."""
    from ...extras import figure

    rows = payload["results"]
    fig = figure(figsize=(7.5, 5.0))
    ax = fig.subplots()
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["n"])
        ax.loglog([r["n"] for r in mine], [r["time_per_step_s"] * 1e6 for r in mine], "o-", label=f"gridcomm {mode}")
    ceiling = sorted({r["n"]: r["no_exchange_s"] for r in rows}.items())
    ax.loglog([n for n, _ in ceiling], [t * 1e6 for _, t in ceiling], "k--", label="same update, no exchange")
    seed = sorted(SEED_004_US.items())
    ax.loglog([n for n, _ in seed], [t for _, (t, _) in seed], "s:", color="0.45", label="seed 004 traditional")
    ax.loglog([n for n, _ in seed], [p for _, (_, p) in seed], "^:", color="0.65", label="seed 004 persistent kernel")
    sizes = sorted({r["n"] for r in rows} | set(SEED_004_US))
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("points per rank side n (block n x n)")
    ax.set_ylabel("time per step [µs]")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    first = rows[0] if rows else {}
    machine = payload.get("machine", {})
    title = (
        f"2-D Jacobi, {first.get('ranks', '?')} rank(s), {first.get('device', '?').upper()} {first.get('dtype', '')}"
        f", transport {first.get('transport', '?')}"
    )
    if machine:
        title += f"\n{machine.get('device', '')}, {machine.get('date', '')}; seed: 4 K40m GPUs (NVSHMEM study)"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(png)
    fig.savefig(path, dpi=110)
    return path
