"""The MPDATA GPU benchmark's figure (after the seed report's Figures 16-19), drawn from one or more result
payloads (``{"benchmark": "mpdata-gpu", "machine": ..., "config": ..., "results": [rows]}``) whose rows are
taken together. Four panels:

1. each kernel's bandwidth as a share of the HBM copy bandwidth of the same run [%], bubble area proportional
   to the kernel's share of the step, against the 80 % target;
2. time per step [ms] against the number of GPUs;
3. speed-up against the same grid and transport on 1 GPU, beside the ideal;
4. energy per step [J] against time per step [ms].

A case is a grid at a number of levels; a series is a case with one transport. Where several rows share a
series and a GPU count (e.g. with and without CUDA graphs), the fastest is drawn."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ... import transports
from .mpdata import HOST_ROUND_TRIP, NO_EXCHANGE
from .results import machine_title, panels_figure

Row = dict[str, Any]
Series = tuple[str, str]  # (case label, transport label)

HBM_TARGET_PERCENT = 80.0
BUBBLE_AREA = 1500.0  # points^2 of a kernel that takes the whole step
#: A colour per case: black for no exchange, then the seed's host round trip, auto and every transport in the
#: registry's order.
TRANSPORT_COLOURS = {
    NO_EXCHANGE: "k",
    **{name: f"C{k}" for k, name in enumerate((HOST_ROUND_TRIP, "auto", *transports.names("device")))},
}
CASE_MARKERS = "os^Dvp<>h"


def plot_mpdata(payloads: list[dict[str, Any]], png: Path) -> Path:
    """Draw the four MPDATA panels of the rows of every payload into ``png``; returns ``png``.

    Times are shown in ms per step, energies in J per step, bandwidth shares in % of the HBM copy bandwidth.
    Raises ValueError if the payloads hold no result rows."""
    rows = [row for payload in payloads for row in payload["results"]]
    if not rows:
        raise ValueError("plot_mpdata: the payloads hold no result rows, nothing to plot")
    markers = {case: CASE_MARKERS[k % len(CASE_MARKERS)] for k, case in enumerate(dict.fromkeys(map(_case, rows)))}
    fig, (kernels, times, speedup, energy) = panels_figure(4)
    _kernel_panel(kernels, rows)
    _time_panel(times, rows, markers)
    _speedup_panel(speedup, rows, markers)
    _energy_panel(energy, rows, markers)
    machine_title(fig, "MPDATA (GPU)", payloads[0]["machine"])
    fig.savefig(png, dpi=110)
    return png


def _case(row: Row) -> str:
    return f"{row['grid']} L{row['levels']}"


def _transport(row: Row) -> str:
    """The transport asked for, with the one chosen where it was "auto"."""
    if row["transport"] == "auto" and row.get("transport_used"):
        return f"auto ({row['transport_used']})"
    return row["transport"]


def _style(row: Row, markers: dict[str, str]) -> dict[str, Any]:
    """Colour by transport, marker by case, the same in every panel."""
    return {"color": TRANSPORT_COLOURS.get(row["transport"], "C6"), "marker": markers[_case(row)]}


def _series(rows: list[Row]) -> dict[Series, dict[int, Row]]:
    """Each series' fastest row per GPU count, GPU counts ascending."""
    best: dict[Series, dict[int, Row]] = defaultdict(dict)
    for row in rows:
        per_gpus = best[(_case(row), _transport(row))]
        if row["gpus"] not in per_gpus or row["time_per_step_s"] < per_gpus[row["gpus"]]["time_per_step_s"]:
            per_gpus[row["gpus"]] = row
    return {key: dict(sorted(per_gpus.items())) for key, per_gpus in best.items()}


def _series_label(key: Series) -> str:
    case, transport = key
    return f"{case}, no exchange" if transport == "none" else f"{case}, {transport}"


def _gpu_axis(ax: Any, gpus: set[int]) -> None:
    """Integer GPU ticks, on a log2 scale when more than two counts are shown."""
    from matplotlib.ticker import NullLocator

    if len(gpus) > 2:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(sorted(gpus), [str(g) for g in sorted(gpus)])
    ax.set_xlabel("GPUs")


def _log_axis(ax: Any, which: str, base: int = 10) -> None:
    """Put the "x" or "y" axis of ``ax`` on a log scale labelled with plain numbers (60, not 6 x 10^1)."""
    from matplotlib.ticker import LogFormatter

    getattr(ax, f"set_{which}scale")("log", base=base)
    axis = getattr(ax, f"{which}axis")
    axis.set_major_formatter(LogFormatter(base=base))
    axis.set_minor_formatter(LogFormatter(base=base))


