"""Stencil2D: one rank's share of the 2-D Jacobi dwarf, its two fields, their exchangers and its step modes.

The global grid is (n px) x (n py) points over a px x py process grid; each rank owns an n x n block plus a halo
of ``halo`` points. The outermost ring of the global grid is a fixed (Dirichlet) boundary. A step updates
every other point,

    v[i, j] = ((((u[i, j] + u[i-1, j]) + u[i+1, j]) + u[i, j-1]) + u[i, j+1]) * 0.2,

then u and v swap roles. Each field has its own HaloExchanger, so the swap copies nothing; everything (fields,
exchangers, kernel arguments, views, streams, events, CUDA graphs) is made once, and a step allocates nothing.

Modes (the step is written once against the array module: NumPy on the CPU, CuPy on the GPU):

* ``traditional`` (the seed's): exchange the halo of u, then update the whole block. On the GPU everything is
  enqueued on one stream.
* ``overlapped``: start the exchange, update the interior that reads no halo point, wait for the exchange,
  update the four boundary strips. On the GPU the exchange runs on a stream of its own (at the highest
  priority) while the interior kernel runs on the compute stream; events order the two.
* ``graph`` (GPU only): the overlapped step, captured in CUDA graphs once (one graph per parity for a single
  step, one per parity for two steps, after which u and v are back in place) and replayed: one launch per two
  steps, no host work in between. Needs a transport whose exchange runs without the host (ipc or nccl).
* ``nvshmem`` (GPU, gridcomm[nvshmem], halo 1): the fields live in NVSHMEM's symmetric heap; per step a
  boundary kernel waits for the halos, updates the boundary strips while storing their edge points straight into
  the neighbours' halos, and signals them; the interior kernel follows. No exchanger, no host work per step.
* ``persistent`` (likewise): one cooperative kernel runs all the steps of a ``step(k)`` call, its blocks
  computing and syncing grid-wide, each edge point waiting for its halo values and sending its own to the
  neighbours as tagged lines (jacobi2d_nvshmem.cu).
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np

from ....arguments import flag, whole_number
from ....comm import Communicator
from ....decomp import CartesianDecomposition, choose_proc_grid
from ....device import HIGHEST_PRIORITY
from ....exchange import HaloExchanger, NoExchange
from ....gpu import use_local_gpu
from ....graphs import capture
from ....transports import Transport
from ....transports.gpu_waits import GpuWaitReport
from .config import SHMEM_MODES, StencilError, check_dtype, check_halo, check_mode, check_n, check_steps, resolve_xp
from .initial import DEFAULT_SEED, initial_block
from .regions import INNER, STRIPS, WHOLE, split_region, update_region


def process_grid(nranks: int, n: int, halo: int) -> tuple[int, int]:
    """The process grid for ``nranks`` blocks of n x n points: the one gridcomm picks for a square global grid on
    that many ranks, i.e. as square as the rank count allows (2 x 2 for 4 ranks, 3 x 1 for 3)."""
    side = n * nranks
    px, py = choose_proc_grid(nranks, (side, side), ((halo, halo), (halo, halo)), (False, False))
    return int(px), int(py)


class Stencil2D:
    """One rank's part of the 2-D Jacobi dwarf (collective construction over ``comm``).

    Args:
        comm: a gridcomm Communicator, an mpi4py communicator, or None (COMM_WORLD).
        n: points per side of each rank's block; the global grid is (n px) x (n py) points.
        dtype: float64 (default) or float32.
        xp: the array module, ``numpy`` (CPU) or ``cupy`` (GPU: one rank per GPU, chosen with
            gridcomm.use_local_gpu), or its name; None picks cupy when a GPU is usable.
        mode: ``"traditional"``, ``"overlapped"``, or on the GPU ``"graph"``, ``"nvshmem"`` or ``"persistent"``;
            see the module's docstring.
        transport: for the HaloExchangers: ``"auto"``, a transport name or a configured Transport (the nvshmem
            and persistent modes have no exchanger: their kernels move the halos).
        halo: ghost width exchanged every step, in points (1 to n; the stencil reads 1).
        exchange: False leaves the halos alone (no exchanger; a benchmark's compute-only ceiling).
        timeout: seconds a rank waits for a silent peer (default: the communicator's).
        seed: seed of the initial field's perturbation.

    Raises:
        StencilError: bad n, halo, dtype, mode, exchange, seed, array module, or a transport that graph mode
            cannot capture.
        TransportError: the nvshmem or persistent mode without NVSHMEM (naming the extra to install).
    """

    def __init__(
        self,
        comm: Any = None,
        n: int = 256,
        dtype: Any = np.float64,
        xp: Any = np,
        mode: str = "traditional",
        transport: str | Transport = "auto",
        *,
        halo: int = 1,
        exchange: bool = True,
        timeout: float | None = None,
        seed: int = DEFAULT_SEED,
    ) -> None:
        self.n = check_n(n)
        exchange = flag(exchange, "exchange", error=StencilError)
        seed = whole_number(seed, "seed", least=0, meaning="seeds the initial field", error=StencilError)
        self.halo = check_halo(halo, self.n)
        self.dtype = check_dtype(dtype)
        self.xp: types.ModuleType = resolve_xp(xp)
        self.on_gpu = self.xp.__name__ == "cupy"
        self.mode = check_mode(mode, self.on_gpu)
        self.comm = Communicator.wrap(comm)
        if self.on_gpu:
            use_local_gpu(self.comm)  # before anything is allocated on the GPU
        h = self.halo
        self.proc_grid = process_grid(self.comm.size, self.n, h)
        self.global_shape = (self.n * self.proc_grid[0], self.n * self.proc_grid[1])
        self.decomposition = CartesianDecomposition(
            self.comm, self.global_shape, halo=h, periodic=False, proc_grid=self.proc_grid, stencil="star"
        )
        d = self.decomposition
        start = tuple(s.start for s in d.global_slices)
        self.region = update_region(self.global_shape, start, (self.n, self.n), h)
        self.parts = split_region(self.region, (self.n, self.n), h)
        host = self._initial_local(seed)
        self._shmem: Any = None  # the nvshmem and persistent modes' kernels
        self._symmetric: Any = None  # their fields' symmetric memory
        if self.mode in SHMEM_MODES:
            self._check_shmem_mode(exchange)
            from .... import shmem
            from .shmem_kernel import symmetric_fields

            shmem.initialise(self.comm)
            self._symmetric, self.fields = symmetric_fields(host, self.comm)
        else:
            self.fields = [self.xp.array(host), self.xp.array(host)]  # two copies: u and v
        self.stream: Any = None  # GPU: the compute stream; every update runs on it and every step ends on it
        self.exchange_stream: Any = None  # GPU, overlapped and graph: where the halo exchange runs
        if self.on_gpu:
            self._make_streams()
            self.xp.cuda.Device().synchronize()  # the uploads ran on the legacy stream; the new streams skip it
        self._exchangers: list[Any] = []
        self._graphs: dict[tuple[int, int], Any] = {}
        self._parity = 0  # fields[parity] is u (current), fields[1 - parity] is v (next)
        self.steps_done = 0
        self._closed = False
        try:
            if self.mode in SHMEM_MODES:
                self._start_shmem(timeout)
            else:
                for f in self.fields:  # one exchanger per field, so that swapping u and v copies nothing
                    exchanger = HaloExchanger(d, f, transport, timeout=timeout) if exchange else NoExchange()
                    self._exchangers.append(exchanger)
                self.transport = self._exchangers[0].transport.name if exchange else "none"
            if self.on_gpu:
                from .cuda_kernel import CudaJacobi

                self._kernel: Any = CudaJacobi(self.fields, self.parts)
            else:
                from .numpy_kernel import NumpyJacobi

                self._kernel = NumpyJacobi(self.fields, self.parts)
            self._step = self._step_traditional if self.mode == "traditional" else self._step_overlapped
            if self.mode == "graph":
                self._capture_graphs(exchange)
        except BaseException:
            self._release()
            raise

    # -- set-up ----------------------------------------------------------------------------------------------

    def _check_shmem_mode(self, exchange: bool) -> None:
        if self.halo != 1:
            raise StencilError(
                f"mode {self.mode!r} stores each edge point into the neighbour's halo as it computes it, which needs "
                f"halo=1 (the stencil's reach); got halo={self.halo}"
            )
        if not exchange:
            raise StencilError(f"mode {self.mode!r} moves halos in its own kernels; exchange=False needs another mode")

    def _start_shmem(self, timeout: float | None) -> None:
        """The NVSHMEM kernels, and the first delivery of the initial field's edges."""
        from .shmem_kernel import ShmemJacobi

        self.transport = "nvshmem"
        self._waits = GpuWaitReport(self.comm.rank, "nvshmem")
        self._waits.set_timeout(self.comm.timeout if timeout is None else timeout)
        self._shmem = ShmemJacobi(self.comm, self.fields, self.decomposition, self.region, self.parts, self._waits)
        self._shmem.send_edges(0, 0, self.stream)

    def _initial_local(self, seed: int) -> np.ndarray:
        """This rank's local array on the host: the initial field on the block; zeros in the halo facing a
        neighbour (filled by the first exchange); NaN in the halo beyond the global grid, which no step reads."""
        d, h, n = self.decomposition, self.halo, self.n
        local = np.full(d.local_shape, np.nan, dtype=self.dtype)
        local[d.interior_slices] = initial_block(self.global_shape, d.global_slices, self.dtype, seed)
        inside, low, high = slice(h, h + n), slice(0, h), slice(h + n, 2 * h + n)
        faces = {(0, -1): (low, inside), (0, 1): (high, inside), (1, -1): (inside, low), (1, 1): (inside, high)}
        for (axis, side), face in faces.items():
            neighbour = list(d.coords)
            neighbour[axis] += side
            if d.rank_of(neighbour) is not None:
                local[face] = 0
        return local

    def _make_streams(self) -> None:
        cuda = self.xp.cuda
        self.stream = cuda.Stream(non_blocking=True)
        # The exchange's small pack/unpack kernels get the highest priority, so that they are scheduled between
        # the blocks of a running interior kernel instead of waiting for all of them. (CuPy has no binding of
        # cudaDeviceGetStreamPriorityRange; CUDA clamps a priority beyond the range to its end.)
        self.exchange_stream = cuda.Stream(non_blocking=True, priority=HIGHEST_PRIORITY)
        # Recorded on the compute stream as a step begins: the previous step has written the points that this
        # step's exchange sends, so the exchange stream may start.
        self._step_begun = cuda.Event(block=False, disable_timing=True)
        # Recorded on the exchange stream after the unpack: the halos are in place, the boundary strips may run.
        self._halo_arrived = cuda.Event(block=False, disable_timing=True)

    def _capture_graphs(self, exchange: bool) -> None:
        """Capture the overlapped step in CUDA graphs: (parity, 1) does one step from that parity, (parity, 2)
        two. Capturing runs nothing."""
        if exchange and not self._exchangers[0].transport.graph_capturable:
            raise StencilError(
                f"mode 'graph' captures the halo exchange in a CUDA graph, but transport {self.transport!r} needs "
                "the host during an exchange; use transport 'ipc' or 'nccl' (or 'auto', which picks one of them "
                "where it can), or mode 'overlapped'"
            )
        for parity in (0, 1):
            for count in (1, 2):
                self._graphs[(parity, count)] = self._capture(parity, count)

    def _capture(self, parity: int, count: int) -> Any:
        def steps() -> None:
            for _ in range(count):
                self._step_overlapped()
                self._parity ^= 1

        saved, self._parity = self._parity, parity
        try:
            with self.stream:  # anything CuPy enqueues implicitly goes to the capturing stream too
                return capture(self.stream, steps)[0]
        finally:
            self._parity = saved

    # -- stepping --------------------------------------------------------------------------------------------

    def _step_traditional(self) -> None:
        """Exchange the halo of u, then update the whole block (GPU: all on the compute stream)."""
        p = self._parity
        self._exchangers[p].start(self.stream).wait()
        self._kernel.run(p, WHOLE, self.stream)

    def _step_overlapped(self) -> None:
        """Start the exchange of u's halo, update the interior meanwhile, wait, update the boundary strips."""
        p = self._parity
        if self.on_gpu:
            self.stream.record(self._step_begun)
            self.exchange_stream.wait_event(self._step_begun)
        handle = self._exchangers[p].start(self.exchange_stream)
        self._kernel.run(p, INNER, self.stream)
        handle.wait()
        if self.on_gpu:
            self.exchange_stream.record(self._halo_arrived)
            self.stream.wait_event(self._halo_arrived)
        self._kernel.run(p, STRIPS, self.stream)

    def step(self, k: int = 1) -> None:
        """Advance ``k`` time steps (collective). GPU work is enqueued and may still run after this returns:
        ``synchronize()`` waits for it (``field()`` does)."""
        if self._closed:
            raise StencilError("this Stencil2D is closed; make a new one")
        k = check_steps(k)
        if self.mode == "persistent":
            if k:
                self._shmem.persistent(self._parity, self.steps_done, k, self.stream)
                self._parity ^= k & 1
        elif self.mode == "nvshmem":
            for s in range(k):
                self._shmem.boundary(self._parity, self.steps_done + s + 1, self.stream)
                self._kernel.run(self._parity, INNER, self.stream)
                self._parity ^= 1
        elif self.mode == "graph":
            for _ in range(k // 2):
                self._graphs[(self._parity, 2)].launch(self.stream)
            if k % 2:
                self._graphs[(self._parity, 1)].launch(self.stream)
                self._parity ^= 1
        else:
            for _ in range(k):
                self._step()
                self._parity ^= 1
        self.steps_done += k

    def synchronize(self) -> None:
        """Wait until the GPU has finished every step enqueued so far, then raise GridcommTimeout if a GPU-side
        wait of a replayed graph gave up (ipc). Nothing to do on the CPU."""
        if self.on_gpu:
            self.stream.synchronize()
            self.exchange_stream.synchronize()
            if self.mode == "graph":
                for exchanger in self._exchangers:
                    exchanger.check()
            if self._shmem is not None:
                self._waits.check(f"stencil2d {self.mode} step (up to step {self.steps_done})")

    # -- results ---------------------------------------------------------------------------------------------

    @property
    def current(self) -> Any:
        """This rank's local array (interior plus halo) holding the field after ``steps_done`` steps."""
        return self.fields[self._parity]

    def local(self) -> Any:
        """View of this rank's n x n block of the current field (NumPy or CuPy; synchronize() first on the GPU)."""
        return self.decomposition.interior(self.current)

    def field(self, root: int = 0) -> np.ndarray | None:
        """Collective: the whole current field, (n px) x (n py) as a NumPy array on ``root`` (None elsewhere)."""
        self.synchronize()
        return self.decomposition.gather(self.current, root)

    @property
    def bytes_per_step(self) -> int:
        """Bytes this rank sends to other ranks per step (message padding included)."""
        if self._shmem is not None:
            return self._shmem.neighbours * self.n * self.dtype.itemsize
        return int(self._exchangers[self._parity].bytes_per_exchange[0]) if self._exchangers else 0

    @property
    def points_per_step(self) -> int:
        """Points of the global grid updated per step (all but the fixed outer ring)."""
        return math.prod(max(0, s - 2) for s in self.global_shape)

    # -- life cycle ------------------------------------------------------------------------------------------

    def _release(self) -> None:
        self._graphs = {}
        if self.on_gpu and self.stream is not None:
            self.stream.synchronize()
            self.exchange_stream.synchronize()
        for exchanger in self._exchangers:
            exchanger.close()
        self._exchangers = []
        if self._symmetric is not None:  # collective: no rank frees while a neighbour may still store into it
            from .... import shmem

            self.comm.mpi.Barrier()
            if self._shmem is not None:
                self._shmem.close()
            shmem.free_symmetric(self._symmetric)
            self._shmem = self._symmetric = None

    def close(self) -> None:
        """Collective: wait for the GPU, free the exchangers and graphs. The object cannot step afterwards."""
        if not self._closed:
            self._release()
            self._closed = True

    def __enter__(self) -> Stencil2D:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        device = "GPU" if self.on_gpu else "CPU"
        return (
            f"Stencil2D(n={self.n}, global_shape={self.global_shape}, proc_grid={self.proc_grid}, mode={self.mode!r}, "
            f"{device}, dtype={self.dtype}, transport={getattr(self, 'transport', '?')!r}, rank={self.comm.rank})"
        )
