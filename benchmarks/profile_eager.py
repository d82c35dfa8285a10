"""Where the host time of an exchange called from Python goes (issue: the eager path), one rank per GPU.

A ring of ranks, 8 B per peer (one float64 halo cell each side), GPU fields. For each graph-capturable transport,
with each part enqueued from Python (``replay`` off) and with the exchanger's own graph launched (``replay`` on):
the host time spent inside ``start()`` and inside ``wait()`` per exchange (medians over the ranks' medians), one
replayed exchange's host time into an idle stream beside its bare graph launch, then on rank 0 a cProfile of the
replayed and the enqueued path: the functions with the most time of their own.

    mpiexec -n 2 python benchmarks/profile_eager.py --out results/
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import json
import pstats
import time
from collections.abc import Callable
from pathlib import Path

import cupy
import numpy as np
from mpi4py import MPI

import gridcomm
from gridcomm.device import libcuda
from gridcomm.lab.measure.machine import machine_info

EXCHANGES = 3000


def _host_times(ex: gridcomm.HaloExchanger, n: int) -> tuple[float, float, float]:
    """Median host seconds in start(), in wait(), and per whole exchange (the loop's mean), over ``n`` calls."""
    starts, waits = np.empty(n), np.empty(n)
    began = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        handle = ex.start()
        t1 = time.perf_counter()
        handle.wait()
        waits[i], starts[i] = time.perf_counter() - t1, t1 - t0
    return float(np.median(starts)), float(np.median(waits)), (time.perf_counter() - began) / n


def _mean_call_s(call: Callable[[], object], n: int) -> float:
    """Mean host seconds of ``call()`` over ``n`` calls (after as many to warm up)."""
    for _ in range(n):
        call()
    began = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - began) / n


def _replay_parts(ex: gridcomm.HaloExchanger, n: int) -> dict[str, float]:
    """Host seconds of the calls a replayed exchange makes, each alone: what ``start()`` adds to them is Python.

    Every rank makes the same calls, so the exchanger's graph launched bare still meets its peers' launches."""
    stream = cupy.cuda.get_current_stream()
    graph = ex._replayed[1]._graph
    parts = {
        "get_current_stream": _mean_call_s(cupy.cuda.get_current_stream, n),
        "is_capturing": _mean_call_s(stream.is_capturing, n),
        "graph_launch": _mean_call_s(lambda: graph.launch(stream), n),
        "start_wait": _mean_call_s(lambda: ex.start(stream).wait(), n),
    }
    stream.synchronize()
    return parts


def _one_launch_s(launch: Callable[[], object], stream: cupy.cuda.Stream, n: int) -> float:
    """Median host seconds of one ``launch()`` into an idle stream (synchronised between launches, untimed): what
    an eager step pays per launch when the GPU keeps up, as at a small stencil step."""
    seconds = np.empty(n)
    for i in range(n):
        stream.synchronize()
        began = time.perf_counter()
        launch()
        seconds[i] = time.perf_counter() - began
    stream.synchronize()
    return float(np.median(seconds))


def _exchange_launches(ex: gridcomm.HaloExchanger, n: int) -> dict[str, float]:
    """Host seconds of one replayed exchange into an idle stream: its graph launched bare (every rank alike), and
    the exchange whole (start and wait): the difference is what gridcomm adds to the graph launch."""
    stream = cupy.cuda.get_current_stream()
    graph = ex._replayed[1]._graph
    return {
        "exchange_graph": _one_launch_s(lambda: graph.launch(stream), stream, n),
        "exchange_start_wait": _one_launch_s(lambda: ex.start(stream).wait(), stream, n),
    }


