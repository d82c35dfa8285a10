"""The stencil2d modes that exchange halos from the GPU with NVSHMEM (jacobi2d_nvshmem.cu, built by nvcc).

``nvshmem``: per step, a boundary kernel waits for the halos, updates the boundary strips (their edge points are
stored straight into the neighbours' halos) and signals the neighbours; jacobi2d.cu updates the interior.
``persistent``: one cooperative kernel runs many steps; its blocks update the block and sync grid-wide, and each
edge point waits for its halo values and sends its own as tagged lines (no fence, no signal), with no return to
the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .... import shmem
from ....comm import Communicator
from ....transports.gpu_waits import GpuWaitReport
from .regions import STRIPS, Rect

SOURCE = Path(__file__).with_name("jacobi2d_nvshmem.cu")
OPTIONS = ("--fmad=false",)  # every add and multiply rounded separately, as NumPy does them
SUFFIX = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
#: Sides in the kernels' order, as (axis, direction) of the neighbour.
SIDES = ((0, -1), (0, 1), (1, -1), (1, 1))
BOUNDARY_THREADS = 256
#: The persistent kernel's block: a tile of 32 columns (a warp: coalesced) by 32 rows.
PERSISTENT_BLOCK = (32, 32)
#: Which build of the persistent kernel runs: None picks by the region (the build for two resident blocks per SM,
#: whose blocks take their tiles from a counter, where the grid of the other would fill the GPU: on 4 x H100 at
#: n = 1024 / 2048 / 8192, 9.4 / 33.5 / 453.6 us per step against 9.7 / 43.6 / 655.9; jacobi2d_nvshmem.cu says
#: why); True or False forces it (tests, benchmarks/tune_persistent.py).
TWO_BLOCKS: bool | None = None
#: Bytes of one line of jacobi2d_nvshmem.cu: a float64 halo value with its tag in each half (float32 lines take 8).
LINE_BYTES = 16
#: Points each thread of the persistent kernel updates per step, at least where the grid allows: up to n = 64 the
#: grid is one block, which syncs with a block barrier instead of a grid-wide one.
POINTS_PER_THREAD = 4


def symmetric_fields(host: np.ndarray, comm: Communicator) -> tuple[Any, list[Any]]:
    """Collective: two copies of ``host`` (u and v) in NVSHMEM's symmetric heap, as CuPy arrays, and the
    allocation that holds them (for ``shmem.free_symmetric``)."""
    memory = shmem.symmetric_array(2 * host.nbytes, comm)
    fields = [memory[k * host.nbytes : (k + 1) * host.nbytes].view(host.dtype).reshape(host.shape) for k in (0, 1)]
    for f in fields:
        f.set(host)
    return memory, fields


def _resident_blocks(kernel: Any, threads: int, sms: int) -> int:
    """How many blocks of ``threads`` threads of ``kernel`` the GPU's ``sms`` SMs hold at once."""
    import cupy

    return cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, 0) * sms


