"""Collective checks of gridcomm.Transposer on GPU arrays, one GPU per rank (GRIDCOMM_CHECK_DEVICE=gpu).

The host suite's correctness checks (checks_transpose.py) run unchanged over every GPU transport, through
``MirroredTransposer``: each exchange uploads the host arrays, transposes on the GPU and downloads the
destinations, so that the same serial reference judges the GPU data path bit for bit. Then what only the
GPU has: streams, CUDA graphs, the two ipc methods and what ipc cannot pair.

GRIDCOMM_CHECK_TRANSPORTS (harness.py) limits the transports, e.g. to those that work with several ranks
sharing one GPU (NCCL refuses two ranks on one device).
"""

from __future__ import annotations

import os
from typing import Any

import checks_transpose as host
import numpy as np
from harness import (
    BOX_TRANSPORTS,
    Mirrored,
    assert_everywhere,
    assert_raises_everywhere,
    ranks,
    run_property,
    same_node,
)
from harness import (
    TRANSPORTS as GPU_TRANSPORTS,
)

import gridcomm
from gridcomm import Box, GridcommError, TransportError

TRANSPORTS: dict[str, Any] = {**GPU_TRANSPORTS, **BOX_TRANSPORTS}
# The ipc transports that write every block straight into the destination's boxes, and so refuse blocks that land
# as boxes of other extents: the copy engines, and the kernel where exchanges never go one way. The suites' blocks
# are small, so "ipc" (and "ipc/3 blocks") move them one way (packed, landed, unpacked) and take any cut.
IPC = {k for k in TRANSPORTS if k in ("ipc/copy-engine", "ipc/two-way")}
MAX_EXAMPLES = int(os.environ.get("GRIDCOMM_PROPERTY_TRANSPOSE_EXAMPLES", "120"))


class MirroredTransposer(Mirrored):
    """A gridcomm.Transposer over GPU copies of host arrays: each exchange uploads the sources and the
    destinations (their sentinels), runs on the GPU and brings back what changed in the destinations."""

    def __init__(self, comm: Any, send: Any, recv: Any, sources: Any, destinations: Any, *args: Any, **kw: Any):
        self.exchanger = gridcomm.Transposer(comm, send, recv, *self._mirror(sources, destinations), *args, **kw)

    @classmethod
    def from_counts(cls, comm: Any, sc: Any, sd: Any, rc: Any, rd: Any, sources: Any, destinations: Any, *args, **kw):
        self = cls.__new__(cls)
        mirrored = self._mirror(sources, destinations)
        self.exchanger = gridcomm.Transposer.from_counts(comm, sc, sd, rc, rd, *mirrored, *args, **kw)
        return self

    def _mirror(self, sources: Any, destinations: Any) -> tuple[Any, Any]:
        """GPU copies of both lists; what to hand gridcomm for each."""
        host_src, device_src, src = self._on_device(sources)
        host_dst, device_dst, dst = self._on_device(destinations)
        self.device = device_src + device_dst
        self._sent = list(zip(host_src + host_dst, self.device, strict=True))
        self._received = list(zip(host_dst, device_dst, strict=True))
        return src, dst


def _on_gpu(check: Any, transports: dict[str, Any] = TRANSPORTS) -> Any:
    """The host check ``check`` run with MirroredTransposer over ``transports``."""

    def run(comm: Any) -> None:
        saved = host.Transposer, host.TRANSPORTS
        host.Transposer, host.TRANSPORTS = MirroredTransposer, transports
        try:
            check(comm)
        finally:
            host.Transposer, host.TRANSPORTS = saved

    return run


# -- the host suite's correctness checks, on the GPU -----------------------------------------------------------

check_alltoallv_every_transport = _on_gpu(host.check_alltoallv_every_transport)
check_packed_displacements_and_single_array = _on_gpu(host.check_packed_displacements_and_single_array)
check_slab_transposition_rows_to_columns_and_back = _on_gpu(host.check_slab_transposition_rows_to_columns_and_back)
check_start_wait_with_work_in_between_and_repeated = _on_gpu(host.check_start_wait_with_work_in_between_and_repeated)
check_two_transposers_in_flight_at_once = _on_gpu(host.check_two_transposers_in_flight_at_once)
check_context_manager_close_and_misuse = _on_gpu(host.check_context_manager_close_and_misuse)
# ipc pairs a contiguous range with a box of as many elements (the spectral dwarf's blocks), on every transport.
check_blocks_of_a_1d_array_land_in_boxes_and_back = _on_gpu(host.check_blocks_of_a_1d_array_land_in_boxes_and_back)
# ipc copies each block into a box of its own extents or a contiguous range: blocks cut differently (two boxes
# here, one there) go by the other transports.
check_blocks_split_differently_on_each_side = _on_gpu(
    host.check_blocks_split_differently_on_each_side, {k: t for k, t in TRANSPORTS.items() if k not in IPC}
)


