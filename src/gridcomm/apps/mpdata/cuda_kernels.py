"""MPDATA's step arithmetic on the GPU: mpdata.cu compiled at run time by NVRTC, one launch per phase and part.

The tables go to the GPU once; every launch's arguments are worked out once, so a phase is one kernel launch
on the solver's stream (graph-capturable). Compiled with --fmad=false: every add and multiply is rounded on
its own, as NumPy does them, so the GPU's results equal the CPU's (see mpdata.cu).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...gpu import package_kernel
from .tables import INNER, OUTER, MeshTables

SOURCE = "mpdata.cu"
THREADS = 256  # per block (mpdata.cu's THREADS)
LEVELS_PER_THREAD = 2  # the default where the level count is even (see choose_levels_per_thread)
#: How each kernel runs, by (levels per thread, kernel): the blocks of THREADS per SM that its register allocation
#: must allow (__launch_bounds__; 1 leaves it to the compiler), and the items (nodes or edges x levels per thread
#: levels) each thread computes, fetching its next item's table row while it loads the current item's fields
#: where that is more than 1 (mpdata.cu's for_each_item, PREFETCH). The fastest on one H200 at O1280 x 32 levels
#: (benchmarks/tune_mpdata.py): more resident warps hide the gathers' latency (corrective 8.50 ms as compiled,
#: 5.09 ms at 6 blocks, tune-mpdata-gpu-1r-20261123T193408Z) down to where spills cost more: 4 for every kernel
#: in the loop over items (corrective 57 -> 65 % of the HBM copy against 6 before). Fetching ahead takes the
#: fluxes from 50 to 54 % (tune-mpdata-gpu-1r-20261124T030550Z), leaves the corrective pass where it is (64-66 %
#: either way) and costs the others more in registers than it gains (tune-mpdata-gpu-1r-20261124T030258Z).
KERNEL_SHAPES: dict[tuple[int, str], tuple[int, int]] = {
    (2, "upwind"): (4, 1),
    (2, "gradient"): (4, 1),
    (2, "fluxes"): (4, 4),
    (2, "bounds"): (4, 1),
    (2, "corrective"): (4, 4),
}
PHASES = ("upwind", "gradient", "fluxes", "bounds", "corrective")
SIGN_TAGS = {1.0: 1, -1.0: 2, 0.0: 0}  # mpdata.cu's edge table: edge * 4 + the tag of the slot's sign


def choose_levels_per_thread(levels: int, asked: int | None = None) -> int:
    """Levels one thread computes: ``asked`` (1, 2 or 4; it must divide ``levels``), else 2 where ``levels``
    is even and 1 where it is odd."""
    if asked is None:
        return LEVELS_PER_THREAD if levels % LEVELS_PER_THREAD == 0 else 1
    if asked not in (1, 2, 4) or levels % asked:
        raise ValueError(f"levels_per_thread={asked!r}: must be 1, 2 or 4 and divide the level count {levels}")
    return asked


def kernel_shape(levels_per_thread: int, name: str) -> tuple[int, int]:
    """(blocks per SM, items per thread) of kernel ``name`` (see KERNEL_SHAPES; (1, 1) where not listed)."""
    return KERNEL_SHAPES.get((levels_per_thread, name), (1, 1))


def mpdata_function(name: str, levels_per_thread: int, degree: int) -> Any:
    """Kernel ``gridcomm_mpdata_<name>`` built for ``levels_per_thread`` and a node-to-edge table ``degree``
    slots wide, on the current GPU."""
    blocks, items = kernel_shape(levels_per_thread, name)
    options = ("-std=c++17", "--fmad=false", f"-DLEVELS_PER_THREAD={levels_per_thread}", f"-DDEGREE={degree}",
               f"-DMIN_BLOCKS={blocks}", f"-DPREFETCH={int(items > 1)}")  # fmt: skip
    return package_kernel(__package__, SOURCE, f"gridcomm_mpdata_{name}", options)


def edge_codes(edge_tab: np.ndarray, sign_tab: np.ndarray) -> np.ndarray:
    """The node-to-edge table as mpdata.cu reads it: each slot's local edge times 4 plus its sign's tag."""
    if len(edge_tab) and int(edge_tab.max()) >= 2**29:
        raise ValueError(f"{int(edge_tab.max()) + 1} local edges: the GPU edge table holds 2^29; use more ranks")
    tags = np.zeros(sign_tab.shape, np.int64)
    for sign, tag in SIGN_TAGS.items():
        tags[sign_tab == sign] = tag
    return edge_tab.astype(np.int64) * 4 + tags


def run_start(positions: np.ndarray) -> int:
    """The first entry of ``positions`` where they are one contiguous ascending run (the kernels then compute
    each entry instead of reading it), else -1."""
    n = len(positions)
    if n and int(positions[-1]) - int(positions[0]) == n - 1 and bool(np.all(np.diff(positions) == 1)):
        return int(positions[0])
    return -1


class CudaMpdata:
    """The five phases of a step on CuPy fields, each enqueued on ``stream`` (see
    :class:`~gridcomm.apps.mpdata.scheme.Mpdata`); ``inner`` parts read no halo value."""

    def __init__(self, tables: MeshTables, fields: Any, stream: Any, levels_per_thread: int | None = None) -> None:
        import cupy

        t, f = tables, fields
        items = max(t.n_local, len(t.edge_i)) * t.levels
        if items >= 2**32:  # the kernels number their threads with 32-bit unsigned integers
            raise ValueError(
                f"{len(t.edge_i)} edges x {t.levels} levels is too many values for one GPU's part (at most 2^32 - 1): "
                "use more ranks or fewer levels"
            )
        self.stream = stream
        self.levels_per_thread = choose_levels_per_thread(t.levels, levels_per_thread)
        self._degree, self._levels = t.degree, t.levels
        up = cupy.asarray

        def i32(a: np.ndarray) -> Any:
            return up(np.ascontiguousarray(a, np.int32))

        def f64(a: np.ndarray) -> Any:
            return up(np.ascontiguousarray(a, np.float64))

        v = t.fluxes
        self._arrays = a = {  # kept alive here: the launches below hold raw pointers to them
            "update_nodes": i32(t.update_nodes),
            "edge_tab": i32(edge_codes(t.edge_tab, t.sign_tab)),
            "other_tab": i32(t.other_tab),
            "dt_area": f64(t.dt_area),
            "volume_flux": f64(v),
            "vabs": f64(np.abs(v)),
            "vdt": f64(t.dt * v),
            "wind": [f64(t.velocities[:, k]) for k in range(3)],
            "normals": f64(t.normals),
            "area": f64(t.area_owned),
            "xyz": f64(t.xyz),
            INNER: i32(t.inner),
            OUTER: i32(t.outer),
            "edges": {INNER: i32(t.inner_edges), OUTER: i32(t.outer_edges)},
            "edge_i": i32(t.edge_i),
            "edge_j": i32(t.edge_j),
        }
        no = t.n_owned
        mesh = (a["update_nodes"], a["edge_tab"], a["other_tab"], np.int32(t.n_update), np.int32(no), a["dt_area"])
        wind = (a["vabs"], a["vdt"], *a["wind"])
        levels, stride = np.int32(t.levels), np.int64(t.n_local * t.levels)
        self._launches: dict[tuple[str, str], list[tuple[Any, int, tuple[Any, ...]]]] = {}
        for part, node_list, edge_list in ((INNER, t.inner, t.inner_edges), (OUTER, t.outer, t.outer_edges)):
            nodes, edges = (a[part], np.int32(run_start(node_list))), (a["edges"][part], np.int32(run_start(edge_list)))
            count, n_edges = np.uint32(len(node_list)), np.uint32(len(edge_list))
            upwind = (f.psi, f.psi1, *nodes, count, *mesh, a["volume_flux"], levels)
            self._add(("upwind", part), count, upwind)
            fluxes = (f.psi1, f.grad, f.flux, *edges, n_edges, a["edge_i"], a["edge_j"], *wind, stride, levels)
            self._add(("fluxes", part), n_edges, fluxes)
            bounds = (f.psi, f.psi1, f.flux, f.beta_up, f.beta_dn, *nodes, count, *mesh, levels)
            self._add(("bounds", part), count, bounds)
        owned = np.uint32(no)
        gradient = (f.psi1, f.grad, owned, *mesh, a["normals"], a["area"], a["xyz"], stride, levels)
        self._add(("gradient", "all"), owned, gradient)
        for limit in (0, 1):
            corrective = (f.psi, f.psi1, f.flux, f.beta_up, f.beta_dn, owned, *mesh, np.int32(limit), levels)
            self._add(("corrective", str(limit)), owned, corrective)
        self._psi_owned, self._psi1_owned = f.psi[:no], f.psi1[:no]

    def _add(self, key: tuple[str, str], count: int, args: tuple[Any, ...]) -> None:
        """The launch of ``gridcomm_mpdata_<phase>`` over ``count`` nodes or edges (none where there are none):
        a thread per ``levels_per_thread`` levels of each."""
        lpt = self.levels_per_thread
        items = int(count) * self._levels // lpt
        function = mpdata_function(key[0], lpt, self._degree)
        per_thread = kernel_shape(lpt, key[0])[1]
        self._launches[key] = [(function, math.ceil(items / (THREADS * per_thread)), args)] if items else []

    def _run(self, key: tuple[str, str]) -> None:
        for function, blocks, args in self._launches[key]:
            function((blocks,), (THREADS,), args, stream=self.stream)

    def upwind(self, part: str) -> None:
        self._run(("upwind", part))

    def accept_upwind(self) -> None:
        import cupy

        with self.stream:
            cupy.copyto(self._psi_owned, self._psi1_owned)

    def gradient(self) -> None:
        self._run(("gradient", "all"))

    def fluxes(self, part: str) -> None:
        self._run(("fluxes", part))

    def bounds(self, part: str) -> None:
        self._run(("bounds", part))

    def corrective(self, limit: bool) -> None:
        self._run(("corrective", str(int(limit))))

    def launches(self, phase: str) -> list[tuple[str, str]]:
        """The launch keys of ``phase`` (one of PHASES), for benchmarks that time each kernel."""
        return [k for k, v in self._launches.items() if k[0] == phase and v]

    def run_launch(self, key: tuple[str, str]) -> None:
        """Enqueue one phase part by key (see ``launches``)."""
        self._run(key)
