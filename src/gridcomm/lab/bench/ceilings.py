"""Ceilings measured on the GPUs of this run: HBM copy, peer copy (kernel and copy engine), NCCL send/recv.

Every GPU benchmark prints its figures beside these, measured in the same run on the same bytes: what the
memory can do, what a plain copy to the peer GPU can do, and what NCCL (the peer a user would otherwise
pick) does with contiguous buffers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ...comm import Communicator
from ...errors import TransportError
from ...gpu import nccl_communicator
from ...packing.cuda import device_allocation
from ...transports import REACHES
from ..measure.timing import Timing, time_collective


def sync() -> None:
    """Wait for everything queued on this rank's GPU."""
    import cupy

    cupy.cuda.Device().synchronize()


def time_gpu(comm: Communicator, run: Callable[[], Any], samples: int = 7, min_sample_s: float = 0.02) -> Timing:
    """Seconds per ``run()`` of GPU work on every rank: batches end with a device synchronisation."""
    return time_collective(comm.mpi, run, samples=samples, min_sample_s=min_sample_s, finish=sync)


def time_gpu_alone(comm: Communicator, run: Callable[[], Any], samples: int = 7) -> Timing:
    """Seconds per ``run()`` of work local to this rank's GPU (collective): the ranks time their own ``run``
    one at a time while the others wait, so that ranks sharing a GPU do not share its bandwidth."""
    from mpi4py import MPI

    mine = None
    for rank in range(comm.size):
        if rank == comm.rank:
            mine = time_collective(MPI.COMM_SELF, run, samples=samples, finish=sync)
        comm.mpi.Barrier()
    assert mine is not None
    return mine


def hbm_copy_gbps(comm: Communicator, nbytes: int = 1 << 30, samples: int = 5) -> float:
    """Device-to-device copy on this GPU, bytes read plus bytes written per second [GB/s] (slowest rank; each
    rank timed alone, so that ranks sharing a GPU measure all of it)."""
    src, dst = device_allocation(nbytes), device_allocation(nbytes)
    src.fill(1)
    t = time_gpu_alone(comm, lambda: dst.__setitem__(slice(None), src), samples)
    return min(comm.mpi.allgather(2 * nbytes / t.median / 1e9))


class PeerBuffers:
    """One device buffer per rank, mapped by CUDA IPC into every other rank of the node (collective).

    ``peer(r)`` is a CuPy uint8 array over rank r's buffer that kernels on this GPU may read and write.
    """

    def __init__(self, comm: Communicator, nbytes: int) -> None:
        import cupy

        runtime = cupy.cuda.runtime
        self.nbytes = nbytes
        self._mapped: dict[int, int] = {}
        kept = []  # buffers a peer could not map, held until one is found so that the next lies elsewhere
        for _ in range(8):
            self.local = device_allocation(nbytes)
            handles = comm.mpi.allgather(runtime.ipcGetMemHandle(self.local.data.ptr))
            if all(comm.mpi.allgather(self._map_all(handles, comm.rank))):
                break
            self._close_mapped()
            kept.append(self.local)
        else:
            raise RuntimeError("no peer-copy buffer could be mapped by every rank in 8 tries (cudaErrorAlreadyMapped)")
        self.local.fill(comm.rank + 1)
        sync()
        here = cupy.cuda.Device().id
        self._views = {
            r: cupy.ndarray(
                (nbytes,), np.uint8, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(p, nbytes, self, here), 0)
            )
            for r, p in self._mapped.items()
        }
        self._comm = comm

    def _map_all(self, handles: list[Any], rank: int) -> bool:
        """Map every other rank's buffer; False where CUDA says one is mapped already: a CUDA-aware MPI (Open
        MPI's smcuda) keeps the peers' allocations it moved mapped, and a new allocation may lie where one of
        those did (4 x H100, 2026-11-26)."""
        import cupy

        for r, handle in enumerate(handles):
            if r == rank:
                continue
            try:
                self._mapped[r] = cupy.cuda.runtime.ipcOpenMemHandle(handle)
            except cupy.cuda.runtime.CUDARuntimeError as error:
                if "AlreadyMapped" not in str(error):
                    raise
                return False
        return True

    def _close_mapped(self) -> None:
        import cupy

        for address in self._mapped.values():
            cupy.cuda.runtime.ipcCloseMemHandle(address)
        self._mapped = {}

    def peer(self, rank: int) -> Any:
        return self._views[rank]

    def close(self) -> None:
        sync()
        self._comm.mpi.Barrier()  # nobody writes into a buffer that is about to go
        self._close_mapped()
        self._views = {}


