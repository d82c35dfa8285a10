"""How long a host-waited GPU operation takes before and after NVSHMEM is started, and which CPUs each thread of
the rank may run on: the check behind "host waits took 4 ms once NVSHMEM was started" (docs/nvshmem.md).

Each rank times ``ROUNDS`` round trips of a one-element kernel that the host waits for with gridcomm's own
wait (``waiting.wait_on_stream``: spin, yielding the core), first in a process without NVSHMEM, then after
``shmem.initialise``. NVSHMEM starts a proxy thread per process that polls without ever sleeping; a thread
inherits its creator's CPU affinity, so under a launcher that binds each rank to one core (Open MPI does for
2 ranks or fewer) the proxy and the rank's own thread share that core, and every yield of the waiting thread
hands the core to the proxy until the scheduler's next tick.

    mpirun -np 2 python3 benchmarks/probe_host_waits.py --out DIR [--label NAME]

Run it as it is launched in the gpu_session.sh stage (with and without the launcher's binding); writes
DIR/probe-host-waits[-NAME]-gpu-<ranks>r-<time>.json and prints one line per rank and phase.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import cupy
import numpy as np

from gridcomm import shmem
from gridcomm.comm import Communicator
from gridcomm.errors import GridcommTimeout
from gridcomm.gpu import gpus_in_use, use_local_gpu
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info
from gridcomm.waiting import wait_on_stream

ROUNDS = 300


def threads() -> list[dict[str, str]]:
    """Every thread of this process: its name and the CPUs it may run on."""
    rows = []
    for task in sorted(Path("/proc/self/task").iterdir(), key=lambda p: int(p.name)):
        try:
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        allowed = next((line.split(":", 1)[1].strip() for line in status if line.startswith("Cpus_allowed_list")), "")
        rows.append({"tid": task.name, "name": name, "cpus_allowed": allowed})
    return rows


def host_waits(stream: Any, rounds: int, rank: int) -> dict[str, float]:
    """``rounds`` round trips of a one-element kernel, each waited for on the host [µs: median, 90th
    percentile, largest]."""
    x = cupy.zeros(1)
    event = cupy.cuda.Event(disable_timing=True)

    def late(elapsed: float) -> Exception:
        return GridcommTimeout("a one-element kernel", rank, [], elapsed)

    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        with stream:
            x += 1
        wait_on_stream(stream, event, 10.0, late)
        times.append(time.perf_counter() - start)
    us = np.array(times) * 1e6
    return {"median_us": float(np.median(us)), "p90_us": float(np.percentile(us, 90)), "max_us": float(us.max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--label", default="", help="a name for this launch (e.g. bound, unbound)")
    args = parser.parse_args()
    comm = Communicator()
    use_local_gpu(comm)
    stream = cupy.cuda.Stream(non_blocking=True)
    host_waits(stream, 20, comm.rank)  # compile and warm up
    row: dict[str, Any] = {"rank": comm.rank, "affinity": sorted(os.sched_getaffinity(0))}
    row["before"] = host_waits(stream, ROUNDS, comm.rank)
    reason = shmem.unavailable_reason()
    if reason is None:
        shmem.initialise(comm)
        comm.mpi.Barrier()
        row["after_nvshmem"] = host_waits(stream, ROUNDS, comm.rank)
    else:
        row["nvshmem_unusable"] = reason
    row["threads"] = threads()
    rows = comm.mpi.gather(row, root=0)
    gpus = gpus_in_use(comm)  # collective
    if comm.rank == 0:
        for r in rows:
            after = r.get("after_nvshmem")
            print(
                f"rank {r['rank']} cpus {len(r['affinity'])}: before {r['before']['median_us']:.1f} µs "
                f"(p90 {r['before']['p90_us']:.1f})"
                + (f", after NVSHMEM {after['median_us']:.1f} µs (p90 {after['p90_us']:.1f})" if after else "")
                + f"; threads {[(t['name'], t['cpus_allowed']) for t in r['threads']]}",
                flush=True,
            )
        name = "probe-host-waits" + (f"-{args.label}" if args.label else "")
        config = {"rounds": ROUNDS, "label": args.label}
        print(write_results(args.out, name, machine_info(comm.size, gpus_used=gpus), config, rows))
    comm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
