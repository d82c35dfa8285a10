"""When each stream of the pipelined spectral transform runs what: TCo639 (by default) on every rank, one rank per
GPU, CUDA events around every Legendre stage, FFT group and transposition of the last timed step, for
a few variants side by side in one run. A variant is ``TRANSPORT:PIPELINE[:OPTION=VALUE...]``, e.g. ``ipc:8x2``,
``ipc/blocks=264:8x2`` or ``ipc:8x2:priority=lowest``. Option: ``priority``, the transpositions' stream at the
``highest`` priority (the default) or the ``lowest`` (CUDA's default, that of the compute stream); ``buckets``, the
most Legendre buckets on the GPU (``transform.MAX_BUCKETS_GPU``, 8 by default), which bounds the stages of
wavenumbers (``ipc:16x2:buckets=16``); ``lag``, the inverse's ``DistributedTransform.inverse_lag`` (``ipc:8x2:lag=0``);
``unfold`` and ``pick``, ``peers`` (where ipc's kernel runs the transpositions, they run these passes) or
``local`` (the Legendre stages unfold, and the FFT groups pick, into blocks that ipc copies:
``ipc:8x2:unfold=local``), by default ``dwarf.UNFOLD_INTO_PEERS`` and ``PICK_INTO_PEERS``; ``pickblocks``, the
thread blocks of the pick's exchange kernel (``peer_writes.PICK_BLOCKS``: ``ipc:8x2:pickblocks=528``).
A diagnostic that gives wrong results:
``skip``, passes left out (``+``-separated: ``unfold``, ``pick``, ``lfold`` the quadrature's fold, ``ffold`` the
FFTs'), an upper bound of what taking them off the compute stream could gain (``ipc:8x2:skip=unfold+pick``).
(Until 2026-11-27 16:00 UTC, ``eager`` and ``shares`` held transpositions back and sized the groups of rows
unevenly; at 19:42 UTC a working copy tried ``lanes`` and ``rows``, docs/spectral.md; the results files of then
record them.)

    python -c "import sys; from gridcomm.launch import run_under_mpiexec; \\
        sys.exit(run_under_mpiexec(4, [sys.executable, 'benchmarks/probe_spectral_timeline.py', '--out', 'DIR']))"

Prints per variant the slowest rank's ms per step over ``--steps``, the last of which is traced, the host's time
to queue one (where it is near the step, the host bounds it; ``--profile N`` prints rank 0's N costliest
functions), and for the traced step, the slowest rank's: the span of each transform (inverse, direct), how long
its compute stream waited for transpositions (the span less the compute spans), and how long the transpositions
ran. Writes DIR/probe-spectral-timeline-gpu-<ranks>r-<time>.json (every rank's spans) and a .png beside it: one
panel per variant, a bar per rank and stream.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path
from typing import Any

from mpi4py import MPI

from gridcomm.comm import Communicator
from gridcomm.extras import figure
from gridcomm.gpu import use_local_gpu
from gridcomm.lab.apps.spectral import dwarf, fourier, operands, peer_writes
from gridcomm.lab.apps.spectral import transform as spectral_transform
from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients
from gridcomm.lab.bench.results import machine_title, write_results
from gridcomm.lab.measure.machine import machine_info
from gridcomm.transports import by_label

VARIANTS = "ipc:8x2,ipc/blocks=264:8x2,ipc/copy-engine:8x2,nccl:8x2"
COLOURS = {"legendre": "tab:blue", "fft": "tab:green", "to rows": "tab:orange", "to waves": "tab:red"}


def union_ms(spans: list[tuple[float, float]]) -> float:
    """The time covered by ``spans`` [(start, end) ms], overlaps counted once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def summary(spans: list[dict[str, Any]]) -> dict[str, float]:
    """One rank's traced step: per transform its span, its compute stream's idle time within it, and the time its
    transpositions ran [ms]."""
    out = {}
    for transform, moves in (("inverse", "to rows"), ("direct", "to waves")):
        mine = [s for s in spans if s["transform"] == transform]
        begin, end = min(s["start_ms"] for s in mine), max(s["end_ms"] for s in mine)
        compute = [(s["start_ms"], s["end_ms"]) for s in mine if not s["label"].startswith(moves)]
        moving = [(s["start_ms"], s["end_ms"]) for s in mine if s["label"].startswith(moves)]
        out[f"{transform}_ms"] = end - begin
        out[f"{transform}_compute_idle_ms"] = end - begin - union_ms(compute)
        out[f"{transform}_transposition_ms"] = union_ms(moving)
    return out


