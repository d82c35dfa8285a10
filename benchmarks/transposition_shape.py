"""Does the shape of the spectral dwarf's transposition cost bandwidth? One rank per GPU: the dwarf's own
transposition (Legendre side -> Fourier side: per peer a contiguous block of batch x wavenumbers x that peer's
rows since 2026-11-26, before that a box of the (batch, wavenumbers, 2N) array with runs of one band of rows)
beside an all-to-all of contiguous blocks of the same bytes per peer, same transport, timed in the same run
(graph replays on the GPU), and the same with each rank's block to itself as well (the dwarf copies that one
too: 1 / ranks of its side, which the first contiguous way leaves out). If the contiguous all-to-all is much
faster, the Legendre side's layout
is what limits the transposition (docs/scaling.md, "Against what was measured": TCo639's transpositions ran at
59 % of the ceiling on 4 x H200).

    gridcomm run --np 4 -- python3 benchmarks/transposition_shape.py --out DIR [--grid O640] [--levels 137]
        [--fields 3] [--transport ipc] [--cpu]

Writes DIR/transposition-shape-{gpu,cpu}-<ranks>r-<time>.json and prints, per way, the time per transposition
and the bytes per second out of the rank that sends most and into the rank that receives most (the dwarf's rows
were shared by points alone until 2026-11-26, so its polar ranks received 2.4 times what others did).
``--cpu``: host arrays (a check of the script; mpi or cma).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from gridcomm import Transposer
from gridcomm.comm import Communicator
from gridcomm.lab.apps.spectral.dwarf import DistributedTransform
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.bench.transfer import block_transposer
from gridcomm.lab.measure.machine import machine_info
from gridcomm.lab.measure.timing import time_collective


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grid", default="O640")
    parser.add_argument("--levels", type=int, default=137)
    parser.add_argument("--fields", type=int, default=3)
    parser.add_argument("--transport", default="ipc")
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--cpu", action="store_true", help="host arrays (mpi or cma): a check of this script")
    args = parser.parse_args()
    comm = Communicator()
    gpu = not args.cpu
    if gpu:
        import cupy as xp

        from gridcomm.gpu import use_local_gpu
        from gridcomm.lab.bench.ceilings import time_gpu

        use_local_gpu(comm)
    else:
        xp, time_gpu = np, None
    batch = args.fields * args.levels + 1
    with DistributedTransform(comm, args.grid, batch=batch, transport=args.transport, xp=xp) as dist:
        shaped = dist._to_rows[0, 0]  # the dwarf's own transposition, Legendre side -> Fourier side
        sent = comm.mpi.allreduce(shaped.bytes_per_exchange[0], op=_max())
        per_peer = -(-sent // max(comm.size - 1, 1))  # the busiest rank's bytes, spread evenly: every rank alike
        source = xp.zeros(comm.size * per_peer, dtype=np.uint8)
        destination = xp.zeros_like(source)
        # The dwarf also copies its block to itself (1 / ranks of its Legendre side); the contiguous blocks do not,
        # unless told to: "own block too" sends every rank, itself included, a block of the same bytes.
        everyone = [per_peer] * comm.size
        at = [r * per_peer for r in range(comm.size)]
        with (
            block_transposer(comm, per_peer, source, destination, args.transport) as blocks,
            Transposer.from_counts(comm, everyone, at, everyone, at, source, destination, args.transport) as own,
        ):
            ways = {"dwarf's boxes": shaped, "contiguous blocks": blocks, "own block too": own}
            rows = [_time(comm, name, t, args.samples, time_gpu) for name, t in ways.items()]
    if comm.rank == 0:
        for r in rows:
            print(
                f"{r['way']:>18}: {r['median_s'] * 1e3:8.3f} ms, {r['GBps']:7.1f} GB/s out of the busiest sender, "
                f"{r['GBps_in']:7.1f} into the busiest receiver"
            )
        config = {**vars(args), "out": str(args.out), "batch": batch, "bytes_sent_per_rank": sent}
        machine = machine_info(comm.size, gpus_used=comm.size if gpu else 0)
        path = write_results(args.out, "transposition-shape", machine, config, rows)
        print(f"results: {path}")
    comm.close()


def _time(comm: Communicator, way: str, transposer: Any, samples: int, time_gpu: Any) -> dict[str, Any]:
    """Seconds per transposition of ``transposer`` (a graph replay on the GPU where it can be captured) and the
    bytes this way sends out of the busiest rank per second."""
    if time_gpu is None:
        timing = time_collective(comm.mpi, transposer.exchange, samples=samples)
    elif transposer.transport.graph_capturable:
        import cupy

        graph, stream = transposer.capture(), cupy.cuda.get_current_stream()
        timing = time_gpu(comm, lambda: graph.launch(stream), samples)
    else:
        timing = time_gpu(comm, transposer.exchange, samples)
    sent, received = (comm.mpi.allreduce(n, op=_max()) for n in transposer.bytes_per_exchange)
    return {"way": way, "bytes_sent": sent, "bytes_received": received, "median_s": timing.median,
            "GBps": sent / timing.median / 1e9, "GBps_in": received / timing.median / 1e9,
            "timing": timing.as_dict()}  # fmt: skip


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


if __name__ == "__main__":
    main()
