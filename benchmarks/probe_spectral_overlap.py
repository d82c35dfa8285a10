"""Where the pipelined spectral transform's overlap goes: TCo639 (by default) on every rank, one rank per GPU, the
same DistributedTransform timed with each of its parts left out in turn, so that what the transpositions cost
alone, what the Legendre products cost alone and what they cost together are told apart:

- ``whole``: the transform as it runs (stages overlapped);
- ``no transposition``: the transpositions skipped (the FFTs and the Legendre stages);
- ``no legendre``: the Legendre stages skipped (the FFTs and the transpositions, one stage after another on
  their own stream);
- ``fft only``: both skipped;
- ``stages one after another``: the stages not overlapped (``overlap = False``).

Skipping leaves stale numbers in the arrays, which nothing here reads. From these: the Legendre phase alone is
``no transposition - fft only``, the transpositions alone ``no legendre - fft only``, both together ``whole - fft
only``; what the overlap hid is the sum of the first two minus the third.

    python -c "import sys; from gridcomm.launch import run_under_mpiexec; \\
        sys.exit(run_under_mpiexec(2, [sys.executable, 'benchmarks/probe_spectral_overlap.py', '--out', 'DIR']))"

Prints one line per transport (ms per step, the slowest rank's mean over ``--steps``) and writes
DIR/probe-spectral-overlap-gpu-<ranks>r-<time>.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from mpi4py import MPI

from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info

WAYS = ("whole", "no transposition", "no legendre", "fft only", "stages one after another")


def ms_per_step(comm: Communicator, dist: DistributedTransform, a: Any, steps: int) -> float:
    """The slowest rank's mean milliseconds per step (inverse + direct) over ``steps``, after two untimed."""
    import cupy

    for _ in range(2):
        dist.direct(dist.inverse(a))
    cupy.cuda.Device().synchronize()
    comm.mpi.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        dist.direct(dist.inverse(a))
    cupy.cuda.Device().synchronize()
    return comm.mpi.allreduce(time.perf_counter() - start, op=MPI.MAX) / steps * 1e3


def probe(comm: Communicator, dist: DistributedTransform, a: Any, steps: int) -> dict[str, float]:
    """Milliseconds per step of each of WAYS (the transform's parts put back after each)."""
    kept = dist._transpose, dist._legendre_inverse, dist._legendre_direct

    def skip(transpositions: bool, legendre: bool) -> None:
        dist._transpose = (lambda *args, **kwargs: None) if transpositions else kept[0]
        dist._legendre_inverse = (lambda a, c: None) if legendre else kept[1]
        dist._legendre_direct = (lambda out, c: None) if legendre else kept[2]

    times = {}
    for way, (transpositions, legendre) in zip(
        WAYS[:4], ((False, False), (True, False), (False, True), (True, True)), strict=True
    ):
        skip(transpositions, legendre)
        times[way] = ms_per_step(comm, dist, a, steps)
    skip(False, False)
    dist.overlap = False
    times[WAYS[4]] = ms_per_step(comm, dist, a, steps)
    dist.overlap = True
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results file")
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--levels", type=int, default=137)
    parser.add_argument("--fields", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per way")
    parser.add_argument("--transports", default="ipc,nccl", help="comma-separated transports")
    parser.add_argument("--pipeline", default="auto", help="auto, stages (8), or stages x groups of rows (8x2)")
    args = parser.parse_args()
    import cupy

    use_local_gpu()
    comm = Communicator()
    batch = args.fields * args.levels + 1
    rows = []
    for transport in args.transports.split(","):
        options = {"batch": batch, "xp": cupy, "graphs": True, "transport": transport, "pipeline": args.pipeline}
        with DistributedTransform(comm, args.grid, **options) as dist:
            a = cupy.asarray(random_coefficients(dist.truncation, dist.wavenumbers, batch))
            times = probe(comm, dist, a, args.steps)
            fft = times["fft only"]
            parts = {
                "legendre_alone_ms": times["no transposition"] - fft,
                "transpositions_alone_ms": times["no legendre"] - fft,
                "both_ms": times["whole"] - fft,
            }
            hidden = parts["legendre_alone_ms"] + parts["transpositions_alone_ms"] - parts["both_ms"]
            row = {"transport": dist.transport, "pipeline": list(dist.pipeline_shape), "ms_per_step": times, **parts,
                   "hidden_ms": hidden}  # fmt: skip
            rows.append(row)
            if comm.rank == 0:
                stages, groups = dist.pipeline_shape
                print(f"{args.grid} batch {batch} {dist.transport}, {stages} stages x {groups} groups: "
                      + ", ".join(f"{way} {ms:.2f}" for way, ms in times.items())
                      + f" ms; Legendre alone {parts['legendre_alone_ms']:.2f}, transpositions alone "
                      f"{parts['transpositions_alone_ms']:.2f}, both {parts['both_ms']:.2f}: {hidden:.2f} ms hidden",
                      flush=True)  # fmt: skip
    if comm.rank == 0:
        config = {"grid": args.grid, "levels": args.levels, "fields": args.fields, "batch": batch,
                  "steps": args.steps, "pipeline": args.pipeline}  # fmt: skip
        machine = machine_info(comm.size, gpus_used=comm.size)
        print(f"wrote {write_results(args.out, 'probe-spectral-overlap', machine, config, rows)}")
    comm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