def run_variant(comm: Communicator, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Time ``steps`` steps of one variant, the last traced; every rank's spans gathered (collective)."""
    import cupy

    transport, pipeline, *rest = variant.split(":")
    extra = dict(option.split("=", 1) for option in rest)
    batch = args.fields * args.levels + 1
    options = {"batch": batch, "xp": cupy, "graphs": True, "transport": by_label(transport), "pipeline": pipeline}
    kept_buckets, kept_into = spectral_transform.MAX_BUCKETS_GPU, (dwarf.UNFOLD_INTO_PEERS, dwarf.PICK_INTO_PEERS)
    spectral_transform.MAX_BUCKETS_GPU = int(extra.get("buckets", kept_buckets))  # read as the transform is made
    dwarf.UNFOLD_INTO_PEERS = extra.get("unfold", "peers" if kept_into[0] else "local") == "peers"
    dwarf.PICK_INTO_PEERS = extra.get("pick", "peers" if kept_into[1] else "local") == "peers"
    peer_writes.PICK_BLOCKS = int(extra["pickblocks"]) if "pickblocks" in extra else None
    passes = {"unfold": (operands, "unfold"), "pick": (fourier.RowFFTs, "_pick"), "lfold": (operands, "fold"),
              "ffold": (fourier.RowFFTs, "_fold")}  # fmt: skip
    skipped = [passes[name] for name in extra.get("skip", "").split("+") if name]
    kept_passes = [getattr(owner, name) for owner, name in skipped]
    for owner, name in skipped:
        setattr(owner, name, lambda *args, **kwargs: None)
    try:
        return _run_variant(comm, variant, args, options, extra, batch)
    finally:
        spectral_transform.MAX_BUCKETS_GPU = kept_buckets
        dwarf.UNFOLD_INTO_PEERS, dwarf.PICK_INTO_PEERS = kept_into
        peer_writes.PICK_BLOCKS = None
        for (owner, name), kept in zip(skipped, kept_passes, strict=True):
            setattr(owner, name, kept)


def _run_variant(
    comm: Communicator,
    variant: str,
    args: argparse.Namespace,
    options: dict[str, Any],
    extra: dict[str, str],
    batch: int,
) -> dict[str, Any]:
    import cupy

    with DistributedTransform(comm, args.grid, **options) as dist:
        dist.inverse_lag = int(extra.get("lag", dist.inverse_lag))
        if extra.get("priority", "highest") != "highest":  # before the first transform: the graphs replay on it
            dist.transposition_stream = cupy.cuda.Stream(non_blocking=True)
        a = cupy.asarray(random_coefficients(dist.truncation, dist.wavenumbers, batch))
        for _ in range(2):
            dist.direct(dist.inverse(a))
        cupy.cuda.Device().synchronize()
        comm.mpi.Barrier()
        profile = cProfile.Profile() if args.profile and comm.rank == 0 else None
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        for step in range(args.steps):
            if step == args.steps - 1:  # the last step traced, queued behind the others as every step is
                dist.timeline = []
            values = dist.inverse(a)
            inverse_spans = len(dist.timeline or ())
            dist.direct(values)
        if profile is not None:
            profile.disable()
        issued = time.perf_counter() - start  # the host's time to queue the steps: near the step, the host bounds it
        cupy.cuda.Device().synchronize()
        ms = comm.mpi.allreduce(time.perf_counter() - start, op=MPI.MAX) / args.steps * 1e3
        issue_ms = comm.mpi.allreduce(issued, op=MPI.MAX) / args.steps * 1e3
        if profile is not None:
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.profile)
            print(f"{variant}, rank 0, {args.steps} steps: the host's time by function\n{text.getvalue()}", flush=True)
        spans = [{**s, "transform": "inverse" if k < inverse_spans else "direct", "steady": True}
                 for k, s in enumerate(dist.timeline_ms())]  # fmt: skip
        dist.timeline = None
        everyone = comm.mpi.gather(spans, root=0)
        shape = list(dist.pipeline_shape)
        name = dist.transport
    if comm.rank != 0:
        return {}
    ranks = [summary(s) for s in everyone]
    return {"variant": variant, "transport": name, "pipeline": shape, "options": extra,
            "ms_per_step": ms, "host_issue_ms_per_step": issue_ms, "per_rank": ranks, "spans": everyone}  # fmt: skip