def peer_copy(comm: Communicator, buffers: PeerBuffers, nbytes: int, engine: bool) -> Callable[[], None]:
    """Every rank writes ``nbytes`` into each other rank's buffer, to every peer at once: one copy kernel whose
    blocks are dealt out over the peers piece by piece (``engine`` False: the ipc transport's copy, with no
    flags), or the copy engines, one cudaMemcpyAsync per peer on a stream of its own (``engine`` True). Peers
    are taken from the next rank on, (rank + i) mod size, so that no GPU is written by every other first."""
    import cupy

    from ...packing.cuda import SegmentTable
    from ...packing.geometry import RunGrid
    from ...packing.table import Descriptors

    peers = sorted((r for r in range(comm.size) if r != comm.rank), key=lambda r: (r - comm.rank) % comm.size)
    src = buffers.local.data.ptr
    if not engine:
        rows, whole = Descriptors(cupy), RunGrid(0, 1, 1, 0, 0, nbytes)
        for r in peers:
            rows.add(src, whole, buffers.peer(r).data.ptr, whole)
        table = SegmentTable(rows, [(r - comm.rank) % comm.size for r in peers])
        return lambda: table.copy(cupy.cuda.get_current_stream())
    runtime = cupy.cuda.runtime
    lanes = [cupy.cuda.Stream(non_blocking=True) for _ in peers]
    fork, joins = cupy.cuda.Event(disable_timing=True), [cupy.cuda.Event(disable_timing=True) for _ in peers]

    def run_engine() -> None:
        stream = cupy.cuda.get_current_stream()
        fork.record(stream)
        for r, lane, join in zip(peers, lanes, joins, strict=True):
            lane.wait_event(fork)
            runtime.memcpyAsync(buffers.peer(r).data.ptr, src, nbytes, runtime.memcpyDeviceToDevice, lane.ptr)
            join.record(lane)
        for join in joins:
            stream.wait_event(join)

    return run_engine


def nvlink_nominal_gbps() -> float | None:
    """NVLink's nominal rate out of this rank's GPU, per direction [GB/s]: NVML's count of its links times their
    common speed, or None where NVML, NVLink or those fields are missing."""
    try:
        import cupy
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(cupy.cuda.Device().pci_bus_id)
            ids = [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON]
            count, speed = pynvml.nvmlDeviceGetFieldValues(handle, ids)
            if count.nvmlReturn or speed.nvmlReturn:
                return None
            return count.value.uiVal * speed.value.uiVal / 1000 or None  # MB/s per link -> GB/s in all
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no GPU, no NVLink: no figure, not an error
        return None


def nccl_sendrecv(comm: Communicator, nbytes: int, peers: list[int]) -> Callable[[], None]:
    """NCCL's own grouped send/recv of ``nbytes`` to and from each peer, contiguous buffers, current stream."""
    import cupy
    from cupy.cuda import nccl

    nc = nccl_communicator(comm)
    send = device_allocation(max(nbytes, 1) * max(len(peers), 1))
    recv = device_allocation(max(nbytes, 1) * max(len(peers), 1))
    send.fill(comm.rank)

    def run() -> None:
        stream = cupy.cuda.get_current_stream().ptr
        nccl.groupStart()
        for k, p in enumerate(peers):
            nc.recv(recv.data.ptr + k * nbytes, nbytes, nccl.NCCL_UINT8, p, stream)
        for k, p in enumerate(peers):
            nc.send(send.data.ptr + k * nbytes, nbytes, nccl.NCCL_UINT8, p, stream)
        nccl.groupEnd()

    return run


class PinnedCopy:
    """One copy of ``nbytes`` between this GPU and pinned host memory per call (device to host when ``down``), on
    the current stream: the ceiling of each of the staged transport's copies. The object holds both buffers: the
    copies go by their raw addresses (a closure over the addresses alone let the memory be freed: on 4 x H100
    the first copy failed with cudaErrorInvalidValue)."""

    def __init__(self, nbytes: int, down: bool) -> None:
        import cupy
        from cupy.cuda import runtime

        self.nbytes, self._runtime, self._cupy = nbytes, runtime, cupy
        self.device, self.host = device_allocation(max(nbytes, 1)), cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        self._kind = runtime.memcpyDeviceToHost if down else runtime.memcpyHostToDevice
        pair = (self.host.ptr, self.device.data.ptr)
        self._target, self._origin = pair if down else pair[::-1]

    def __call__(self) -> None:  # timed: nothing here but the copy's launch
        stream = self._cupy.cuda.get_current_stream().ptr
        self._runtime.memcpyAsync(self._target, self._origin, self.nbytes, self._kind, stream)


