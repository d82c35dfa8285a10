"""Choose the shape of gridcomm's copy kernels on this GPU: units in flight per thread (UNROLL) and blocks per
SM (BLOCKS_PER_SM, 0 = one block per chunk), each pair measured in one run on 2 GPUs:

- the ipc exchange of large contiguous blocks (graph replays, GB/s sent per rank) beside the peer-copy
  ceiling and NCCL's send/recv of the same bytes;
- the pack and unpack launches of large halos (GB/s read plus written) beside the HBM copy.

    python3 benchmarks/tune_copy.py --out DIR      (relaunches itself on 2 ranks)

Writes DIR/tune-copy-gpu-2r-<time>.json and prints one line per variant. The defaults in
gridcomm/packing/cuda.py come from this run (docs/design.md gives the figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from pathlib import Path

from gridcomm.bench.ceilings import hbm_copy_gbps
from gridcomm.bench.halo import HaloCase, pack_unpack_gbps
from gridcomm.bench.machine import machine_info
from gridcomm.bench.results import write_results
from gridcomm.bench.transfer import run_transfer
from gridcomm.comm import Communicator
from gridcomm.gpu import use_local_gpu
from gridcomm.launch import run_under_mpiexec, under_launcher
from gridcomm.packing import cuda

SIZES = (8 << 20, 128 << 20)  # bytes per peer
HALOS = (HaloCase(512, 16, 60, 3), HaloCase(256, 4, 60, 3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--unroll", default="1,2,4,8")
    parser.add_argument("--blocks-per-sm", default="0,4,8")
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    if not under_launcher():
        return run_under_mpiexec(2, [sys.executable, __file__, *sys.argv[1:]])
    comm = Communicator()
    use_local_gpu(comm)
    hbm = hbm_copy_gbps(comm)
    rows = []
    variants = itertools.product(
        (int(u) for u in args.unroll.split(",")), (int(b) for b in args.blocks_per_sm.split(","))
    )
    for unroll, blocks_per_sm in variants:
        cuda.UNROLL, cuda.BLOCKS_PER_SM = unroll, blocks_per_sm
        transfer = run_transfer(comm, SIZES, {"ipc": "ipc"}, args.samples)
        halos = [pack_unpack_gbps(comm, case, args.samples) for case in HALOS]
        row = {
            "unroll": unroll,
            "blocks_per_sm": blocks_per_sm,
            "ipc": [
                {
                    "bytes_per_peer": r["bytes_per_peer"],
                    "ipc_graph_GBps": r["GBps"]["ipc graph"],
                    "ceiling_GBps": r["ceiling_GBps"],
                    "nccl_GBps": r["GBps"]["nccl send/recv"],
                }
                for r in transfer
            ],
            "halos": [
                {"n": c.n, "fields": c.fields, "pack_GBps": p, "unpack_GBps": u, "hbm_copy_GBps": hbm}
                for c, (p, u) in zip(HALOS, halos, strict=True)
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
                f"n{h['n']}x{h['fields']} pack {h['pack_GBps']:.0f} unpack {h['unpack_GBps']:.0f}" for h in row["halos"]
            )
            print(f"unroll {unroll} blocks/SM {blocks_per_sm}: ipc {ipc} | {packs} | hbm {hbm:.0f}", flush=True)
    if comm.rank == 0:
        config = {"sizes": list(SIZES), "halos": [dataclasses.asdict(c) for c in HALOS], "samples": args.samples}
        print(write_results(args.out, "tune-copy", machine_info(comm.size, gpus_used=comm.size), config, rows))
    comm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
