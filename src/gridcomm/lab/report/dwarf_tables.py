"""The dwarfs' result files as tables of figures: ``bench stencil2d``, ``bench mpdata`` (CPU and GPU) and ``bench
spectral``. Every row carries its ceiling from the same run, energy per step (or why there is none) and, where
a seed published a comparable figure, the seed's figure with the difference in problem stated below the table."""

from __future__ import annotations

from typing import Any

from ..bench import seeds
from ..bench.spectral import spectral_case
from . import versus
from .figures import Cell, Column, FigureTable, cell, ratio
from .folder import Result

US, MS = 1e6, 1e3
NO_ENERGY = "not measured"  # with a note under the table saying why
NO_ENERGY_CPU = "Energy: not measured on the CPU (NVML meters GPUs only)."
NO_ENERGY_OLD = "not recorded (file older than the energy meter)"
JOULES = Column("energy per step", "J")


def _energy(row: dict[str, Any], fallback: str) -> Cell:
    """The row's J per step, or why it has none: the meter's reason, or ``fallback``."""
    if row.get("joules_per_step") is not None:
        return Cell(row["joules_per_step"])
    why = row.get("energy_why") or (row.get("energy") or {}).get("why")
    return Cell(text=f"not measured ({why})" if why else fallback)


def stencil2d(result: Result) -> list[FigureTable]:
    """Time per Jacobi step beside the same step with no exchange and seed 004's table for the same n."""
    rows = result.rows
    used = ", ".join(dict.fromkeys(r["transport"] for r in rows))
    columns = [
        Column("step", "µs"),
        Column("ceiling: no exchange", "µs"),
        Column("step / no exchange", "x"),
        Column("seed 004 traditional", "µs", compared=False),
        Column("seed 004 persistent kernel", "µs", compared=False),
        Column("step / seed traditional", "x", compared=False),
        JOULES,
    ]
    table = FigureTable(f"2-D Jacobi step, {result.where}, transport {used} (median, slowest rank)",
                        ["n", "mode"], columns)  # fmt: skip
    for r in rows:
        seed = seeds.SEED_004_US.get(int(r["n"]))
        table.add(
            (r["n"], r["mode"]),
            {
                "step": cell(r["time_per_step_s"], US),
                "ceiling: no exchange": cell(r["no_exchange_s"], US),
                "step / no exchange": cell(r["over_no_exchange"]),
                "seed 004 traditional": Cell(text=f"{seed[0]:.15g}" if seed else "—"),
                "seed 004 persistent kernel": Cell(text=f"{seed[1]:.15g}" if seed else "—"),
                "step / seed traditional": ratio(r["time_per_step_s"] * US, seed and seed[0]),
                "energy per step": _energy(r, NO_ENERGY_OLD),
            },
        )
    if rows:
        table.notes.append("Problem: " + versus.stencil2d_problem(result.where, rows[0]) + ".")
    table.notes.append(f"Seed: {seeds.SEED_004_SOURCE}.")
    return [table]


def mpdata_cpu(result: Result) -> list[FigureTable]:
    """Time per MPDATA step on the CPU and the share spent in its two halo exchanges."""
    columns = [
        Column("nodes", compared=False),
        Column("step", "ms"),
        Column("fastest step", "ms"),
        Column("halo exchanges", "ms"),
        Column("exchange share", "%"),
        Column("node updates", "M/s"),
        JOULES,
    ]
    table = FigureTable(f"MPDATA step, {result.where} (median, slowest rank)", ["grid", "levels"], columns)
    for r in result.rows:
        table.add(
            (r["grid"], r["levels"]),
            {
                "nodes": Cell(r["nodes"]),
                "step": cell(r["median_s"], MS),
                "fastest step": cell(r["min_s"], MS),
                "halo exchanges": cell(r["exchange_median_s"], MS),
                "exchange share": cell(r["exchange_fraction"], 100),
                "node updates": cell(r["node_updates_per_s"], 1e-6),
                "energy per step": Cell(text=NO_ENERGY),
            },
        )
    table.notes += ["No seed figure: the seed's MPDATA figures are for GPUs (000 section 4.2.3).", NO_ENERGY_CPU]
    return [table]


def _transport(r: dict[str, Any]) -> str:
    used = r.get("transport_used")
    return r["transport"] if used in (None, r["transport"], "none") else f"{r['transport']} ({used})"