def _split_plans(n: int) -> list[tuple[dict, dict]]:
    send = {d: [Box((2 * d, 0), (2 * d + 1, 3)), Box((2 * d + 1, 0), (2 * d + 2, 3))] for d in range(n)}
    recv = {s: [Box((3 * s, 0), (3 * s + 3, 2))] for s in range(n)}
    return [(send, recv)] * n


def check_ipc_refuses_blocks_it_cannot_pair_and_auto_falls_back(comm):
    """Blocks received as boxes of other extents: ipc writing straight into the destinations (the copy engines,
    or the kernel with ``one_way_bytes=0``) raises TransportError on every rank, naming the extents; "auto" takes
    a transport that can (ipc one way, for blocks this small), and its result is right."""
    import cupy

    n, rank = comm.Get_size(), comm.Get_rank()
    plans = _split_plans(n)
    # One rank, or declared nodes of one rank each: the block to itself goes by a scratch copy, ipc moves nothing.
    on_one_node = any(same_node(s, d) for s in range(n) for d in range(n) if s != d)
    for name in sorted(IPC) if on_one_node else []:
        make = lambda t=TRANSPORTS[name]: gridcomm.Transposer(  # noqa: E731
            comm, *plans[rank], cupy.zeros((2 * n, 3), np.uint16), cupy.zeros((3 * n, 2), np.uint16), t
        )
        assert_raises_everywhere(comm, make, TransportError, "extents")
    if "auto" not in TRANSPORTS:
        return
    sources = [host.filled((2 * n, 3), "uint16", "C", rank)]
    destinations = [host.sentinel((3 * n, 2), "uint16", "C")]
    initials = [destinations[0].copy()]
    with MirroredTransposer(comm, *plans[rank], sources, destinations, "auto") as t:
        t.exchange()
        chosen = t.transport.name
    problems = host.gathered_problems(comm, sources, destinations, initials, plans, ["C"], f"auto ({chosen})")
    assert_everywhere(comm, "\n".join(problems) or None)


def _device_simple(comm: Any, transport: Any, seed: int) -> tuple[Any, Any, Any, np.ndarray, list]:
    """``host._simple``'s plan on CuPy arrays: (transposer, device source, device destination, host initial
    destination, plans)."""
    import cupy

    t, source, dest, plans = host._simple(comm, "mpi", seed=seed)  # the host plan and arrays
    t.close()
    n, rank = comm.Get_size(), comm.Get_rank()
    sends = [(rank + d) % 3 + 1 for d in range(n)]
    recvs = [(s + rank) % 3 + 1 for s in range(n)]
    d_source, d_dest = cupy.asarray(source), cupy.asarray(dest)
    device = gridcomm.Transposer.from_counts(comm, sends, None, recvs, None, d_source, d_dest, transport)
    return device, d_source, d_dest, dest, plans


def _compare(comm: Any, d_source: Any, d_dest: Any, initial: np.ndarray, plans: list, label: str) -> list[str]:
    import cupy

    cupy.cuda.Device().synchronize()
    return host.gathered_problems(comm, [d_source.get()], [d_dest.get()], [initial], plans, ["C"], label)


def check_start_on_a_stream_with_other_work_on_another(comm):
    """start(stream) on a non-blocking stream, unrelated kernels on a second stream meanwhile, wait(): the
    destinations are right once the stream is synchronised; 5 rounds of new data."""
    import cupy

    problems = []
    for name, transport in TRANSPORTS.items():
        t, d_source, d_dest, initial, plans = _device_simple(comm, transport, seed=3)
        stream, other = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with t:
            for step in range(5):
                with stream:
                    d_source[...] = cupy.asarray(
                        host.filled(d_source.shape, d_source.dtype, "C", 40 + step + comm.rank)
                    )
                handle = t.start(stream)
                with other:
                    busy = cupy.arange(1 << 20, dtype=np.float64).sum()
                handle.wait()
                stream.synchronize()
                problems += _compare(comm, d_source, d_dest, initial, plans, f"{name} step {step}")
                other.synchronize()
                if float(busy) != (1 << 20) * ((1 << 20) - 1) / 2:
                    problems.append(f"{name}: the other stream's work went wrong")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_graph_capture_replays_transposition(comm):
    """capture() records one transposition (ipc, both methods, and nccl); replays after the sources change
    deliver the new blocks; other transports refuse with a GridcommError naming them."""
    import cupy

    problems = []
    for name, transport in TRANSPORTS.items():
        t, d_source, d_dest, initial, plans = _device_simple(comm, transport, seed=11)
        with t:
            if not t.transport.graph_capturable:
                assert_raises_everywhere(comm, t.capture, GridcommError, "captured")
                continue
            graph = t.capture()
            stream = cupy.cuda.Stream(non_blocking=True)
            for step in range(4):
                d_source.set(host.filled(d_source.shape, d_source.dtype, "C", 90 + 7 * step + comm.rank))
                cupy.cuda.Device().synchronize()
                graph.launch(stream)
                stream.synchronize()
                t.check()
                problems += _compare(comm, d_source, d_dest, initial, plans, f"{name} replay {step}")
    assert_everywhere(comm, "\n".join(problems) or None)