def _launch_floor(ex: gridcomm.HaloExchanger, n: int) -> dict[str, float]:
    """Host seconds of one launch into an idle stream, each way a step could make it: the exchanger's own graph
    (every rank launches it alike), the exchange whole (start and wait), an empty kernel through CuPy, the same
    through the driver's cuLaunchKernel from ctypes, and a kernel of the stencil's arguments through CuPy."""
    stream = cupy.cuda.get_current_stream()
    empty = cupy.RawKernel('extern "C" __global__ void empty() {}', "empty")
    seven = cupy.RawKernel(
        'extern "C" __global__ void seven(const double* u, double* v, long long pitch, int a, int b, int c, int d, '
        "double w) {}",
        "seven",
    )
    u = cupy.zeros(16)
    seven_args = (u, u, np.int64(4), np.int32(1), np.int32(3), np.int32(1), np.int32(3), np.float64(0.2))
    driver = libcuda()
    driver.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    empty((1,), (1,), ())  # loaded before its handle is read
    function, stream_ptr = empty.kernel.ptr, stream.ptr
    return {
        **_exchange_launches(ex, n),
        "empty_kernel_cupy": _one_launch_s(lambda: empty((1,), (1,), ()), stream, n),
        "empty_kernel_ctypes": _one_launch_s(
            lambda: driver.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream_ptr, None, None), stream, n
        ),
        "stencil_like_kernel_cupy": _one_launch_s(lambda: seven((1,), (32,), seven_args), stream, n),
    }


def _gathered(world: MPI.Comm, rows: list[dict], key: str, label: str, mine: dict[str, float]) -> None:
    """On rank 0: the medians over the ranks of ``mine`` (seconds) into the last row under ``key``, and printed."""
    every = world.gather(mine, root=0)
    if world.rank == 0:
        medians = {k: float(np.median([p[k] for p in every])) for k in mine}
        rows[-1][key] = medians
        print(f"      {label}: " + "  ".join(f"{k} {v * 1e6:.2f} µs" for k, v in medians.items()), flush=True)


def _profile(ex: gridcomm.HaloExchanger, n: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        ex.exchange()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    cupy.cuda.Device(world.rank % cupy.cuda.runtime.getDeviceCount()).use()
    rows, profiles = [], {}
    with gridcomm.Communicator(world) as comm:
        d = gridcomm.CartesianDecomposition(comm, (4 * comm.size,), halo=1, periodic=True, proc_grid=(comm.size,))
        field = d.zeros(xp=cupy)
        for transport in ("ipc", "nccl"):
            with gridcomm.HaloExchanger(d, field, transport) as ex:
                for replay in (False, True) if ex.replay else (False,):  # replay: where the transport can
                    ex.replay = replay
                    _host_times(ex, 300)  # warm up (the first replay captures its graph)
                    start_s, wait_s, each_s = _host_times(ex, EXCHANGES)
                    mine = np.array([start_s, wait_s, each_s])
                    every = world.gather(mine, root=0)
                    if world.rank == 0:
                        s, w, e = np.median(np.array(every), axis=0)
                        rows.append({"transport": transport, "replay": replay, "start_s": s, "wait_s": w,
                                     "per_exchange_s": e})  # fmt: skip
                        print(f"{transport:5} {'replayed' if replay else 'enqueued':9} start {s * 1e6:6.1f} µs  "
                              f"wait {w * 1e6:6.1f} µs  per exchange {e * 1e6:6.1f} µs", flush=True)  # fmt: skip
                    if replay:
                        _gathered(world, rows, "replay_parts_s", "alone", _replay_parts(ex, EXCHANGES))
                        floor = _launch_floor if transport == "ipc" else _exchange_launches
                        _gathered(world, rows, "one_launch_s", "one launch, idle stream", floor(ex, 1000))
                        text = _profile(ex, 1000)
                        if world.rank == 0:
                            profiles[f"{transport} replayed"] = text
                            print(f"--- cProfile of 1000 replayed {transport} exchanges, rank 0", flush=True)
                            print(text, flush=True)
                ex.replay = False
                text = _profile(ex, 1000)
                if world.rank == 0:
                    profiles[transport] = text
                    print(f"--- cProfile of 1000 enqueued {transport} exchanges, rank 0", flush=True)
                    print(text, flush=True)
    if world.rank == 0:
        info = machine_info(world.size, gpus_used=world.size)
        out = args.out / f"profile-eager-{world.size}r-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        args.out.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"machine": info, "ranks": world.size, "bytes_per_peer": 8, "rows": rows,
                                   "profiles": profiles}, indent=1))  # fmt: skip
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
