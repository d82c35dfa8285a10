"""Host halo exchanges beside a bare MPI exchange of the same bytes, timed in turn: the before/after check of a
change to the CPU path (run it once with each version of the code: it uses only what every version has).

Cases: ``tiny``, a 1-D grid of 2 points with a halo of 1 (8 B to the other rank and back: what a bare mpi4py
``Irecv`` + ``Isend`` + ``Waitall`` pair costs against the whole exchange); and the ``bench halo`` problem
(n x n columns of 60 float64 levels per rank, halo 3, periodic, 2-D process grid) at a few sizes and field
counts. Each case times gridcomm's ``HaloExchanger`` over ``mpi`` (p2p, copy packing) and ``cma`` and a bare
``Isend``/``Irecv`` of the same per-peer bytes from buffers made once, their samples taken in turn (a, b, c,
a, b, c, ...) so that all three see the same load, each sample the slowest rank's mean over a batch.

    mpiexec -n 2 python benchmarks/host_exchange.py --out DIR [--samples 15] [--label after]

Writes DIR/host-exchange[-LABEL]-cpu-<ranks>r-<time>.json (with the load averages before and after) and prints a
line per case: median µs and each over the bare exchange.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from mpi4py import MPI

from gridcomm import CartesianDecomposition, HaloExchanger
from gridcomm.comm import Communicator
from gridcomm.decomp import choose_proc_grid
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info

CASES = [("tiny", 0, 0), ("halo", 8, 1), ("halo", 8, 16), ("halo", 32, 1), ("halo", 32, 4), ("halo", 128, 1),
         ("halo", 128, 16)]  # fmt: skip


def decomposition(comm: Communicator, kind: str, n: int) -> CartesianDecomposition:
    if kind == "tiny":
        return CartesianDecomposition(comm, (comm.size,), halo=1, periodic=False)
    px, py = choose_proc_grid(comm.size, (n, n), ((3, 3), (3, 3)), (True, True))
    return CartesianDecomposition(comm, (n * px, n * py, 60), halo=((3, 3), (3, 3), (0, 0)),
                                  periodic=(True, True, False), proc_grid=(px, py, 1))  # fmt: skip


def bare(comm: Communicator, exchanger: HaloExchanger) -> Callable[[], None]:
    """Irecv + Isend + Waitall of the exchanger's per-peer bytes (and its copy to itself, as a message)."""
    mpi, layout = comm.mpi, exchanger.layout
    own = [(comm.rank, exchanger.local_copy_nbytes)] if exchanger.local_copy_nbytes else []
    sends = [(p, np.ones(n, np.uint8)) for p, n in [(m.peer, m.nbytes) for m in layout.sends] + own]
    recvs = [(p, np.empty(n, np.uint8)) for p, n in [(m.peer, m.nbytes) for m in layout.recvs] + own]

    def run() -> None:
        MPI.Request.Waitall([mpi.Irecv(b, p, 9) for p, b in recvs] + [mpi.Isend(b, p, 9) for p, b in sends])

    return run


def interleaved(mpi: MPI.Comm, runs: dict[str, Callable[[], None]], samples: int) -> dict[str, list[float]]:
    def batch(run: Callable[[], None], calls: int) -> float:
        mpi.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        return mpi.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX)

    calls = {}
    for name, run in runs.items():
        batch(run, 3)
        calls[name] = max(1, min(10_000, int(0.02 / max(batch(run, 1), 1e-7))))
    out: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(samples):
        for name, run in runs.items():
            out[name].append(batch(run, calls[name]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--label", default="", help="what code ran (kept in the result file), e.g. before, after")
    args = parser.parse_args()
    load_before = os.getloadavg()
    comm = Communicator()
    rows = []
    for kind, n, fields in CASES:
        d = decomposition(comm, kind, n)
        arrays = [d.zeros() + comm.rank for _ in range(max(fields, 1))]
        with HaloExchanger(d, arrays, "mpi") as mpi, HaloExchanger(d, arrays, "cma") as cma:
            seconds = interleaved(comm.mpi, {"bare": bare(comm, mpi), "mpi": mpi.exchange, "cma": cma.exchange},
                                  args.samples)  # fmt: skip
            nbytes = max((m.nbytes for m in mpi.layout.sends), default=0)
        median = {k: statistics.median(v) for k, v in seconds.items()}
        rows.append({"case": kind, "n": n, "fields": fields, "bytes_per_peer_max": nbytes,
                     "median_s": median, "min_s": {k: min(v) for k, v in seconds.items()},
                     "over_bare": {k: median[k] / median["bare"] for k in median}})  # fmt: skip
        if comm.rank == 0:
            label = "8 B" if kind == "tiny" else f"{n}² x {fields}"
            print(f"{label:>12}: " + "  ".join(f"{k} {v * 1e6:8.1f} µs ({rows[-1]['over_bare'][k]:.2f}x)"
                                               for k, v in median.items()), flush=True)  # fmt: skip
    if comm.rank == 0:
        config = {"samples": args.samples, "label": args.label, "load_before": load_before,
                  "load_after": os.getloadavg()}  # fmt: skip
        kind = f"host-exchange-{args.label}" if args.label else "host-exchange"
        path = write_results(args.out, kind, machine_info(comm.size, gpus_used=0), config, rows)
        print(f"results: {path}")
    comm.close()


if __name__ == "__main__":
    main()
