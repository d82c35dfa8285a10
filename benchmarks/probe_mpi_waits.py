"""Where a small host transposition loses to one blocking MPI call: the same slab redistribution (an N³ float64
array split along axis 0 -> split along axis 1, MPI subarray datatypes, what mpi4py-fft's ``Pencil.transfer``
sends) completed in different ways, so that the MPI algorithm and the way the host waits are told apart:

- ``Alltoallw``: one blocking collective (mpi4py-fft);
- ``Ialltoallw + Wait``: the non-blocking collective, waited for inside MPI (a C spin);
- ``Ialltoallw + poll``: the same, waited for as gridcomm waits (``waiting.poll_until``: test, yield the core);
- ``Ialltoallw + spin``: tests in a Python loop without yielding;
- ``p2p + Waitall`` / ``p2p + poll``: persistent sends and receives of the same datatypes (gridcomm's
  ``mpi`` p2p/datatype channel), waited for inside MPI, as gridcomm waits, as gridcomm waits but testing one
  request per turn (``poll each``), or by Testall in a loop without yielding (``spin``);
- ``Transposer ...``: gridcomm's Transposer over those two MPI configurations, the whole call.

With ``--profile`` rank 0 also prints a cProfile of 2,000 calls of the Transposer over p2p/datatype. Each size also
times, on every rank, the Transposer's ``start()`` and ``wait()`` apart and the bare loop's ``Startall`` and
``Waitall`` apart (``steps``: the fastest, median and slowest rank's median).

    mpiexec -n 16 python benchmarks/probe_mpi_waits.py --sizes 32,64,128 --out DIR

Prints one line per size (µs per transposition: each sample the slowest rank's mean over a batch; median of
the samples) and writes DIR/probe-mpi-waits-cpu-<ranks>r-<time>.json.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

import numpy as np
from mpi4py import MPI

from gridcomm import mpi_waits
from gridcomm.comm import Communicator
from gridcomm.lab.bench.results import write_results
from gridcomm.lab.measure.machine import machine_info
from gridcomm.lab.measure.timing import time_collective
from gridcomm.transports import MpiTransport
from gridcomm.transpose import Transposer
from gridcomm.waiting import poll_until

SAMPLES = 7
MIN_SAMPLE_S = 0.05  # seconds of calls in each sample


def slab_types(n: int, ranks: int, rank: int) -> tuple[np.ndarray, np.ndarray, list, list]:
    """This rank's slab before (rows of axis 0) and after (columns of axis 1), and the subarray types of the
    block it sends to and receives from each rank."""
    share = [n // ranks + (r < n % ranks) for r in range(ranks)]
    start = np.concatenate([[0], np.cumsum(share)])
    before = np.random.default_rng(rank).random((share[rank], n, n))
    after = np.empty((n, share[rank], n))
    sends, recvs = [], []
    for peer in range(ranks):
        sends.append(MPI.DOUBLE.Create_subarray(before.shape, (share[rank], share[peer], n), (0, start[peer], 0)))
        recvs.append(MPI.DOUBLE.Create_subarray(after.shape, (share[peer], share[rank], n), (start[peer], 0, 0)))
    for t in sends + recvs:
        t.Commit()
    return before, after, sends, recvs


def _steps(mpi: MPI.Comm, transposer: Transposer, p2p: list, calls: int = 2000) -> dict[str, dict[str, float]]:
    """Where a call's time goes, on every rank: the Transposer's ``start()`` (post, own copy) and ``wait()``, and
    the bare loop's ``Startall`` and ``Waitall`` of the same requests. Seconds per call, each rank's median over
    ``calls``; the fastest, median and slowest rank's (a rank whose share is late holds everyone)."""
    mine: dict[str, list[float]] = {"Transposer start": [], "Transposer wait": [], "Startall": [], "Waitall": []}
    inside = _time_blocking_waits()  # where a blocking wait's time goes, if the Transposer waits so
    for _ in range(calls):
        t0 = perf_counter()
        handle = transposer.start()
        t1 = perf_counter()
        handle.wait()
        t2 = perf_counter()
        MPI.Prequest.Startall(p2p)
        t3 = perf_counter()
        MPI.Request.Waitall(p2p)
        t4 = perf_counter()
        for key, seconds in zip(mine, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            mine[key].append(seconds)
    medians = {key: float(np.median(values)) for key, values in mine.items()}
    medians |= {key: total / calls for key, total in inside.items()}  # means over the calls
    _time_blocking_waits(undo=True)
    every = mpi.allgather(medians)
    return {
        key: {"fastest": min(m[key] for m in every), "median": float(np.median([m[key] for m in every])),
              "slowest": max(m[key] for m in every)}
        for key in medians
    }  # fmt: skip


def _time_blocking_waits(undo: bool = False) -> dict[str, float]:
    """Wraps the steps of every blocking wait (gridcomm.mpi_waits.BlockingWait) with timers: seconds in the
    receives' Waitall and in the loop testing the sends (totals over the calls, filled in as they run).
    ``undo``: unwrap."""
    totals = {"in receives' Waitall": 0.0, "in sends' test loop": 0.0}
    names = {"_receive": "in receives' Waitall", "_spin": "in sends' test loop"}
    for wait in list(mpi_waits._WATCHDOG._waits):
        for attribute in names:
            wait.__dict__.pop(attribute, None)
        if undo:
            continue

        def timed(call: Callable, key: str) -> Callable:
            def run(*args: object) -> object:
                t0 = perf_counter()
                try:
                    return call(*args)
                finally:
                    totals[key] += perf_counter() - t0

            return run

        for attribute, key in names.items():
            setattr(wait, attribute, timed(getattr(wait, attribute), key))
    return totals


def probe(comm: Communicator, n: int, profile: bool = False) -> dict:
    """Every way at N = ``n``, each first checked equal to the blocking call's result (collective)."""
    mpi = comm.mpi
    before, after, sends, recvs = slab_types(n, mpi.size, mpi.rank)
    ones, zeros = [1] * mpi.size, [0] * mpi.size
    send, recv = [before, ones, zeros, sends], [after, ones, zeros, recvs]
    p2p = [mpi.Recv_init([after, 1, recvs[p]], p, 7) for p in range(mpi.size)]
    p2p += [mpi.Send_init([before, 1, sends[p]], p, 7) for p in range(mpi.size)]

    def late(elapsed: float) -> Exception:
        return TimeoutError(f"rank {mpi.rank}: transposition not done after {elapsed:.1f} s")

    def spin(request: MPI.Request) -> None:
        while not request.Test():
            pass

    def p2p_poll() -> None:
        MPI.Prequest.Startall(p2p)
        poll_until(lambda: MPI.Request.Testall(p2p), 60.0, late)

    def p2p_poll_each() -> None:  # one request tested per turn: a progress call at a fraction of Testall's cost
        MPI.Prequest.Startall(p2p)
        left = list(p2p)

        def done() -> bool:
            while left and left[-1].Test():
                left.pop()
            return not left

        poll_until(done, 60.0, late)

    def p2p_spin() -> None:
        MPI.Prequest.Startall(p2p)
        while not MPI.Request.Testall(p2p):
            pass

    def p2p_wait() -> None:
        MPI.Prequest.Startall(p2p)
        MPI.Request.Waitall(p2p)

    ways: dict[str, Callable[[], None]] = {
        "Alltoallw": lambda: mpi.Alltoallw(send, recv),
        "Ialltoallw + Wait": lambda: mpi.Ialltoallw(send, recv).Wait(),
        "Ialltoallw + poll": lambda: poll_until(mpi.Ialltoallw(send, recv).Test, 60.0, late),
        "Ialltoallw + spin": lambda: spin(mpi.Ialltoallw(send, recv)),
        "p2p + Waitall": p2p_wait,
        "p2p + poll": p2p_poll,
        "p2p + poll each": p2p_poll_each,
        "p2p + spin": p2p_spin,
    }
    shape = (n, n, n)
    transposers = {
        f"Transposer {label}": Transposer.slabs(comm, shape, 0, 1, before, after, transport)
        for label, transport in (
            ("p2p/datatype", MpiTransport("p2p", "datatype")),
            ("neighbor/datatype", MpiTransport("neighbor", "datatype")),
        )
    }
    ways |= {name: t.exchange for name, t in transposers.items()}
    # The Transposer's own requests and copy without the rest of gridcomm: what its MPI part costs, waited for in
    # one Waitall or as its blocking wait does (the receives' Waitall, then the sends tested in a loop).
    mine = transposers["Transposer p2p/datatype"]
    channel, own = mine._groups[0].channel, mine._own_copier
    own_copy = own.copy if own is not None else (lambda: None)

    def its_requests_waitall() -> None:
        MPI.Prequest.Startall(channel._all)
        own_copy()
        MPI.Request.Waitall(channel._all)

    def split(recvs: list, sends: list, copy_at: str) -> Callable[[], None]:
        """The requests completed as the blocking wait does (the receives' Waitall, then the sends tested in a
        loop), the own block copied ``first`` (before posting), once ``posted`` or once ``received``."""
        every = recvs + sends

        def run() -> None:
            if copy_at == "first":
                own_copy()
            MPI.Prequest.Startall(every)
            if copy_at == "posted":
                own_copy()
            MPI.Request.Waitall(recvs)
            if copy_at == "received":
                own_copy()
            while not MPI.Request.Testall(sends):
                pass

        return run

    def ring(requests: list, peers: list) -> list:  # from the next rank on, as the ring goes
        return [r for _, r in sorted(zip(((p - mpi.rank) % mpi.size for p in peers), requests, strict=True))]

    ring_recvs, ring_sends = ring(channel._recvs, channel._recv_peers), ring(channel._sends, channel._send_peers)
    ways |= {
        "its requests in ring order, copy after receives": split(ring_recvs, ring_sends, "received"),
        "its requests, copy first, split": split(channel._recvs, channel._sends, "first"),
        "its requests, copy after receives": split(channel._recvs, channel._sends, "received"),
        "its requests + copy, Waitall": its_requests_waitall,
        "its requests + copy, split": split(channel._recvs, channel._sends, "posted"),
        "its own copy alone": own_copy,
    }
    expect = np.empty_like(after)
    mpi.Alltoallw(send, [expect, ones, zeros, recvs])
    row = {"n": n, "ranks": mpi.size, "seconds": {}}
    for name, run in ways.items():
        after.fill(0)
        run()
        if name != "its own copy alone" and not np.array_equal(after, expect):  # that one moves a part
            raise SystemExit(f"rank {mpi.rank}: {name} moved other values than Alltoallw at N = {n}")
        row["seconds"][name] = time_collective(mpi, run, samples=SAMPLES, min_sample_s=MIN_SAMPLE_S).median
    row["steps"] = _steps(mpi, transposers["Transposer p2p/datatype"], p2p)
    if profile and mpi.rank == 0:
        found = cProfile.Profile()
        found.runcall(lambda: [transposers["Transposer p2p/datatype"].exchange() for _ in range(2000)])
        text = io.StringIO()
        pstats.Stats(found, stream=text).sort_stats("tottime").print_stats(15)
        print(text.getvalue(), flush=True)
    elif profile:
        for _ in range(2000):
            transposers["Transposer p2p/datatype"].exchange()
    for t in transposers.values():
        t.close()
    for request in p2p:
        request.Free()
    for t in sends + recvs:
        t.Free()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="32,64,128")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--profile", action="store_true", help="a cProfile of the Transposer on rank 0")
    args = parser.parse_args()
    comm, rows = Communicator(), []
    mpi = comm.mpi
    for n in (int(x) for x in args.sizes.split(",")):
        rows.append(probe(comm, n, args.profile))
        if mpi.rank == 0:
            times = ", ".join(f"{k} {v * 1e6:.1f}" for k, v in rows[-1]["seconds"].items())
            print(f"N={n}: {times} us", flush=True)
            steps = ", ".join(
                f"{k} {v['fastest'] * 1e6:.1f}/{v['median'] * 1e6:.1f}/{v['slowest'] * 1e6:.1f}"
                for k, v in rows[-1]["steps"].items()
            )
            print(f"  steps (fastest/median/slowest rank's median): {steps} us", flush=True)
    if mpi.rank == 0:
        config = {"sizes": [r["n"] for r in rows], "samples": SAMPLES, "cores": len(os.sched_getaffinity(0))}
        path = write_results(args.out, "probe-mpi-waits", machine_info(mpi.size, gpus_used=0), config, rows)
        print(f"results: {path}")


if __name__ == "__main__":
    main()
