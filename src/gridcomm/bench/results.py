"""Benchmark result files (JSON with machine, versions and date) and their plots."""

from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any


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


def plot_halo(payload: dict[str, Any], png: Path) -> Path:
    """Time per exchange against bytes per peer, one panel per field count, every variant beside the floors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = payload["results"]
    counts = sorted({r["fields"] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(5.2 * len(counts), 4.2), squeeze=False)
    for ax, count in zip(axes[0], counts, strict=True):
        mine = sorted((r for r in rows if r["fields"] == count), key=lambda r: r["bytes_per_peer_mean"])
        x = [r["bytes_per_peer_mean"] / 1024 for r in mine]
        for name in mine[0]["variants"]:
            ax.loglog(x, [r["variants"][name]["median_s"] * 1e6 for r in mine], "o-", label=f"gridcomm {name}")
        ax.loglog(x, [r["floor"]["median_s"] * 1e6 for r in mine], "k--", label="floor: Isend/Irecv, contiguous")
        ax.loglog(x, [r["floor_fresh"]["median_s"] * 1e6 for r in mine], "k:", label="floor, send buffer rewritten")
        ax.set_title(f"{count} field(s), {mine[0]['levels']} levels, halo {mine[0]['halo']}")
        ax.set_xlabel("bytes per peer per exchange [KiB]")
        ax.set_ylabel("time per exchange [µs]")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    machine = payload["machine"]
    fig.suptitle(f"halo exchange, {machine['ranks']} ranks, {machine['device']}, {machine['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
