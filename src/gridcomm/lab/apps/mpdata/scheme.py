"""MPDATA on the edge-based median-dual mesh, one part's share, with its two halo exchanges per step.

The scheme (Smolarkiewicz & Szmelter 2005; Smolarkiewicz, Kühnlein & Wedi 2016; Kühnlein & Smolarkiewicz
2017), for a tracer psi advected by a non-divergent wind whose volume flux through the dual face of edge
e = (i, j) is V_e (m^2/s, from i to j):

1. Upwind (donor-cell) pass: F_e = [V_e]+ psi_i + [V_e]- psi_j, psi1_i = psi_i - dt / A_i sum_e s_ie F_e
   (s_ie = +1 when i is the edge's first node, -1 otherwise; A_i the dual volume).
2. Corrective pass: the same upwind pass applied to psi1 with the antidiffusive pseudo-velocity
   V1_e = (|V_e| (psi1_j - psi1_i) - dt V_e v_e . grad(psi1)_e) / (|psi1_i| + |psi1_j| + eps),
   which cancels the leading truncation error of step 1 (the implicit diffusion 1/2 |V| delta psi and
   the forward-in-time error 1/2 dt^2 d2psi/dt2). grad(psi1)_e is the mean of the nodal gradients at i and
   j (Green-Gauss on the dual cell, taken tangent to the sphere) and v_e the wind at the edge midpoint.
3. Non-oscillatory option (FCT, Zalesak 1979 / Smolarkiewicz & Grabowski 1990): the corrective fluxes
   are scaled so that psi2_i stays within the min/max of psi and psi1 over node i and its neighbours.

Distribution: every part owns nodes and keeps two halo layers. Two exchanges per step make the owned
results exactly those of a serial run:

* exchange 1, at the start of a step: psi on both halo layers. The upwind pass is then computed on the
  owned nodes and on halo layer 1 (whose edges are all local), and the nodal gradients of psi1 on the
  owned nodes (which need psi1 on layer 1 only).
* exchange 2, after the gradients: psi1 and its gradient (3 components) on both halo layers. Every edge
  with a node in owned + layer 1 then has its corrective flux, every such node its FCT bounds and limiter
  coefficients, and every owned node its limited update.

Node sums over edges run over a node-to-edge table (the dwarf's node2edge): per node its edges in ascending
global edge id, padded to the largest degree with zero-signed entries, summed slot by slot. A node's sum
therefore adds the same terms in the same order on any number of parts; every other operation is
elementwise IEEE arithmetic, so owned values are bitwise those of the serial run. (np.add.reduceat over
the local mesh's incidences gives the same guarantee but is about 3x slower with many levels.)

Arrays are (nodes, levels), levels the fast (contiguous) axis; the horizontal scheme acts on each level.

The step is written once (``Mpdata._advance``); its arithmetic runs in NumPy (numpy_kernels.py) or in CUDA
kernels (cuda_kernels.py, mpdata.cu) that do the same operations in the same order. On the GPU each exchange
runs on a stream of its own while the compute stream does the part of the next phase that reads no halo value
(the upwind pass, the antidiffusive fluxes and the FCT bounds of nodes and edges whose neighbours are all
owned), and the whole step, both exchanges included, can be captured in a CUDA graph and replayed
(``graphs=True``; transports ipc and nccl).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ....arguments import flag, real_number, whole_number
from ....arrays import resolve_array_module
from ....device import HIGHEST_PRIORITY
from ....errors import ArgumentError
from ....exchange import NoExchange
from ....graphs import capture
from ....grids.local import LocalMesh
from .cuda_kernels import check_levels_per_thread
from .tables import INNER, OUTER, MeshTables


def no_exchanger(fields: Sequence[Any]) -> NoExchange:
    return NoExchange()


def solver_options(
    levels: Any, fct: Any, iterations: Any, graphs: Any, levels_per_thread: Any
) -> tuple[int, bool, int, bool, int | None]:
    """The solver's own arguments (see :class:`Mpdata`) checked and in the form it uses: ArgumentTypeError for
    a wrong type (2.5 levels, fct="yes"), ArgumentError for a value out of range."""
    levels = whole_number(levels, "levels", least=1, meaning="vertical levels of every field")
    iterations = whole_number(
        iterations, "iterations", least=0, most=1,
        meaning="this MPDATA does 0 (upwind only) or 1 corrective iteration; more would need the pseudo-velocity's "
        "full vector and one more halo exchange per iteration",
    )  # fmt: skip
    if levels_per_thread is not None:
        levels_per_thread = whole_number(levels_per_thread, "levels_per_thread")
        check_levels_per_thread(levels, levels_per_thread)
    return levels, flag(fct, "fct"), iterations, flag(graphs, "graphs"), levels_per_thread


class Fields:
    """The solver's arrays, (n_local, levels) each: ``psi`` (the tracer), ``psi1`` (after the upwind pass),
    ``grad`` (3, n_local, levels) (gradient of psi1, 1/m per tracer unit), the FCT coefficients
    ``beta_up``/``beta_dn``, and ``flux`` (n_edges, levels), the corrective pass's flux per edge."""

    def __init__(self, xp: types.ModuleType, n_local: int, n_edges: int, levels: int) -> None:
        shape = (n_local, levels)
        self.flux = xp.zeros((n_edges, levels))  # antidiffusive flux per local edge, from i to j
        self.psi = xp.zeros(shape)
        self.psi1 = xp.zeros(shape)
        self.grad = xp.zeros((3, *shape))  # three C-contiguous (n, levels) fields
        self.beta_up = xp.zeros(shape)
        self.beta_dn = xp.zeros(shape)


