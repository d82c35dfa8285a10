"""GPU checks between two ranks: overlap on streams, graph replays across GPUs, silent peers.

Run on exactly 2 ranks with GRIDCOMM_CHECK_DEVICE=gpu: one GPU each (chosen by runner.py), or, for the
silent-peer checks of ipc, nvshmem and the persistent stencil, both ranks on one GPU.
"""

from __future__ import annotations

import time

import cupy
import numpy as np
from checks_timeout import TIMEOUT_S, await_release, describe_timeout, release
from harness import (
    assert_everywhere,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    local_with_sentinel,
    random_global,
    ranks,
)

from gridcomm import CartesianDecomposition, GridcommError, GridcommTimeout, HaloExchanger, shmem
from gridcomm.lab.apps.stencil2d import Stencil2D
from gridcomm.transports import IpcTransport

GRAPH_TRANSPORTS = ("nccl", "ipc")
NVSHMEM_USABLE = shmem.unavailable_reason() is None
# Transports whose waits run on the GPU, with a time limit of their own.
GPU_WAIT_TRANSPORTS = {"ipc": "ipc", "ipc/two-way": IpcTransport(one_way_bytes=0)}
if NVSHMEM_USABLE:
    GPU_WAIT_TRANSPORTS["nvshmem"] = "nvshmem"
# Those that send before they wait for anything of the peer's (ipc's one-way protocol, at the sizes here): a peer
# arriving late finds the data of the exchange the other rank gave up on, whole, and its halos are right.
SENDS_FIRST = ("ipc",)


def _setup(comm, shape=(64, 48), halo=2, dtype="float64", seed=0):
    d = CartesianDecomposition(comm, shape, halo=halo, periodic=True, proc_grid=(2, 1))
    g = random_global(shape, dtype, seed)
    return d, g, cupy.array(local_with_sentinel(d, g))


def _wrong(d, f, g) -> str | None:
    return describe_mismatch(f.get(), expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil))


@ranks(only=[2])
def check_interior_work_on_another_stream_overlaps(comm):
    """start(exchange stream); a kernel on a second stream adds 1 to the interior points that are not sent;
    wait(); the halos and the interior work are both right (int64: exact, every bit pattern a number)."""
    problems = []
    for transport in ("staged", "nccl", "ipc"):
        d, g, f = _setup(comm, dtype="int64")
        exchange_stream, work_stream = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        deep = tuple(slice(2 * lo, n - 2 * hi) for n, (lo, hi) in zip(d.local_shape, d.halo, strict=True))
        with HaloExchanger(d, f, transport) as ex:
            handle = ex.start(exchange_stream)
            with work_stream:
                f[deep] += 1
            handle.wait()
            exchange_stream.synchronize()
            work_stream.synchronize()
        expect = expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)
        worked = local_with_sentinel(d, g)
        worked[deep] += 1
        expect[deep] = cell_bytes(np.ascontiguousarray(worked[deep]))
        if p := describe_mismatch(f.get(), expect):
            problems.append(f"{transport}: {p}")
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
        problems += _released(graph, f"{transport}, after the exchanger's close")
        d.comm.close()
    # A graph still alive when the communicator closes: NCCL would wait for it forever; close releases it.
    d, _, f = _setup(comm)
    graph = HaloExchanger(d, f, "nccl").capture()
    graph.launch(stream)
    stream.synchronize()
    d.comm.close()
    problems += _released(graph, "nccl, after the communicator's close")
    assert_everywhere(comm, "\n".join(problems) or None)


def _released(graph, when: str) -> list[str]:
    try:
        graph.launch()
    except GridcommError as exc:
        return [] if "released" in str(exc) else [f"{when}: launch() raised {exc}"]
    return [f"{when}: the captured exchange could still be launched"]