def plot(rows: list[dict[str, Any]], machine: dict[str, Any], png: Path) -> None:
    """A panel per variant: per rank a bar for the compute stream and one for the transpositions, over the traced
    step (in files before 2026-11-27T16:00 the inverse and the direct were each traced from an idle device: the
    direct is drawn after the inverse's last end, from the dotted line)."""
    fig = figure(figsize=(11, 2.2 * len(rows) + 0.6), layout="constrained")
    for k, row in enumerate(rows):
        ax = fig.add_subplot(len(rows), 1, k + 1)
        labels = []
        shift = 0.0  # where the direct is drawn from, traced on its own: past the inverse's last end on any rank
        if not row["spans"][0][0].get("steady"):
            shift = max(s["end_ms"] for spans in row["spans"] for s in spans if s["transform"] == "inverse") + 0.2
            ax.axvline(shift - 0.1, color="grey", linewidth=0.6, linestyle=":")
        for rank, spans in enumerate(row["spans"]):
            for lane in ("compute", "transposition"):
                y = len(labels)
                labels.append(f"{rank} {lane[:5]}")
                for s in spans:
                    if s["stream"] == lane:
                        phase = next(p for p in COLOURS if s["label"].startswith(p))
                        start = s["start_ms"] + (shift if s["transform"] == "direct" else 0.0)
                        ax.broken_barh([(start, s["end_ms"] - s["start_ms"])], (y - 0.4, 0.8),
                                       color=COLOURS[phase], edgecolor="white", linewidth=0.3)  # fmt: skip
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{row['variant']} ({row['pipeline'][0]} x {row['pipeline'][1]}): {row['ms_per_step']:.2f} ms"
                     " per step", fontsize=8)  # fmt: skip
        ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("ms from the start of the traced step's inverse", fontsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=phase) for phase, colour in COLOURS.items()]
    fig.legend(handles=handles, loc="outside lower center", fontsize=7, ncols=4)
    machine_title(fig, "Spectral transform timeline", machine)
    fig.savefig(png, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results file")
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--levels", type=int, default=137)
    parser.add_argument("--fields", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--variants", default=VARIANTS, help="comma-separated TRANSPORT:PIPELINE[:OPTION=VALUE...]")
    parser.add_argument("--profile", type=int, default=0, help="print rank 0's host profile (this many functions)")
    args = parser.parse_args()
    use_local_gpu()
    comm = Communicator()
    rows = []
    for variant in args.variants.split(","):
        row = run_variant(comm, variant, args)
        if comm.rank == 0:
            rows.append(row)
            worst = max(row["per_rank"], key=lambda r: r["inverse_ms"] + r["direct_ms"])
            print(f"{variant}: {row['ms_per_step']:.2f} ms per step (the host queued one in "
                  f"{row['host_issue_ms_per_step']:.2f}); traced, slowest rank: "
                  + ", ".join(f"{k[:-3]} {v:.2f}" for k, v in worst.items()) + " ms", flush=True)  # fmt: skip
    if comm.rank == 0:
        config = {"grid": args.grid, "levels": args.levels, "fields": args.fields,
                  "batch": args.fields * args.levels + 1, "steps": args.steps}  # fmt: skip
        machine = machine_info(comm.size, gpus_used=comm.size)
        path = write_results(args.out, "probe-spectral-timeline", machine, config, rows)
        plot(rows, machine, path.with_suffix(".png"))
        print(f"wrote {path}")
    comm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