def _kernel_panel(ax: Any, rows: list[Row]) -> None:
    """Seed Fig. 16: per case, the kernels of its row with kernel timings (the one on the most GPUs)."""
    chosen: dict[str, Row] = {}
    for row in rows:
        case = _case(row)
        if row.get("kernels") and (case not in chosen or row["gpus"] > chosen[case]["gpus"]):
            chosen[case] = row
    ticks: list[float] = []
    names: list[str] = []
    for k, (case, row) in enumerate(chosen.items()):
        x = [len(ticks) + k + j for j in range(len(row["kernels"]))]  # a one-slot gap between cases
        y = [100 * kernel["share_of_hbm"] for kernel in row["kernels"]]
        area = [BUBBLE_AREA * kernel["share_of_step"] for kernel in row["kernels"]]
        label = f"{case}, {row['gpus']} GPU, {_transport(row)}"
        ax.scatter(x, y, s=area, color=f"C{k}", alpha=0.6, edgecolors="k", linewidths=0.5, label=label)
        ticks += x
        names += [kernel["kernel"] for kernel in row["kernels"]]
    ax.axhline(HBM_TARGET_PERCENT, color="k", linestyle="--", linewidth=1, label=f"target {HBM_TARGET_PERCENT:.0f} %")
    if not chosen:
        ax.text(0.5, 0.5, "no per-kernel figures", transform=ax.transAxes, ha="center", va="center")
    ax.set_xticks(ticks, names, rotation=45, ha="right", fontsize=7)
    top = max([HBM_TARGET_PERCENT, *(100 * k["share_of_hbm"] for r in chosen.values() for k in r["kernels"])])
    ax.set(ylim=(0, 1.2 * top), ylabel="% of HBM copy bandwidth", title="Per-kernel share of the HBM copy bandwidth")
    ax.text(0.02, 0.97, "bubble area: share of the step", transform=ax.transAxes, va="top", fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    for handle in ax.legend(fontsize=7, loc="best").legend_handles[: len(chosen)]:
        handle.set_sizes([40])  # legend bubbles of one size, not the first kernel's


def _time_panel(ax: Any, rows: list[Row], markers: dict[str, str]) -> None:
    """Seed Fig. 17: time per step [ms] against GPUs, one line per series, "none" as lone markers."""
    for key, per_gpus in _series(rows).items():
        first = next(iter(per_gpus.values()))
        line = "none" if first["transport"] == "none" else "-"
        ms = [row["time_per_step_s"] * 1e3 for row in per_gpus.values()]
        ax.plot(list(per_gpus), ms, linestyle=line, label=_series_label(key), **_style(first, markers))
    _gpu_axis(ax, {row["gpus"] for row in rows})
    _log_axis(ax, "y")
    ax.set(ylabel="time per step [ms]", title="Time per step against GPUs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _speedup_panel(ax: Any, rows: list[Row], markers: dict[str, str]) -> None:
    """Seed Fig. 18: t(1 GPU) / t(g GPUs) of every series measured on 1 GPU, beside the ideal y = x."""
    gpus: set[int] = {1}
    scaled = False
    for key, per_gpus in _series(rows).items():
        if 1 not in per_gpus:
            continue
        base = per_gpus[1]["time_per_step_s"]
        line = "none" if per_gpus[1]["transport"] == "none" else "-"
        speedups = [base / row["time_per_step_s"] for row in per_gpus.values()]
        ax.plot(list(per_gpus), speedups, linestyle=line, label=_series_label(key), **_style(per_gpus[1], markers))
        gpus |= set(per_gpus)
        scaled |= len(per_gpus) > 1
    ideal = [1, max(gpus)] if scaled else [1, 2]
    ax.plot(ideal, ideal, "k:", label="ideal")
    _gpu_axis(ax, gpus | set(ideal))
    if len(gpus | set(ideal)) > 2:
        _log_axis(ax, "y", base=2)
    if not scaled:
        ax.text(0.5, 0.9, "only 1 GPU measured", transform=ax.transAxes, ha="center", va="top")
    ax.set(ylabel="speed-up against 1 GPU", title="Speed-up against 1 GPU")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _energy_panel(ax: Any, rows: list[Row], markers: dict[str, str]) -> None:
    """Seed Fig. 19: energy per step [J] against time per step [ms] of the rows with an energy figure."""
    groups: dict[Series, list[Row]] = defaultdict(list)
    for row in rows:
        if row.get("joules_per_step") is not None:
            groups[(_case(row), _transport(row))].append(row)
    for key, mine in groups.items():
        ms = [row["time_per_step_s"] * 1e3 for row in mine]
        joules = [row["joules_per_step"] for row in mine]
        ax.scatter(ms, joules, label=_series_label(key), **_style(mine[0], markers))
        for row, x, y in zip(mine, ms, joules, strict=True):
            ax.annotate(f"{row['gpus']} GPU", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if groups:
        _log_axis(ax, "x")
        _log_axis(ax, "y")
        ax.margins(0.15)  # room for the annotations
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no energy figures", transform=ax.transAxes, ha="center", va="center")
    ax.set(xlabel="time per step [ms]", ylabel="energy per step [J]", title="Energy per step against time per step")
    ax.grid(True, which="both", alpha=0.3)
