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
THREADS = 256  # per block
LEVELS_PER_THREAD = 2  # the default where the level count is even (see choose_levels_per_thread)
PHASES = ("upwind", "gradient", "fluxes", "bounds", "corrective")


def choose_levels_per_thread(levels: int, asked: int | None = None) -> int:
    """Levels one thread computes: ``asked`` (1, 2 or 4; it must divide ``levels``), else 2 where ``levels``
    is even and 1 where it is odd."""
    if asked is None:
        return LEVELS_PER_THREAD if levels % LEVELS_PER_THREAD == 0 else 1
    if asked not in (1, 2, 4) or levels % asked:
        raise ValueError(f"levels_per_thread={asked!r}: must be 1, 2 or 4 and divide the level count {levels}")
    return asked


def mpdata_function(name: str, levels_per_thread: int, degree: int) -> Any:
    """Kernel ``gridcomm_mpdata_<name>`` built for ``levels_per_thread`` and a node-to-edge table ``degree``
    slots wide, on the current GPU."""
    options = ("-std=c++17", "--fmad=false", f"-DLEVELS_PER_THREAD={levels_per_thread}", f"-DDEGREE={degree}")
    return package_kernel(__package__, SOURCE, f"gridcomm_mpdata_{name}", options)


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
            "edge_tab": i32(t.edge_tab),
            "sign_tab": f64(t.sign_tab),
            "other_tab": i32(t.other_tab),
            "dt_area": f64(t.dt_area),
            "vpos": f64(np.maximum(v, 0.0)),
            "vneg": f64(np.minimum(v, 0.0)),
            "vabs": f64(np.abs(v)),
            "vdt": f64(t.dt * v),
            "wind": [f64(t.velocities[:, k]) for k in range(3)],
            "normal_tab": f64(t.normal_tab),
            "area": f64(t.area_owned),
            "xyz": f64(t.xyz),
            INNER: i32(t.inner),
            OUTER: i32(t.outer),
            "edges": {INNER: i32(t.inner_edges), OUTER: i32(t.outer_edges)},
            "edge_i": i32(t.edge_i),
            "edge_j": i32(t.edge_j),
        }
        mesh = (a["update_nodes"], a["edge_tab"], a["sign_tab"], a["other_tab"], np.int32(t.n_update), a["dt_area"])
        wind = (a["vabs"], a["vdt"], *a["wind"])
        levels, stride = np.int32(t.levels), np.int64(t.n_local * t.levels)
        no = t.n_owned
        self._launches: dict[tuple[str, str], list[tuple[Any, int, tuple[Any, ...]]]] = {}
        for part in (INNER, OUTER):
            nodes, edges = a[part], a["edges"][part]
            count, n_edges = np.uint32(len(nodes)), np.uint32(len(edges))
            upwind = (f.psi, f.psi1, nodes, count, *mesh, a["vpos"], a["vneg"], levels)
            self._add(("upwind", part), count, upwind)
            fluxes = (f.psi1, f.grad, f.flux, edges, n_edges, a["edge_i"], a["edge_j"], *wind, stride, levels)
            self._add(("fluxes", part), n_edges, fluxes)
            bounds = (f.psi, f.psi1, f.flux, f.beta_up, f.beta_dn, nodes, count, *mesh, levels)
            self._add(("bounds", part), count, bounds)
        owned = np.uint32(no)
        gradient = (f.psi1, f.grad, owned, *mesh, a["normal_tab"], a["area"], a["xyz"], stride, levels)
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
        self._launches[key] = [(function, math.ceil(items / THREADS), args)] if items else []

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