class PinnedCopiesBothWays:
    """A copy of ``nbytes`` down to pinned host memory and another up from it at the same time, per call: the
    current stream copies down while a stream of its own copies up, and the current stream then waits for it.
    What a staged exchange asks of each GPU's host link at once (both directions of PCIe, and host memory)."""

    def __init__(self, nbytes: int) -> None:
        import cupy

        self._down, self._up = PinnedCopy(nbytes, down=True), PinnedCopy(nbytes, down=False)
        self._side = cupy.cuda.Stream(non_blocking=True)
        self._forked, self._joined = (cupy.cuda.Event(block=False, disable_timing=True) for _ in range(2))

    def __call__(self) -> None:
        import cupy

        stream = cupy.cuda.get_current_stream()
        self._forked.record(stream)
        self._side.wait_event(self._forked)
        self._down()
        with self._side:
            self._up()
        self._joined.record(self._side)
        stream.wait_event(self._joined)


class HostSendRecv:
    """MPI's own Irecv/Isend of ``nbytes`` from and to each peer between host buffers, then Waitall, per call:
    the staged transport's host leg alone (with an MPI that is not CUDA-aware, what the bytes between two GPUs
    go through). ``received`` holds block k from ``peers[k]`` after a call."""

    def __init__(self, comm: Communicator, nbytes: int, peers: list[int], tag: int = 0x5EED) -> None:
        self.comm, self.nbytes, self.peers, self.tag = comm, nbytes, peers, tag
        self.sent = np.full(max(nbytes, 1) * max(len(peers), 1), comm.rank % 256, dtype=np.uint8)
        self.received = np.zeros_like(self.sent)

    def __call__(self) -> None:
        from mpi4py import MPI

        n, mpi = self.nbytes, self.comm.mpi
        requests = [mpi.Irecv(self.received[k * n : (k + 1) * n], p, self.tag) for k, p in enumerate(self.peers)]
        requests += [mpi.Isend(self.sent[k * n : (k + 1) * n], p, self.tag) for k, p in enumerate(self.peers)]
        MPI.Request.Waitall(requests)


def torch_process_group(comm: Communicator) -> str | None:
    """Collective: start torch.distributed's NCCL process group over ``comm``'s ranks (once per process: torch
    keeps one default group), bootstrapped from rank 0's host and a free port sent over MPI; None when it runs,
    else why torch's NCCL cannot be a peer here (the same answer on every rank)."""
    reason = None
    try:
        import torch
        import torch.distributed as dist

        if not (torch.cuda.is_available() and dist.is_nccl_available()):
            reason = "torch has no CUDA or no NCCL here"
    except Exception as error:  # torch missing or broken: no peer, not an error
        reason, dist = f"torch is not importable ({type(error).__name__}: {error})", None
    reasons = [r for r in comm.mpi.allgather(reason) if r]
    if reasons:
        return reasons[0]
    assert dist is not None
    if dist.is_initialized():
        return None if dist.get_world_size() == comm.size else "torch.distributed already runs over other ranks"
    import socket

    import cupy

    address = None
    if comm.rank == 0:
        with socket.socket() as probe:  # a port free now; torch binds it straight after
            probe.bind(("", 0))
            address = (socket.gethostname(), probe.getsockname()[1])
    host, port = comm.mpi.bcast(address, root=0)
    device = torch.device("cuda", cupy.cuda.Device().id)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl", init_method=f"tcp://{host}:{port}", rank=comm.rank, world_size=comm.size, device_id=device
    )
    return None


def torch_alltoall(comm: Communicator, nbytes: int) -> Callable[[], None]:
    """torch.distributed's ``all_to_all_single`` (NCCL; ``torch_process_group`` first) of ``nbytes`` to and from
    every other rank: the all-to-all a PyTorch user would call, on the same bytes (nothing to itself)."""
    import torch
    import torch.distributed as dist

    splits = [0 if r == comm.rank else nbytes for r in range(comm.size)]
    send = torch.full((sum(splits),), comm.rank, dtype=torch.uint8, device="cuda")
    recv = torch.empty_like(send)
    return lambda: dist.all_to_all_single(recv, send, splits, splits)


def mpi4jax_reason(comm: Communicator) -> str | None:
    """Collective: None where mpi4jax can move this rank's GPU arrays (JAX with a GPU, mpi4jax built with CUDA),
    else why it cannot be a peer here (the same answer on every rank). JAX is kept from taking most of the GPU's
    memory at start (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set). JAX starts on every GPU and leaves CUDA's
    current device on one of its choosing (NCCL then found two ranks on one GPU, 4 x H100, 2026-11-26): the
    rank's device is set again after each call into JAX (JAX's ``jax_cuda_visible_devices`` of the rank's GPU
    alone made its arrays fail: "Device id 1 is out of range [0, 1)")."""
    import cupy

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    here = cupy.cuda.runtime.getDevice()
    reason = None
    try:
        import jax
        import mpi4jax

        if not mpi4jax.has_cuda_support():
            reason = "mpi4jax was built without CUDA (build it where nvcc and CUDA's headers are)"
        elif not jax.devices("gpu"):
            reason = "JAX sees no GPU"
    except Exception as error:  # mpi4jax or JAX missing or broken: no peer, not an error
        reason = f"mpi4jax is not importable ({type(error).__name__}: {error})"
    finally:
        cupy.cuda.runtime.setDevice(here)
    reasons = [r for r in comm.mpi.allgather(reason) if r]
    return reasons[0] if reasons else None