def mpdata_gpu(result: Result) -> list[FigureTable]:
    """Time per MPDATA step per transport beside no exchange, HBM, energy and the seed's Figures 17 and 19; and
    each kernel's bandwidth beside the HBM copy."""
    rows = result.rows
    columns = [
        Column("step", "ms"),
        Column("step / no exchange", "x"),
        Column("step / HBM copy", "%"),
        JOULES,
        Column("power per GPU", "W"),
        Column("same result", compared=False),
        Column("seed 000, same path", compared=False),
        Column("step / seed", "x", compared=False),
        Column("seed energy per step", compared=False),
        Column("seed power per GPU", compared=False),
    ]
    table = FigureTable(f"MPDATA step on GPUs, {result.where} (median, slowest rank)",
                        ["grid", "levels", "transport", "graph"], columns)  # fmt: skip
    for r in rows:
        seed = versus.MPDATA_BY_TRANSPORT.get(r.get("transport_used") or r["transport"])
        watts = seeds.MPDATA_WATTS_PER_GPU.get(r["gpus"])
        table.add(
            (r["grid"], r["levels"], _transport(r), "yes" if r["graphs"] else "no"),
            {
                "step": cell(r["time_per_step_s"], MS),
                "step / no exchange": cell(r.get("over_no_exchange"), why="— (no 1-rank no-exchange row)"),
                "step / HBM copy": cell(r["step_share_of_hbm"], 100),
                "energy per step": _energy(r, NO_ENERGY_OLD),
                "power per GPU": ratio(r["watts"], r["gpus"]),
                "same result": Cell(text="yes" if r.get("checksums_agree") else "NO: checksums differ"),
                "seed 000, same path": Cell(text=versus.seed_text(seed)),
                "step / seed": cell(versus.per_seed(r["time_per_step_s"], seed)),
                "seed energy per step": Cell(text=versus.joules_range()),
                "seed power per GPU": Cell(text=versus.seed_text(watts)),
            },
        )
    for case in dict.fromkeys((r["grid"], r["levels"]) for r in rows):
        first = next(r for r in rows if (r["grid"], r["levels"]) == case)
        table.notes.append("Problem: " + versus.mpdata_problem(first, result.machine) + ".")
    table.notes.append(
        f"Seed: {seeds.SEED_000}, {seeds.MPDATA_PROBLEM}: 'same path' is its step with no exchange (our none), "
        "its GPU-resident exchange (our ipc, nccl, mpi) or its host round trip of whole fields (our host), as "
        "stated for 1 V100 in section 4.2.3.1; our staged (halos only through the host) has no counterpart. Its "
        "energy and power per GPU: section 4.2.3.2 (power for 1, 2, 4 and 8 GPUs)."
    )
    return [table, *_kernels(result)]


def _kernels(result: Result) -> list[FigureTable]:
    timed = [(r, k) for r in result.rows for k in r.get("kernels") or []]
    if not timed:
        return []
    columns = [Column("time", "ms"), Column("share of step", "%"), Column("bandwidth", "GB/s"),
               Column("share of HBM copy", "%")]  # fmt: skip
    table = FigureTable(f"MPDATA kernels, each timed alone, {result.where}", ["grid", "levels", "kernel"], columns,
                        kind="kernels")  # fmt: skip
    for r, k in timed:
        table.add(
            (r["grid"], r["levels"], k["kernel"]),
            {
                "time": cell(k["time_s"], MS),
                "share of step": cell(k["share_of_step"], 100),
                "bandwidth": cell(k["GBps"]),
                "share of HBM copy": cell(k["share_of_hbm"], 100),
            },
        )
    table.notes.append(
        "Bandwidth counts the fewest bytes each kernel must move; the ceiling is the HBM copy bandwidth measured in "
        f"the same run ({cell(result.rows[0].get('hbm_GBps')).shown()} GB/s)."
    )
    return [table]