@ranks(only=[2])
def check_gpu_side_waits_time_out_then_recover(comm):
    """ipc and nvshmem (whose waits run on the GPU, and whose wait() is stream-ordered): rank 1 stays out;
    rank 0's wait() returns at once, its GPU-side wait gives up after the timeout, and the next check() raises
    GridcommTimeout naming rank 0, peer 1 and the exchange; a second check() does not. That exchange is
    abandoned: rank 1, arriving late, is told that rank 0 gave up on it instead of going on with halos never
    written, or, where rank 0 sent its halos before it waited (ipc's one-way protocol), finds them and is right.
    The next exchange is right on both ranks."""
    problems = []
    for name, transport in GPU_WAIT_TRANSPORTS.items():
        d, g, f = _setup(comm)
        ex = HaloExchanger(d, f, transport, timeout=TIMEOUT_S if comm.Get_rank() == 0 else None, on_timeout="raise")
        if comm.Get_rank() == 0:
            start = time.perf_counter()
            ex.start().wait()
            if time.perf_counter() - start > TIMEOUT_S / 2:
                problems.append(f"{name}: wait() blocked for {time.perf_counter() - start:.2f} s")
            cupy.cuda.Device().synchronize()  # the GPU-side wait has given up by now
            try:
                ex.check()
                problems.append(f"{name}: check() did not report the GPU-side wait that gave up")
            except Exception as exc:
                problems += [f"{name}: {p}" for p in describe_timeout(exc, time.perf_counter() - start)]
            try:
                ex.check()
            except Exception as exc:
                problems.append(f"{name}: a second check() raised {exc!r}")
            release(comm)
        else:
            await_release(comm)
            try:
                ex.exchange()  # the exchange rank 0 abandoned: told by the GPU, reported by the next check()
                cupy.cuda.Device().synchronize()
                ex.check()
                if name not in SENDS_FIRST:
                    problems.append(f"{name}: rank 1 was not told that rank 0 gave up on the exchange")
                elif p := _wrong(d, f, g):  # rank 0 sent before it waited: its data came
                    problems.append(f"{name}, rank 1, the exchange rank 0 gave up on: {p}")
            except GridcommTimeout as exc:
                if name in SENDS_FIRST or exc.peers != (0,) or "gave up" not in str(exc):
                    problems.append(f"{name}, rank 1: {exc}")
        comm.Barrier()
        f[...] = cupy.asarray(local_with_sentinel(d, g))
        cupy.cuda.Device().synchronize()
        ex.exchange()
        cupy.cuda.Device().synchronize()
        if p := _wrong(d, f, g):
            problems.append(f"{name}: the exchange after the recovery: {p}")
        ex.close()
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_persistent_stencil_silent_neighbour_times_out(comm):
    """The persistent stencil kernel on rank 1 waits for a neighbour (rank 0) that never steps: it stops after
    the timeout instead of spinning for ever, and synchronize() raises GridcommTimeout naming rank 1 and peer 0."""
    if not NVSHMEM_USABLE:
        return
    problems = []
    sim = Stencil2D(comm, 32, "float64", cupy, "persistent", timeout=TIMEOUT_S)
    if comm.Get_rank() == 1:
        start = time.monotonic()
        sim.step(5)
        try:
            sim.synchronize()
            problems.append("no timeout although rank 0 never stepped")
        except GridcommTimeout as exc:
            elapsed = time.monotonic() - start
            if exc.rank != 1 or tuple(exc.peers) != (0,) or "persistent" not in str(exc) or elapsed > TIMEOUT_S + 4:
                problems.append(f"GridcommTimeout {exc} (peers {exc.peers}) after {elapsed:.1f} s")
        release(comm, sender=1)
    else:
        await_release(comm, sender=1)
    sim.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_nccl_silent_peer_times_out(comm):
    """Rank 1 never joins. Rank 0's wait() is stream-ordered and returns at once; the watchdog aborts the NCCL
    communicator after the timeout (its kernels would spin on the GPU for ever), so the device synchronises, and
    check() then raises GridcommTimeout naming peer 1."""
    import cupy

    problems = []
    d, _, f = _setup(comm)
    ex = HaloExchanger(d, f, "nccl", timeout=TIMEOUT_S, on_timeout="raise")
    if comm.Get_rank() == 0:
        start = time.monotonic()
        try:
            ex.start().wait()
            if time.monotonic() - start > TIMEOUT_S / 2:
                problems.append(f"wait() blocked the host for {time.monotonic() - start:.1f} s")
            cupy.cuda.Device().synchronize()  # ends once the watchdog has aborted the communicator
            ex.check()
            problems.append("no timeout although rank 1 never started the exchange")
        except GridcommTimeout as exc:
            if exc.peers != (1,) or "nccl" not in str(exc) or time.monotonic() - start > TIMEOUT_S + 4:
                problems.append(f"GridcommTimeout {exc} after {time.monotonic() - start:.1f} s")
        except Exception as exc:
            problems.append(f"wait() or check() raised {type(exc).__name__}: {exc}")
        try:  # the aborted communicator is never used again, and says so
            ex.start()
            problems.append("start() on an exchanger whose NCCL communicator was aborted did not raise")
        except GridcommError as exc:
            if "aborted" not in str(exc):
                problems.append(f"start() after the abort: {exc}")
        ex.close()  # allowed: nothing is in flight on an aborted communicator
        release(comm)
    else:
        await_release(comm)
        nccl, d.comm.nccl = d.comm.nccl, None
        if nccl is not None:
            nccl.abort()
        ex.close()
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)