class ShmemJacobi:
    """The NVSHMEM kernels of one Stencil2D: its plan, signals and launches (collective construction).

    Args:
        comm: the ranks of the run (all processes of the job).
        fields: u and v, symmetric CuPy arrays of (n + 2) x (n + 2) points (halo 1).
        decomposition: the CartesianDecomposition of the run (its neighbours).
        region: the points a step updates; parts: the boundary strips (regions.STRIPS) among them.
        waits: where the kernels report a wait that gave up.
    """

    def __init__(
        self,
        comm: Communicator,
        fields: Sequence[Any],
        decomposition: Any,
        region: Rect,
        parts: dict[str, list[Rect]],
        waits: GpuWaitReport,
    ) -> None:
        import cupy

        self.fields = fields
        self._waits = waits
        dtype = np.dtype(fields[0].dtype)
        module = shmem.load_module(SOURCE, comm, OPTIONS)
        self._boundary = module.get_function(f"gridcomm_jacobi2d_boundary_{SUFFIX[dtype]}")
        self._send_edges = module.get_function(f"gridcomm_jacobi2d_send_edges_{SUFFIX[dtype]}")
        self._fifth = dtype.type(0.2)
        pes = shmem.pe_of_ranks(comm)
        n = fields[0].shape[0] - 2
        neighbours = []
        for axis, direction in SIDES:
            coords = list(decomposition.coords)
            coords[axis] += direction
            rank = decomposition.rank_of(coords)
            neighbours.append(-1 if rank is None else int(pes[rank]))
        strips = parts[STRIPS]
        plan = [n, fields[0].shape[1], *neighbours, *region.bounds, len(strips)]
        plan += [b for r in strips for b in r.bounds] + [0] * 4 * (4 - len(strips))
        self.plan = cupy.asarray(np.array(plan, dtype=np.int64))
        self.neighbours = sum(pe >= 0 for pe in neighbours)
        self._signals = shmem.symmetric_array(8 * len(SIDES), comm).view(np.uint64)
        # The persistent mode's lines: per side and step parity, n edge values with their step's tag, 16 bytes each.
        self._lines = shmem.symmetric_array(len(SIDES) * 2 * n * LINE_BYTES, comm)
        self._finished = cupy.zeros(1, dtype=np.uint32)
        self._stop = cupy.zeros(3, dtype=np.uint32)  # the persistent kernel's stop flag, then its two tile counters
        strip_points = sum(r.points for r in strips)
        device = cupy.cuda.Device()
        sms = int(device.attributes["MultiProcessorCount"])
        self._boundary_blocks = max(1, min(math.ceil(strip_points / BOUNDARY_THREADS), 4 * sms))
        threads = math.prod(PERSISTENT_BLOCK)
        wanted = math.ceil(region.points / (threads * POINTS_PER_THREAD))
        one = module.get_function(f"gridcomm_jacobi2d_persistent_{SUFFIX[dtype]}")
        two = wanted >= _resident_blocks(one, threads, sms) if TWO_BLOCKS is None else TWO_BLOCKS
        self._persistent = module.get_function(f"gridcomm_jacobi2d_persistent_two_{SUFFIX[dtype]}") if two else one
        self.persistent_blocks = max(1, min(wanted, _resident_blocks(self._persistent, threads, sms)))

    def send_edges(self, parity: int, steps_done: int, stream: Any) -> None:
        """Deliver the edges of ``fields[parity]`` (the field after ``steps_done`` steps) to the neighbours."""
        self._send_edges(
            (len(SIDES),),
            (BOUNDARY_THREADS,),
            (self.fields[parity], self._lines, self.plan, self._signals, np.int64(steps_done), self._finished),
            stream=stream,
        )

    def boundary(self, parity: int, step: int, stream: Any) -> None:
        """The nvshmem mode's boundary kernel of step ``step`` (1-based), reading ``fields[parity]``."""
        self._boundary(
            (self._boundary_blocks,),
            (BOUNDARY_THREADS,),
            (
                self.fields[parity],
                self.fields[1 - parity],
                self.plan,
                self._signals,
                np.int64(step),
                self._fifth,
                self._finished,
                self._waits.limit_ns,
                self._waits.address,
            ),
            stream=stream,
        )

    def persistent(self, parity: int, steps_done: int, steps: int, stream: Any) -> None:
        """One cooperative launch that runs ``steps`` steps after ``steps_done``, starting from ``fields[parity]``."""
        with stream:
            self._stop.fill(0)
        self._persistent(
            (self.persistent_blocks,),
            PERSISTENT_BLOCK,
            (
                self.fields[parity],
                self.fields[1 - parity],
                self._lines,
                self.plan,
                self._signals,
                np.int64(steps_done),
                np.int32(steps),
                self._fifth,
                self._stop,
                self._waits.limit_ns,
                self._waits.address,
            ),
            stream=stream,
            enable_cooperative_groups=True,
        )

    def close(self) -> None:
        """Collective: free the signals and lines (no kernel may still run)."""
        if self._signals is not None:
            shmem.free_symmetric(self._signals)
            shmem.free_symmetric(self._lines)
            self._signals = self._lines = None
