"""MPDATA's step arithmetic on the GPU: mpdata.cu compiled at run time by NVRTC, one launch per phase and part.

The tables go to the GPU once; every launch's arguments are worked out once, so a phase is one kernel launch
on the solver's stream (graph-capturable). Compiled with --fmad=false: every add and multiply is rounded on
its own, as NumPy does them, so the GPU's results equal the CPU's (see mpdata.cu).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .... import kernels
from ....errors import ArgumentError
from .tables import INNER, OUTER, MeshTables

SOURCE = Path(__file__).with_name("mpdata.cu")
THREADS = 256  # per block (mpdata.cu's THREADS)
PHASES = ("upwind", "gradient", "fluxes", "bounds", "corrective")
SIGN_TAGS = {1.0: 1, -1.0: 2, 0.0: 0}  # mpdata.cu's edge table: edge * 4 + the tag of the slot's sign
COMMON_SHARE = 0.99  # nodes whose edges all lie in the slots that every node runs (common_degree)


@dataclass(frozen=True)
class KernelShape:
    """How one kernel runs: the levels each thread computes (vector loads of 2), the blocks of THREADS per SM
    that its register allocation must allow (__launch_bounds__; 1 leaves it to the compiler), and the items
    (nodes or edges x levels_per_thread levels) each thread computes: a block computes THREADS x that many
    consecutive ones (mpdata.cu's for_each_item)."""

    levels_per_thread: int
    blocks_per_sm: int
    items_per_thread: int


#: Each kernel's shape: the fastest measured alone on one H200 at O1280 x 32 levels (benchmarks/tune_mpdata.py,
#: tune-mpdata-gpu-1r-20261124T054143Z, ...T055528Z, ...T060853Z, ...T061309Z, ...T093211Z; shapes within 3 % of
#: each other swap places between machines). More levels per thread and more resident warps keep more of the
#: gathers' bytes in flight, down to where the registers run out (spills) or too few warps are left to hide the
#: latency: the upwind pass and the bounds fit 5 blocks per SM at 4 and 2 levels per thread (3 % and 7 % faster
#: than 4 blocks, ...T093211Z). Several items per thread help the edge kernel only. Fetching a thread's next
#: item's table row ahead, while it loads the current item's fields, helped none of them once the code per item
#: was short (tune-mpdata-gpu-1r-20261124T055528Z): taken out.
KERNEL_SHAPES: dict[str, KernelShape] = {
    "upwind": KernelShape(4, 5, 1),
    "gradient": KernelShape(4, 4, 1),
    "fluxes": KernelShape(2, 4, 8),
    "bounds": KernelShape(2, 5, 1),
    "corrective": KernelShape(4, 4, 1),
}


def check_levels_per_thread(levels: int, asked: int) -> None:
    """Raise unless ``asked`` levels per thread (1, 2 or 4) divides the level count."""
    if asked not in (1, 2, 4) or levels % asked:
        raise ArgumentError(f"levels_per_thread={asked!r}: must be 1, 2 or 4 and divide the level count {levels}")


def kernel_shape(name: str, levels: int, levels_per_thread: int | None = None) -> KernelShape:
    """Kernel ``name``'s shape (KERNEL_SHAPES) for fields of ``levels`` levels: its levels per thread, or
    ``levels_per_thread`` where given, halved until it divides ``levels``."""
    shape = KERNEL_SHAPES[name]
    lpt = levels_per_thread or shape.levels_per_thread
    while levels % lpt:
        lpt //= 2
    return replace(shape, levels_per_thread=lpt)


def mpdata_function(name: str, shape: KernelShape, levels: int, degree: int, common_degree: int) -> Any:
    """Kernel ``gridcomm_mpdata_<name>`` built for ``shape``, fields of ``levels`` levels and a node-to-edge
    table ``degree`` slots wide whose first ``common_degree`` slots every node runs (see :func:`common_degree`),
    on the current GPU."""
    options = ("-std=c++17", "--fmad=false", f"-DLEVELS={levels}", f"-DLEVELS_PER_THREAD={shape.levels_per_thread}",
               f"-DDEGREE={degree}", f"-DCOMMON_DEGREE={common_degree}", f"-DMIN_BLOCKS={shape.blocks_per_sm}",
               f"-DITEMS={shape.items_per_thread}")  # fmt: skip
    return kernels.function(SOURCE, f"gridcomm_mpdata_{name}", options)


def common_degree(sign_tab: np.ndarray, share: float = COMMON_SHARE) -> int:
    """The fewest leading slots of the node-to-edge table (D, n) that hold every edge of at least ``share`` of
    the nodes: the kernels run those slots for every node and the rest only where a node has that edge (6 of 7
    on the octahedral mesh, where a few nodes have 7 edges and nearly all have 6)."""
    width = len(sign_tab)
    if width == 0 or sign_tab.shape[1] == 0:
        return max(width, 1)
    degrees = np.count_nonzero(sign_tab, axis=0)
    covered = np.cumsum(np.bincount(degrees, minlength=width + 1)) / len(degrees)
    return max(int(np.argmax(covered >= share)), 1)


def edge_codes(edge_tab: np.ndarray, sign_tab: np.ndarray) -> np.ndarray:
    """Each slot's edge code, the first column of :func:`slot_table`: its local edge times 4 plus its sign's tag."""
    if len(edge_tab) and int(edge_tab.max()) >= 2**29:
        raise ArgumentError(f"{int(edge_tab.max()) + 1} local edges: the GPU edge table holds 2^29; use more ranks")
    tags = np.zeros(sign_tab.shape, np.int64)
    for sign, tag in SIGN_TAGS.items():
        tags[sign_tab == sign] = tag
    return edge_tab.astype(np.int64) * 4 + tags


def slot_table(edge_tab: np.ndarray, sign_tab: np.ndarray, other_tab: np.ndarray) -> np.ndarray:
    """The node-to-edge table as mpdata.cu reads it: (n_update, W, 2) int32, per update position and slot its
    edge code (:func:`edge_codes`) and the node at the other end, W = D rounded up to even so that a row is
    whole 16-byte loads (the extra slot is never read)."""
    degree, n = edge_tab.shape
    table = np.zeros((n, degree + degree % 2, 2), np.int32)
    table[:, :degree, 0] = edge_codes(edge_tab, sign_tab).T
    table[:, :degree, 1] = other_tab.T
    return table


def run_start(positions: np.ndarray) -> int:
    """The first entry of ``positions`` where they are one contiguous ascending run (the kernels then compute
    each entry instead of reading it), else -1."""
    n = len(positions)
    if n and int(positions[-1]) - int(positions[0]) == n - 1 and bool(np.all(np.diff(positions) == 1)):
        return int(positions[0])
    return -1


class CudaMpdata:
    """The five phases of a step on CuPy fields, each enqueued on ``stream`` (see
    :class:`~gridcomm.lab.apps.mpdata.scheme.Mpdata`); ``inner`` parts read no halo value.

    ``levels_per_thread`` (1, 2 or 4, dividing the level count) replaces every kernel's own (KERNEL_SHAPES);
    ``shapes`` replaces whole shapes by kernel name (benchmarks/tune_mpdata.py)."""

    def __init__(
        self,
        tables: MeshTables,
        fields: Any,
        stream: Any,
        levels_per_thread: int | None = None,
        shapes: dict[str, KernelShape] | None = None,
    ) -> None:
        import cupy

        t, f = tables, fields
        items = max(t.n_local, len(t.edge_i)) * t.levels
        if items >= 2**32:  # the kernels number their threads with 32-bit unsigned integers
            raise ArgumentError(
                f"{len(t.edge_i)} edges x {t.levels} levels is too many values for one GPU's part (at most 2^32 - 1): "
                "use more ranks or fewer levels"
            )
        self.stream = stream
        if levels_per_thread is not None:
            check_levels_per_thread(t.levels, levels_per_thread)
        self.shapes = {name: kernel_shape(name, t.levels, levels_per_thread) for name in PHASES}
        self.shapes.update(shapes or {})
        self._degree, self._levels = t.degree, t.levels
        self.common_degree = common_degree(t.sign_tab)
        up = cupy.asarray

        def i32(a: np.ndarray) -> Any:
            return up(np.ascontiguousarray(a, np.int32))

        def f64(a: np.ndarray) -> Any:
            return up(np.ascontiguousarray(a, np.float64))

        v, n_edges = t.fluxes, len(t.edge_i)
        pad = np.zeros((n_edges, 1))  # rows of whole 16-byte loads
        self._arrays = a = {  # kept alive here: the launches below hold raw pointers to them
            "update_nodes": i32(t.update_nodes),
            "slots": i32(slot_table(t.edge_tab, t.sign_tab, t.other_tab)),
            "dt_area": f64(t.dt_area),
            "volume_flux": f64(v),
            "coefficients": f64(np.column_stack([np.abs(v), t.dt * v, t.velocities, pad])),
            "normals": f64(np.column_stack([0.5 * t.normals, pad])),  # halved: exact (mpdata.cu's gradient)
            "inv_area": f64(t.inv_area_owned),
            "xyz": f64(t.xyz),
            INNER: i32(t.inner),
            OUTER: i32(t.outer),
            "edges": {INNER: i32(t.inner_edges), OUTER: i32(t.outer_edges)},
            "ends": i32(np.column_stack([t.edge_i, t.edge_j])),
        }
        no = t.n_owned
        mesh = (a["update_nodes"], a["slots"], np.int32(no), a["dt_area"])
        stride = np.int64(t.n_local * t.levels)
        self._launches: dict[tuple[str, str], list[tuple[Any, int, tuple[Any, ...]]]] = {}
        self._work: dict[tuple[str, str], tuple[int, tuple[Any, ...]]] = {}
        for part, node_list, edge_list in ((INNER, t.inner, t.inner_edges), (OUTER, t.outer, t.outer_edges)):
            nodes, edges = (a[part], np.int32(run_start(node_list))), (a["edges"][part], np.int32(run_start(edge_list)))
            count, edge_count = np.uint32(len(node_list)), np.uint32(len(edge_list))
            upwind = (f.psi, f.psi1, *nodes, count, *mesh, a["volume_flux"])
            self._add(("upwind", part), count, upwind)
            fluxes = (f.psi1, f.grad, f.flux, *edges, edge_count, a["ends"], a["coefficients"], stride)
            self._add(("fluxes", part), edge_count, fluxes)
            bounds = (f.psi, f.psi1, f.flux, f.beta_up, f.beta_dn, *nodes, count, *mesh)
            self._add(("bounds", part), count, bounds)
        owned = np.uint32(no)
        gradient = (f.psi1, f.grad, owned, *mesh, a["normals"], a["inv_area"], a["xyz"], stride)
        self._add(("gradient", "all"), owned, gradient)
        for limit in (0, 1):
            corrective = (f.psi, f.psi1, f.flux, f.beta_up, f.beta_dn, owned, *mesh, np.int32(limit))
            self._add(("corrective", str(limit)), owned, corrective)
        self._psi_owned, self._psi1_owned = f.psi[:no], f.psi1[:no]

    def _add(self, key: tuple[str, str], count: int, args: tuple[Any, ...]) -> None:
        """The launch of ``gridcomm_mpdata_<phase>`` over ``count`` nodes or edges (none where there are none),
        in the phase's shape."""
        self._work[key] = (count, args)
        shape = self.shapes[key[0]]
        items = int(count) * self._levels // shape.levels_per_thread
        function = mpdata_function(key[0], shape, self._levels, self._degree, self.common_degree)
        blocks = math.ceil(items / (THREADS * shape.items_per_thread))
        self._launches[key] = [(function, blocks, args)] if items else []

    def set_shape(self, phase: str, shape: KernelShape) -> None:
        """Run ``phase``'s kernel in ``shape`` from now on (benchmarks/tune_mpdata.py; a captured graph keeps
        the launches it recorded)."""
        self.shapes[phase] = shape
        for key, (count, args) in list(self._work.items()):
            if key[0] == phase:
                self._add(key, count, args)

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