def spectral(result: Result) -> list[FigureTable]:
    """Time per spectral-transform step and its split per transport, each phase beside its ceiling, the energy,
    and the seed's Figure 4 (its three all-to-all methods on TCO639)."""
    rows = result.rows
    gpu = result.gpus > 0
    columns = [
        Column("step", "ms"),
        Column("step / fastest here", "x"),
        Column("legendre", "ms"),
        Column("its matrix products", "ms"),
        Column("fft", "ms"),
        Column("transposition", "ms"),
        Column("transposition share", "%"),
        Column("Legendre per rank", "GFLOP/s"),
        Column("its products per rank", "GFLOP/s"),
        Column("ceiling: FP64 GEMM per rank", "GFLOP/s"),
        Column("FFT per rank", "GB/s"),
        Column("ceiling: HBM copy", "GB/s"),
        JOULES,
        Column("round-trip error", compared=False),
        Column("peer: ducc0 on the CPUs", "ms"),
        Column("ducc0 / step", "x"),
    ]
    if gpu:
        columns += [
            Column("seed 000 Fig. 4, nearest method", compared=False),
            Column("step / seed", "x", compared=False),
            Column("seed energy per step", compared=False),
        ]
    table = FigureTable(f"spectral transform step, {result.where} (slowest rank per phase)",
                        ["grid", "transport", "batch"], columns)  # fmt: skip
    fastest = {g: min(r["time_per_step_s"] for r in rows if r["grid"] == g) for g in {r["grid"] for r in rows}}
    for r in rows:
        split = r["split_s"]
        cells = {
            "step": cell(r["time_per_step_s"], MS),
            "step / fastest here": ratio(r["time_per_step_s"], fastest[r["grid"]]),
            "legendre": cell(split["legendre"], MS),
            "its matrix products": cell(r.get("legendre_products_s"), MS, why="not timed"),
            "fft": cell(split["fft"], MS),
            "transposition": cell(split["transposition"], MS),
            "transposition share": cell(r["transposition_fraction"], 100),
            "Legendre per rank": cell(r.get("legendre_GFLOPs_per_rank")),
            "its products per rank": cell(r.get("legendre_products_GFLOPs_per_rank"), why="not timed"),
            "ceiling: FP64 GEMM per rank": cell(r.get("matmul_GFLOPs_per_rank")),
            "FFT per rank": cell(r.get("fft_GBps_per_rank")),
            "ceiling: HBM copy": cell(r.get("hbm_GBps"), why="— (CPU)" if not gpu else "—"),
            "energy per step": _energy(r, NO_ENERGY_OLD) if gpu else Cell(text=NO_ENERGY),
            "round-trip error": Cell(text=f"{r['round_trip_error']:.1e}"),
            "peer: ducc0 on the CPUs": cell(r.get("ducc0_step_s"), MS, why="not timed"),
            "ducc0 / step": cell(r.get("ducc0_over_step")),
        }
        if gpu:
            seed = versus.spectral_seed(r["transport"])
            cells |= {
                "seed 000 Fig. 4, nearest method": Cell(text=versus.seed_text(seed)),
                "step / seed": cell(versus.per_seed(r["time_per_step_s"], seed)),
                "seed energy per step": Cell(
                    text=seeds.SPECTRAL_JOULES_PER_STEP.text() + " (4 GPUs)" if seed is seeds.SPECTRAL_IPC else "—"
                ),
            }
        table.add((f"{r['grid']} T{r['truncation']}", spectral_case(r), r["batch"]), cells)
    table.notes.append(
        "The Legendre phase is its matrix products plus the moves of their operands between the caller's layout "
        "(fields slowest) and the products' (fields fastest); both rates count the useful flops only."
    )
    timed = next((r for r in rows if r.get("ducc0_step_s") is not None), None)
    table.notes.append(
        f"Peer: the same step (one inverse, one direct transform of the same fields) by ducc0 "
        f"{timed['ducc0_version']} on the node's CPUs, {timed['ducc0_threads_per_rank']} thread(s) on each rank, "
        "measured in the same run."
        if timed
        else "Peer: ducc0 was not installed where this ran (or --no-peer): not timed."
    )
    if gpu:
        for grid in dict.fromkeys(r["grid"] for r in rows):
            first = next(r for r in rows if r["grid"] == grid)
            table.notes.append("Problem: " + versus.spectral_problem(first, result.gpus, result.machine) + ".")
        table.notes.append(
            f"Seed: {seeds.SEED_000}, {seeds.SPECTRAL_PROBLEM}. Figure 4's methods: "
            + "; ".join(f"{f.text()}: {f.what}" for f in versus.SPECTRAL_BY_TRANSPORT.values())
            + "; our staged stands beside its original, mpi beside CUDA-aware MPI, ipc and one GPU (no "
            "transposition) beside its custom all-to-all; nccl has no counterpart. Its energy: "
            f"{seeds.SPECTRAL_JOULES_PER_STEP.text()} per timestep ({seeds.SPECTRAL_JOULES_PER_STEP.where}, "
            f"{seeds.SPECTRAL_WATTS_PER_GPU.text()} per GPU)."
        )
    else:
        table.notes += [
            "No seed figure: seed 000 gives its CPU spectral results only as plots (section 3.2).",
            NO_ENERGY_CPU,
        ]
    return [table]
