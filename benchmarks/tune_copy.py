"""Choose the shape of gridcomm's copy kernels on this GPU: units in flight per thread (UNROLL) and blocks per
SM (BLOCKS_PER_SM) and the units of a piece dealt out in turn (PIECE_UNITS, 0 = one contiguous share per
block), each variant measured in one run on 2 GPUs:

- the ipc exchange of large contiguous blocks (graph replays, GB/s sent per rank) beside the peer-copy
  ceiling and NCCL's send/recv of the same bytes;
- the pack and unpack launches of large halos (GB/s read plus written) beside the HBM copy, each rank's
  timed alone;
- the same kernel copying one contiguous block of CONTIGUOUS bytes: what it does where every run is long.

    python3 benchmarks/tune_copy.py --out DIR [--halos-only]     (relaunches itself on 2 ranks)

``--halos-only`` leaves the ipc transfers out: the pack and unpack figures are right with both ranks on one
GPU too (each rank is timed while the other waits).

Writes DIR/tune-copy-gpu-2r-<time>.json and prints one line per variant. The defaults in
gridcomm/packing/cuda.py come from this run (docs/design.md gives the figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from pathlib import Path

import cupy

from gridcomm.comm import Communicator
from gridcomm.gpu import gpus_in_use, use_local_gpu
from gridcomm.lab.bench.ceilings import hbm_copy_gbps, time_gpu_alone
from gridcomm.lab.bench.halo import HaloCase, pack_unpack_gbps
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.bench.transfer import run_transfer
from gridcomm.lab.measure.machine import machine_info
from gridcomm.launch import run_under_mpiexec, under_launcher
from gridcomm.packing import cuda
from gridcomm.packing.geometry import RunGrid
from gridcomm.packing.table import Descriptors

SIZES = (8 << 20, 128 << 20)  # bytes per peer
CONTIGUOUS = 1 << 30
HALOS = (HaloCase(2048, 16, 60, 3), HaloCase(1024, 16, 60, 3), HaloCase(512, 16, 60, 3), HaloCase(256, 4, 60, 3))


def contiguous_gbps(comm: Communicator, nbytes: int, samples: int) -> float:
    """The copy kernel moving one contiguous block of ``nbytes`` on each GPU [GB/s read plus written, slowest
    rank, each timed alone]."""
    src, dst = cuda.device_allocation(nbytes), cuda.device_allocation(nbytes)
    src.fill(1)
    whole = RunGrid(start=0, n0=1, n1=1, stride0=0, stride1=0, run_bytes=nbytes)
    rows = Descriptors(cupy)
    rows.add(src.data.ptr, whole, dst.data.ptr, whole)
    table = cuda.SegmentTable(rows)
    t = time_gpu_alone(comm, lambda: table.copy(None), samples)
    if not bool((dst == 1).all()):
        raise AssertionError("the copy kernel left bytes of the contiguous block unwritten")
    return min(comm.mpi.allgather(2 * nbytes / t.median / 1e9))


def halo_case(text: str) -> HaloCase:
    """``n x fields`` or ``n x fields x levels`` (60 levels by default: runs of 1440 bytes), halo 3."""
    n, fields, *levels = (int(x) for x in text.split("x"))
    return HaloCase(n, fields, levels[0] if levels else 60, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--unroll", default="1,2,4,8")
    parser.add_argument("--blocks-per-sm", default="4,8,16")
    parser.add_argument("--piece-units", default="0", help="units per piece dealt out in turn (0: one share)")
    parser.add_argument("--halos", default=",".join(f"{c.n}x{c.fields}" for c in HALOS),
                        help="halo cases n x fields [x levels], comma-separated (60 levels unless given)")  # fmt: skip
    parser.add_argument("--halos-only", action="store_true", help="leave the ipc transfers out")
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    if not under_launcher():
        return run_under_mpiexec(2, [sys.executable, __file__, *sys.argv[1:]])
    halos = [halo_case(case) for case in args.halos.split(",")]
    comm = Communicator()
    use_local_gpu(comm)
    hbm = hbm_copy_gbps(comm)
    rows = []
    variants = itertools.product(
        (int(u) for u in args.unroll.split(",")),
        (int(b) for b in args.blocks_per_sm.split(",")),
        (int(p) for p in args.piece_units.split(",")),
    )
    for unroll, blocks_per_sm, piece_units in variants:
        cuda.UNROLL, cuda.BLOCKS_PER_SM, cuda.PIECE_UNITS = unroll, blocks_per_sm, piece_units
        transfer = [] if args.halos_only else run_transfer(comm, SIZES, {"ipc": "ipc"}, args.samples)[0]
        rates = []
        for case in halos:
            rates.append(pack_unpack_gbps(comm, case, args.samples))
            cupy.get_default_memory_pool().free_all_blocks()  # the next case's fields, and cudaMalloc's, need it
        contiguous = contiguous_gbps(comm, CONTIGUOUS, args.samples)
        row = {
            "unroll": unroll,
            "blocks_per_sm": blocks_per_sm,
            "piece_units": piece_units,
            "ipc": [
                {
                    "bytes_per_peer": r["bytes_per_peer"],
                    "ipc_graph_GBps": r["GBps"]["ipc graph"],
                    "ceiling_GBps": r["ceiling_GBps"],
                    "nccl_GBps": r["GBps"]["nccl send/recv"],
                }
                for r in transfer
            ],
            "contiguous_GBps": contiguous,
            "halos": [
                {**dataclasses.asdict(c), "pack_GBps": p, "unpack_GBps": u, "hbm_copy_GBps": hbm}
                for c, (p, u) in zip(halos, rates, strict=True)
            ],
        }
        rows.append(row)
        if comm.rank == 0:
            ipc = "  ".join(
                f"{x['bytes_per_peer'] >> 20} MiB {x['ipc_graph_GBps']:.0f}/{x['ceiling_GBps']:.0f}"
                f" (nccl {x['nccl_GBps']:.0f})"
                for x in row["ipc"]
            )
            packs = "  ".join(
                f"n{h['n']}x{h['fields']}x{h['levels']} pack {h['pack_GBps']:.0f} unpack {h['unpack_GBps']:.0f}"
                for h in row["halos"]
            )
            print(
                f"unroll {unroll} blocks/SM {blocks_per_sm} pieces {piece_units}: ipc {ipc} | {packs} | "
                f"contiguous {contiguous:.0f} | hbm {hbm:.0f}",
                flush=True,
            )
    gpus = gpus_in_use(comm)
    if comm.rank == 0:
        sizes = [] if args.halos_only else list(SIZES)
        config = {"sizes": sizes, "halos": [dataclasses.asdict(c) for c in halos], "samples": args.samples}
        print(write_results(args.out, "tune-copy", machine_info(comm.size, gpus_used=gpus), config, rows))
    comm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