def _capturable(exchanger: Any) -> bool:
    transport = getattr(exchanger, "transport", None)
    return transport is None or bool(getattr(transport, "graph_capturable", False))


class Mpdata:
    """One part's MPDATA solver: owns the tracer ``psi`` (n_local, levels) and the work arrays.

    Args:
        local: the part's mesh; with halo nodes it must have at least 2 layers.
        fluxes: (local.n_edges,) volume flux through each local edge's dual face, m^2/s, from i to j.
        velocities: (local.n_edges, 3) wind at the edge midpoints, m/s (3-D, tangent to the sphere).
        dt: time step, s (check it with :func:`gridcomm.lab.apps.mpdata.cfl.check_cfl`).
        levels: vertical levels (the second axis of every field).
        fct: apply the non-oscillatory (FCT) limiter to the corrective pass.
        iterations: corrective iterations: 1 (MPDATA, the default) or 0 (upwind only).
        make_exchanger: called (collectively, twice, in the same order on every part) with the list of
            fields that one exchange must fill; returns an object whose ``start(stream)`` begins filling their
            halo rows from the owners and returns a handle whose ``wait()`` completes it, e.g.
            ``lambda f: gridcomm.HaloExchanger(decomp, f)``. Default: no exchange (a single part).
        xp: ``numpy`` (CPU) or ``cupy`` (the current GPU), or the module's name.
        graphs: GPU only: capture one step, both exchanges included, in a CUDA graph and replay it each step
            (the exchangers' transport must be graph-capturable: ipc or nccl).
        levels_per_thread: GPU only: levels every CUDA thread computes (1, 2 or 4, dividing ``levels``), in
            place of each kernel's own (``cuda_kernels.KERNEL_SHAPES``).
    """

    def __init__(
        self,
        local: LocalMesh,
        fluxes: np.ndarray,
        velocities: np.ndarray,
        dt: float,
        *,
        levels: int = 1,
        fct: bool = True,
        iterations: int = 1,
        make_exchanger: Callable[[list[Any]], Any] | None = None,
        xp: Any = np,
        graphs: bool = False,
        levels_per_thread: int | None = None,
    ) -> None:
        levels, fct, iterations, graphs, levels_per_thread = solver_options(
            levels, fct, iterations, graphs, levels_per_thread
        )
        dt = real_number(dt, "dt", positive=True)
        if local.n_halo and local.layers < 2:
            raise ArgumentError(f"MPDATA needs 2 halo layers, the local mesh of part {local.part} has {local.layers}")
        fluxes = np.asarray(fluxes, np.float64)
        velocities = np.asarray(velocities, np.float64)
        if fluxes.shape != (local.n_edges,) or velocities.shape != (local.n_edges, 3):
            raise ArgumentError(
                f"fluxes {fluxes.shape} and velocities {velocities.shape} must be ({local.n_edges},) and "
                f"({local.n_edges}, 3): one per local edge"
            )
        self.xp = resolve_array_module(xp)
        self.on_gpu = self.xp.__name__ == "cupy"
        if graphs and not self.on_gpu:
            raise ArgumentError("graphs=True needs the GPU (xp=cupy): CUDA graphs replay GPU work")
        self.local, self.dt, self.levels, self.fct, self.iterations = local, dt, levels, fct, iterations
        self.tables = MeshTables.build(local, fluxes, velocities, dt, self.levels)
        self.fields = f = Fields(self.xp, local.n_local, local.n_edges, self.levels)
        self.psi = f.psi
        self.stream: Any = None  # GPU: every phase runs on it, and every step ends on it
        self.exchange_stream: Any = None  # GPU: where the halo exchanges run
        self._graph: Any = None
        self._exchanges: list[Any] = []
        self.steps_done = 0
        self.exchange_s = 0.0  # CPU: seconds spent in halo exchanges
        self.step_s = 0.0  # seconds spent in steps, exchanges included (GPU: measured by run())
        if self.on_gpu:
            self._make_streams()
            from .cuda_kernels import CudaMpdata

            self.kernels: Any = CudaMpdata(self.tables, f, self.stream, levels_per_thread)
        else:
            from .numpy_kernels import NumpyMpdata

            self.kernels = NumpyMpdata(self.tables, f)
        make = make_exchanger or no_exchanger
        self.exchange_fields: tuple[list[Any], ...] = ([f.psi], [f.psi1, *f.grad])
        try:
            self._exchanges.append(make(self.exchange_fields[0]))
            if iterations:
                self._exchanges.append(make(self.exchange_fields[1]))
            moved_by = getattr(self._exchanges[0], "transport", None)
            self.transport: str = "none" if moved_by is None else moved_by.name  # what moves the halos
            if graphs:
                self._capture()
        except BaseException:
            self.close()
            raise

    def _make_streams(self) -> None:
        cuda = self.xp.cuda
        self.stream = cuda.Stream(non_blocking=True)
        self.exchange_stream = cuda.Stream(non_blocking=True, priority=HIGHEST_PRIORITY)
        # Per exchange: recorded on the compute stream when the exchanged fields are written (the exchange may
        # start), and on the exchange stream when the halos are in place (the outer part may run).
        self._ready = [cuda.Event(block=False, disable_timing=True) for _ in range(2)]
        self._arrived = [cuda.Event(block=False, disable_timing=True) for _ in range(2)]

    def _capture(self) -> None:
        """Record one step (both exchanges) in a CUDA graph; capturing runs nothing."""
        if not all(_capturable(e) for e in self._exchanges):
            raise ArgumentError(
                f"graphs=True captures the halo exchanges in a CUDA graph, but transport {self.transport!r} needs "
                "the host during an exchange; use transport 'ipc' or 'nccl', or graphs=False"
            )
        with self.stream:  # anything CuPy enqueues implicitly goes to the capturing stream too
            self._graph = capture(self.stream, self._advance)[0]

    @property
    def exchanges_per_step(self) -> int:
        """Halo exchanges per step: 2 (1 with ``iterations=0``)."""
        return 1 + self.iterations

    @property
    def owned(self) -> Any:
        """The tracer on the owned nodes, (n_owned, levels) (a view; on the GPU call synchronize() first)."""
        return self.psi[: self.local.n_owned]

    def set_tracer(self, values: Any) -> None:
        """Set psi on every local node from host or device values broadcastable to (n_local, levels)."""
        if self.on_gpu:
            self.psi.set(np.ascontiguousarray(np.broadcast_to(values, self.psi.shape)))
            self.xp.cuda.Device().synchronize()  # the upload ran on the legacy stream; ours skip it
        else:
            self.psi[...] = values

    def synchronize(self) -> None:
        """GPU: wait for every step enqueued so far, then raise GridcommTimeout if a GPU-side wait of a
        replayed graph gave up (ipc). Nothing to do on the CPU."""
        if self.on_gpu:
            self.stream.synchronize()
            self.exchange_stream.synchronize()
            if self._graph is not None:
                for exchanger in self._exchanges:
                    exchanger.check()

    def _exchange(self, k: int, during: Callable[[], None] | None = None) -> None:
        """Exchange ``k`` (0: psi; 1: psi1 and its gradient); ``during`` runs while it is in flight."""
        exchanger = self._exchanges[k]
        if not self.on_gpu:
            start = time.perf_counter()
            handle = exchanger.start()
            if during is not None:
                during()
            handle.wait()
            self.exchange_s += time.perf_counter() - start
            return
        self.stream.record(self._ready[k])
        self.exchange_stream.wait_event(self._ready[k])
        handle = exchanger.start(self.exchange_stream)
        if during is not None:
            during()
        handle.wait()
        self.exchange_stream.record(self._arrived[k])
        self.stream.wait_event(self._arrived[k])

    def _advance(self) -> None:
        """One step's work, in order (enqueued on the GPU)."""
        k = self.kernels
        self._exchange(0, lambda: k.upwind(INNER))
        k.upwind(OUTER)
        if not self.iterations:
            k.accept_upwind()
            return
        k.gradient()
        self._exchange(1, lambda: self._corrective_part(INNER))
        self._corrective_part(OUTER)
        k.corrective(self.fct)

    def _corrective_part(self, part: str) -> None:
        """The antidiffusive fluxes, and with FCT the limiter coefficients, of one part."""
        self.kernels.fluxes(part)
        if self.fct:
            self.kernels.bounds(part)

    def step(self) -> None:
        """Advance ``psi`` on the owned nodes by one time step (halo rows are refreshed by the next step). On
        the GPU the step is enqueued and may still run after this returns (synchronize() waits)."""
        if self.on_gpu:
            if self._graph is not None:
                self._graph.launch(self.stream)
            else:
                self._advance()
        else:
            start = time.perf_counter()
            self._advance()
            self.step_s += time.perf_counter() - start
        self.steps_done += 1

    def run(self, steps: int, progress: Callable[[int, int], Any] | None = None) -> None:
        """``steps`` time steps; ``progress(done, steps)`` after each (on the GPU: after each is enqueued)."""
        start = time.perf_counter()
        for k in range(steps):
            self.step()
            if progress is not None:
                progress(k + 1, steps)
        if self.on_gpu:
            self.synchronize()
            self.step_s += time.perf_counter() - start

    def close(self) -> None:
        """Wait for the GPU, then free the exchangers and the graph (collective where the exchangers are)."""
        if self.on_gpu and self.stream is not None:
            self.stream.synchronize()
            self.exchange_stream.synchronize()
        self._graph = None
        for exchanger in self._exchanges:
            close = getattr(exchanger, "close", None)
            if close is not None:
                close()
        self._exchanges = []

    def __enter__(self) -> Mpdata:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