def _pairs(plans: list[tuple[dict, dict]], n: int) -> bool:
    """Whether every block to another rank lands in boxes of the extents it was sent as (what ipc can copy;
    a rank's block to itself goes through a scratch copy when it does not, and a block to another declared node
    goes by auto)."""
    for s in range(n):
        for d, boxes in plans[s][0].items():
            if d == s or not same_node(s, d):
                continue
            there = plans[d][1].get(s, [])
            if [b.shape for b in boxes if b.size] != [b.shape for b in there if b.size]:
                return False
    return True


def run_case(sub: Any, case: host.Case) -> list[str]:
    """host.run_case on the GPU; where ipc cannot pair the blocks, TransportError on every rank instead."""
    if case.transport in IPC and not _pairs(host.case_plans(case), case.nranks):
        try:
            _on_gpu(lambda comm: host.run_case(comm, case))(sub)
        except TransportError as error:
            return [] if "extents" in str(error) else [f"TransportError without 'extents': {error}"]
        return ["ipc accepted blocks it cannot pair"]
    problems: list[str] = []
    _on_gpu(lambda comm: problems.extend(host.run_case(comm, case)))(sub)
    return problems


@ranks()
def check_random_alltoallv_match_serial_reference(comm):
    """Hypothesis: the host suite's random all-to-all(v) cases (counts with zeros, displacements, 1-3 fields
    of random dtypes and orders, split boxes), every GPU transport, on 1..size ranks: bitwise equal to the
    serial reference, or TransportError from ipc for blocks it cannot pair."""
    saved = host.TRANSPORTS
    host.TRANSPORTS = TRANSPORTS  # what host.cases draws from
    try:
        run_property(
            comm,
            host.cases(comm.Get_size()),
            run_case,
            MAX_EXAMPLES,
            tally={"ipc, unpaired": lambda c: c.transport in IPC and not _pairs(host.case_plans(c), c.nranks)},
        )
    finally:
        host.TRANSPORTS = saved


if __name__ == "__main__":
    raise SystemExit("run through runner.py: mpiexec -n N python runner.py checks_gpu_transpose")


def check_nccl_moves_whole_blocks_from_and_into_the_arrays(comm):
    """nccl sends each rank's block of a 1-D array straight from the source and receives it straight into the
    destination (no pack, no unpack: every message direct); "nccl/direct=0" moves them through the buffers;
    both bitwise right, the same for blocks of whole rows of a 2-D array."""
    import cupy

    from gridcomm.transports import NcclTransport

    if "nccl" not in TRANSPORTS or comm.Get_size() < 2:
        return
    problems = []
    n, p, r = 5, comm.Get_size(), comm.Get_rank()
    rows = np.arange(n * p)
    # Rank r sends rows [q n, (q + 1) n) of its source to rank q, which receives them into rows [r n, (r + 1) n).
    want = (1000 * (rows // n) + r * n + rows % n).astype(np.float64)
    for trailing in ((), (3,)):
        shape = (n * p, *trailing)
        for transport, direct in ((NcclTransport(), p - 1), (NcclTransport(direct=False), 0)):
            column = (1000.0 * r + rows).reshape(-1, *[1] * len(trailing))
            source = cupy.asarray(np.broadcast_to(column, shape))
            destination = cupy.full(shape, -1.0)
            counts = [n] * p
            with gridcomm.Transposer.from_counts(comm, counts, None, counts, None, source, destination, transport) as t:
                t.exchange()
                moved = t._groups[0].channel.direct
            if moved != (direct, direct):
                problems.append(f"{transport}, shape {shape}: {moved} messages direct, expected {direct} each way")
            if not np.array_equal(destination.get(), np.broadcast_to(want.reshape(-1, *[1] * len(trailing)), shape)):
                problems.append(f"{transport}, shape {shape}: the blocks landed wrong")
    assert_everywhere(comm, "\n".join(problems) or None)
