"""What limits the exchanges between every pair of GPUs at once (4 and more GPUs), each case timed in one run:

- the ipc all-to-all kernel with fewer thread blocks (``IpcTransport(blocks=...)``): how few SMs keep every link
  busy, for a transposition that runs beside compute (graph replays, busbw as ``bench alltoall``);
- halo exchanges of the 2-D stencil's fields (n x n float64 per rank, halo 1, star stencil) with the ranks in a
  row (halos along axis 1: columns of 8-byte runs), in a column (rows: one contiguous run each) and on a square
  grid (both), over ipc and nccl (graph replays).

    python3 benchmarks/tune_alltoall.py --np 4 --out DIR

Writes DIR/tune-alltoall-gpu-<ranks>r-<time>.json and prints one line per case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy
import numpy as np

from gridcomm import CartesianDecomposition, HaloExchanger
from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.lab.bench.ceilings import time_exchanger
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.bench.transfer import block_transposer
from gridcomm.lab.measure.machine import machine_info
from gridcomm.launch import run_under_mpiexec, under_launcher
from gridcomm.transports import IpcTransport


def alltoall_rows(comm: Communicator, sizes: list[int], blocks: list[int], samples: int) -> list[dict]:
    """busbw of the ipc kernel all-to-all (graph replays) per block count and size."""
    rows = []
    for nbytes in sizes:
        source = cupy.full(comm.size * nbytes, comm.rank + 1, dtype=np.uint8)
        destination = cupy.zeros(comm.size * nbytes, dtype=np.uint8)
        for count in blocks:
            transport = IpcTransport(blocks=count or None)
            with block_transposer(comm, nbytes, source, destination, transport) as transposer:
                t = time_exchanger(comm, transposer, "ipc", samples)["ipc graph"].median
            busbw = nbytes * (comm.size - 1) / t / 1e9  # out of each GPU: nccl-tests' busbw
            rows.append({"case": "alltoall", "bytes_per_peer": nbytes, "blocks": count, "median_s": t, "busbw": busbw})
            if comm.rank == 0:
                print(f"alltoall {nbytes >> 20} MiB/peer blocks={count or 'all'}: {t * 1e6:.1f} µs, busbw {busbw:.0f}")
        del source, destination
    return rows


def launch_floor(comm: Communicator, samples: int) -> list[dict]:
    """A CUDA graph of one tiny kernel, replayed as the exchanges are: the least an exchange can take."""
    from gridcomm.lab.bench.ceilings import time_gpu

    one, stream = cupy.zeros(1), cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        one.fill(1)
        graph = stream.end_capture()
    t = time_gpu(comm, lambda: graph.launch(stream), samples).median
    if comm.rank == 0:
        print(f"graph of one tiny kernel: {t * 1e6:.1f} µs per replay")
    return [{"case": "launch floor", "median_s": t}]


def halo_rows(comm: Communicator, sizes: list[int], samples: int) -> list[dict]:
    """Graph-replayed stencil halo exchanges per process-grid shape, n and transport."""
    p = comm.size
    shapes = {"row of ranks (column halos)": (1, p), "column of ranks (row halos)": (p, 1)}
    side = round(p**0.5)
    if side * side == p and side > 1:
        shapes["square grid"] = (side, side)
    rows = []
    for n in sizes:
        for label, grid in shapes.items():
            d = CartesianDecomposition(comm, (n * grid[0], n * grid[1]), halo=1, proc_grid=grid, stencil="star")
            field = d.zeros(np.float64, xp=cupy)
            for transport in ("ipc", "nccl"):
                with HaloExchanger(d, field, transport) as halos:
                    t = time_exchanger(comm, halos, transport, samples)[f"{transport} graph"].median
                rows.append({"case": "halo", "n": n, "grid": list(grid), "transport": transport, "median_s": t})
                if comm.rank == 0:
                    print(f"halo n={n} {label} {grid} {transport}: {t * 1e6:.1f} µs")
            del field
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=4, help="ranks (one per GPU) when not started by mpiexec")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--sizes", default="1,8,64", help="all-to-all MiB per peer, comma-separated")
    parser.add_argument("--blocks", default="16,32,66,132,264,0", help="block counts (0: the default, all SMs)")
    parser.add_argument("--halo-sizes", default="4096,8192", help="stencil n per rank, comma-separated")
    args = parser.parse_args()
    if not under_launcher():
        return run_under_mpiexec(args.np, [sys.executable, *sys.argv])
    comm = Communicator()
    use_local_gpu(comm)
    sizes = [int(s) << 20 for s in args.sizes.split(",")]
    blocks = [int(b) for b in args.blocks.split(",")]
    rows = launch_floor(comm, args.samples) + alltoall_rows(comm, sizes, blocks, args.samples)
    rows += halo_rows(comm, [int(n) for n in args.halo_sizes.split(",")], args.samples)
    if comm.rank == 0:
        config = {"sizes": sizes, "blocks": blocks, "halo_sizes": args.halo_sizes, "samples": args.samples}
        print(write_results(args.out, "tune-alltoall", machine_info(comm.size, gpus_used=comm.size), config, rows))
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