def mpi4jax_alltoall(comm: Communicator, nbytes: int) -> Callable[[], None]:
    """mpi4jax's ``alltoall`` (``mpi4jax_reason`` first) of ``nbytes`` to and from every rank, jitted, on this
    rank's GPU: what a JAX user would call. mpi4jax sends equal blocks to every rank, its own included (a local
    copy more than the others move); where MPI is not CUDA-aware it goes through host memory. Checked once: block
    r of what arrives holds rank r's bytes."""
    import cupy
    import jax
    import jax.numpy as jnp
    import mpi4jax

    runtime = cupy.cuda.runtime
    here = runtime.getDevice()
    with jax.default_device(jax.devices("gpu")[here]):
        send = jnp.full((comm.size, nbytes), comm.rank % 256, dtype=jnp.uint8)
    step = jax.jit(lambda x: mpi4jax.alltoall(x, comm=comm.mpi))
    first = np.asarray(step(send))
    runtime.setDevice(here)
    wrong = [r for r in range(comm.size) if not (first[r] == r % 256).all()]
    if wrong:
        raise AssertionError(f"rank {comm.rank}: mpi4jax's blocks from ranks {wrong} arrived wrong ({nbytes} B each)")

    def call() -> None:  # the rank's device set again: CuPy's events and the next transports follow it
        step(send).block_until_ready()
        runtime.setDevice(here)

    return call


def time_groups_alone(comm: Communicator, exchanger: Any, name: str, samples: int) -> dict[str, Timing]:
    """Where ``exchanger`` serves its groups of peers by transports of their own (a mix, e.g. ``ipc+nccl``), each
    group's exchange alone (``exchanger.only``), enqueued from Python: ``{name + ": node alone": ...,
    name + ": network alone": ...}``; empty for one group. A mixed exchange runs its groups side by side, so it
    should take little more than the slower of them."""
    if len(exchanger.reaches) < 2:
        return {}
    timings = {}
    for reach in exchanger.reaches:
        with exchanger.only(reach):
            timings[alone_label(name, reach)] = time_gpu(comm, exchanger.exchange, samples)
    return timings


def alone_label(name: str, reach: str) -> str:
    """The label of mix ``name``'s group ``reach`` timed alone: "ipc+nccl: node alone"."""
    return f"{name}: {reach} alone"


def mixed_over_slower_group(timings: dict[str, Any]) -> dict[str, float]:
    """{mix: its exchange's median over the slower of its groups' alone} for every mix whose groups were timed
    alone (``timings``: label -> Timing, the groups under ``alone_label``)."""
    out = {}
    for label in timings:
        alone = [timings[k].median for r in REACHES if (k := alone_label(label, r)) in timings]
        if alone:
            out[label] = timings[label].median / max(alone)
    return out


def bind_unless_refused(name: str, refused: dict[str, str], bind: Callable[..., Any], *args: Any) -> Any | None:
    """``bind(*args)`` (an exchanger or transposer over transport ``name``), or None where ``name`` refused to bind
    in an earlier case or refuses now (TransportError, raised on every rank together: noted in ``refused`` with
    why, e.g. ipc where a CUDA-aware MPI mapped the arrays first)."""
    if name in refused:
        return None
    try:
        return bind(*args)
    except TransportError as error:
        refused[name] = str(error)
        return None


def time_exchanger(comm: Communicator, exchanger: Any, name: str, samples: int) -> dict[str, Timing]:
    """``{name: seconds per exchange}`` (``exchange()`` from Python: where the transport allows, a launch of
    the exchanger's own graph), ``{name + " enqueued": ...}`` of the same with each part enqueued from Python
    (``replay`` off, as before GRIDCOMM_REPLAY), and ``{name + " graph": seconds per replay}`` of the exchange
    captured in a CUDA graph, launched in a loop."""
    import cupy

    timings = {name: time_gpu(comm, exchanger.exchange, samples)}
    if exchanger.replay:
        exchanger.replay = False
        timings[f"{name} enqueued"] = time_gpu(comm, exchanger.exchange, samples)
        exchanger.replay = True
    if exchanger.transport.graph_capturable:
        graph, stream = exchanger.capture(), cupy.cuda.get_current_stream()
        timings[f"{name} graph"] = time_gpu(comm, lambda: graph.launch(stream), samples)
    return timings
