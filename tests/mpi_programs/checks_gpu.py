"""GPU checks that need a peer GPU: overlap on streams, graph replays across GPUs, silent peers.

Run on exactly 2 ranks with GRIDCOMM_CHECK_DEVICE=gpu (one GPU each, chosen by runner.py).
"""

from __future__ import annotations

import time

import cupy
import numpy as np
from checks_timeout import TIMEOUT_S, await_release, describe_timeout, release
from harness import assert_everywhere, describe_mismatch, expected_cells, local_with_sentinel, random_global, ranks

from gridcomm import CartesianDecomposition, GridcommTimeout, HaloExchanger

GRAPH_TRANSPORTS = ("nccl", "ipc")


def _setup(comm, shape=(64, 48), halo=2, dtype="float64", seed=0):
    d = CartesianDecomposition(comm, shape, halo=halo, periodic=True, proc_grid=(2, 1))
    g = random_global(shape, dtype, seed)
    return d, g, cupy.array(local_with_sentinel(d, g))


def _wrong(d, f, g) -> str | None:
    return describe_mismatch(f.get(), expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil))


@ranks(only=[2])
def check_interior_work_on_another_stream_overlaps(comm):
    """start(exchange stream); a kernel on a second stream scales the interior points that are not sent;
    wait(); both results are right."""
    problems = []
    for transport in ("staged", "nccl", "ipc"):
        d, g, f = _setup(comm)
        exchange_stream, work_stream = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        deep = tuple(slice(2 * lo, n - 2 * hi) for n, (lo, hi) in zip(d.local_shape, d.halo, strict=True))
        with HaloExchanger(d, f, transport) as ex:
            handle = ex.start(exchange_stream)
            with work_stream:
                f[deep] *= 2.0
            handle.wait()
            exchange_stream.synchronize()
            work_stream.synchronize()
        expect = local_with_sentinel(d, g)
        expect[deep] *= 2.0
        got = f.get()
        got[deep] /= 2.0
        if p := _wrong(d, cupy.asarray(got), g):
            problems.append(f"{transport}: {p}")
        if not np.array_equal(f.get()[deep], expect[deep]):
            problems.append(f"{transport}: the interior work on the second stream was lost")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_graph_replays_across_gpus(comm):
    """A captured exchange, replayed several times with new data in between, moves each round's data."""
    problems = []
    for transport in GRAPH_TRANSPORTS:
        d, g, f = _setup(comm, dtype="int32")
        with HaloExchanger(d, f, transport) as ex:
            graph = ex.capture()
            stream = cupy.cuda.Stream(non_blocking=True)
            for round_ in range(4):
                g = random_global(d.global_shape, "int32", 100 + round_)
                f[d.interior_slices] = cupy.asarray(g[d.global_slices])
                cupy.cuda.Device().synchronize()
                comm.Barrier()
                graph.launch(stream)
                stream.synchronize()
                ex.check()
                if p := _wrong(d, f, g):
                    problems.append(f"{transport}, replay {round_}: {p}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_ipc_silent_peer_times_out_then_recovers(comm):
    """Rank 1 stays out; rank 0's GPU-side wait gives up after the timeout, wait() raises GridcommTimeout
    naming rank 0, peer 1 and the exchange; once rank 1 joins, wait() again completes the exchange."""
    problems = []
    d, g, f = _setup(comm)
    ex = HaloExchanger(d, f, "ipc", timeout=TIMEOUT_S if comm.Get_rank() == 0 else None)
    if comm.Get_rank() == 0:
        handle = ex.start()
        start = time.monotonic()
        try:
            handle.wait()
            problems.append("no timeout although rank 1 never started the exchange")
        except Exception as exc:
            problems += describe_timeout(exc, time.monotonic() - start)
        release(comm)
        handle.wait()
    else:
        await_release(comm)
        ex.exchange()
    cupy.cuda.Device().synchronize()
    if p := _wrong(d, f, g):
        problems.append(f"after recovery: {p}")
    ex.close()
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_nccl_silent_peer_times_out(comm):
    """Rank 1 never joins; rank 0's wait() raises GridcommTimeout naming peer 1 and aborts the NCCL
    communicator instead of leaving its kernels spinning on the GPU."""
    problems = []
    d, _, f = _setup(comm)
    ex = HaloExchanger(d, f, "nccl", timeout=TIMEOUT_S)
    if comm.Get_rank() == 0:
        start = time.monotonic()
        try:
            ex.start().wait()
            problems.append("no timeout although rank 1 never started the exchange")
        except GridcommTimeout as exc:
            if exc.peers != (1,) or "nccl" not in str(exc) or time.monotonic() - start > TIMEOUT_S + 4:
                problems.append(f"GridcommTimeout {exc} after {time.monotonic() - start:.1f} s")
        except Exception as exc:
            problems.append(f"wait() raised {type(exc).__name__}: {exc}")
        release(comm)
    else:
        await_release(comm)
        nccl = d.comm.facts.pop("nccl", None)
        if nccl is not None:
            nccl.abort()
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)
