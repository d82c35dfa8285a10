"""Benchmark result files (JSON with machine, versions and date) and their plots."""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any

from ...extras import figure


def bytes_text(n: int) -> str:
    """A byte count as people read it: 8 B, 64 KiB, 1.5 MiB, 2 GiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def result_path(out_dir: Path, benchmark: str, machine: dict[str, Any]) -> Path:
    """benchmarks/results/<benchmark>-<device>-<ranks>r-<UTC time>.json"""
    device = "gpu" if machine.get("gpus_used") else "cpu"
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"{benchmark}-{device}-{machine['ranks']}r-{stamp}"
    return Path(out_dir) / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".json")


def write_results(
    out_dir: Path, benchmark: str, machine: dict[str, Any], config: dict[str, Any], rows: list[dict[str, Any]]
) -> Path:
    """Write one benchmark run to a new JSON file; returns its path."""
    path = result_path(out_dir, benchmark, machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": benchmark, "machine": machine, "config": config, "results": rows}
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def halo_axis(rows: list[dict[str, Any]], fields: int) -> tuple[list[dict[str, Any]], list[float], str]:
    """The rows of one field count in order, their x values and the x label: KiB per peer, or points per rank
    side where no rank has a peer (one rank: its periodic halo is its own, and a log axis cannot show 0 bytes)."""
    mine = sorted((r for r in rows if r["fields"] == fields), key=lambda r: (r["bytes_per_peer_mean"], r["n"]))
    if any(r["bytes_per_peer_mean"] > 0 for r in mine):
        return mine, [r["bytes_per_peer_mean"] / 1024 for r in mine], "bytes per peer per exchange [KiB]"
    return mine, [float(r["n"]) for r in mine], "points per rank side (no peer: the halo is the rank's own)"


def plot_halo(payload: dict[str, Any], png: Path) -> Path:
    """Time per exchange against bytes per peer, one panel per field count, every variant beside the floors."""
    rows = payload["results"]
    counts = sorted({r["fields"] for r in rows})
    fig, axes = panels_figure(len(counts))
    for ax, count in zip(axes, counts, strict=True):
        mine, x, xlabel = halo_axis(rows, count)
        for name in mine[0]["variants"]:
            ax.loglog(x, [r["variants"][name]["median_s"] * 1e6 for r in mine], "o-", label=f"gridcomm {name}")
        for name in mine[0].get("peers", {}):
            ax.loglog(x, [r["peers"][name]["median_s"] * 1e6 for r in mine], "s-.", label=f"peer: {name}")
        ax.loglog(x, [r["floor"]["median_s"] * 1e6 for r in mine], "k--", label="floor: Isend/Irecv, contiguous")
        ax.loglog(x, [r["floor_fresh"]["median_s"] * 1e6 for r in mine], "k:", label="floor, send buffer rewritten")
        ax.set_title(f"{count} field(s), {mine[0]['levels']} levels, halo {mine[0]['halo']}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("time per exchange [µs]")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    machine_title(fig, "halo exchange", payload["machine"])
    fig.savefig(png, dpi=110)
    return png


def panels_figure(panels: int) -> tuple[Any, list[Any]]:
    fig = figure(figsize=(5.4 * panels, 4.2), layout="constrained")
    return fig, [fig.add_subplot(1, panels, k + 1) for k in range(panels)]


def machine_title(fig: Any, what: str, machine: dict[str, Any]) -> None:
    gpus = f"{machine['gpus_used']} x {machine['device']}" if machine.get("gpus_used") else machine["device"]
    fig.suptitle(f"{what}, {machine['ranks']} ranks, {gpus}, {machine['date']}", fontsize=9)


def plot_halo_gpu(payload: dict[str, Any], png: Path) -> Path:
    """Time per exchange against bytes per peer, one panel per field count: every transport (and its graph
    replay) beside NCCL's own send/recv and the peer-copy ceiling of the same bytes."""
    rows = payload["results"]
    counts = sorted({r["fields"] for r in rows})
    fig, axes = panels_figure(len(counts))
    for ax, count in zip(axes, counts, strict=True):
        mine, x, xlabel = halo_axis(rows, count)
        for name in mine[0]["times"]:
            style = "k--" if name == "nccl send/recv" else "k:" if name == "peer copy" else "o-"
            label = name if name in ("nccl send/recv", "peer copy") else f"gridcomm {name}"
            timed = [(b, r["times"][name]) for b, r in zip(x, mine, strict=True) if name in r["times"]]
            ax.loglog([b for b, _ in timed], [t["median_s"] * 1e6 for _, t in timed], style, label=label)
        ax.set(title=f"{count} field(s), {mine[0]['levels']} levels, halo {mine[0]['halo']}")
        ax.set(xlabel=xlabel, ylabel="time per exchange [µs]")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    machine_title(fig, "GPU halo exchange", payload["machine"])
    fig.savefig(png, dpi=110)
    return png


def plot_transfer(payload: dict[str, Any], png: Path) -> Path:
    """Latency (time per exchange) and bandwidth (GB/s sent per rank) against message size, every transport
    beside NCCL's send/recv and the peer-copy ceilings."""
    rows = payload["results"]
    fig, (latency, bandwidth) = panels_figure(2)
    for name in rows[0]["times"]:
        nccl = name.startswith(("nccl", "torch"))
        style = "--" if nccl else "k:" if name.startswith(("peer copy", "pinned copy", "host MPI")) else "o-"
        timed = [r for r in rows if name in r["times"]]  # a transport refused at a later size stops there
        xs = [r["bytes_per_peer"] for r in timed]
        latency.loglog(xs, [r["times"][name]["median_s"] * 1e6 for r in timed], style, label=name)
        bandwidth.semilogx(xs, [r["GBps"][name] for r in timed], style, label=name)
    nominal = payload.get("config", {}).get("nvlink_nominal_GBps")
    if nominal:
        bandwidth.axhline(nominal, color="grey", lw=0.8, label="NVLink nominal")
    latency.set(xlabel="bytes per peer", ylabel="time per exchange [µs]", title="latency")
    bandwidth.set(xlabel="bytes per peer", ylabel="GB/s sent per rank", title="bandwidth")
    for ax in (latency, bandwidth):
        ax.grid(True, which="both", alpha=0.3)
    latency.legend(fontsize=7)
    machine_title(fig, payload.get("benchmark", "transfer"), payload["machine"])
    fig.savefig(png, dpi=110)
    return png
