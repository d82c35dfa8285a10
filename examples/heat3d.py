"""A 3-D heat equation (explicit Euler, 7-point Laplacian) on a structured grid split over the ranks.

    mpiexec -n 4 python examples/heat3d.py [--quick] [--cpu]      (or: gridcomm run --np 4 -- python ...)

The grid is periodic along x and held at 0 on the walls in y and z: gridcomm leaves the halo outside a
non-periodic boundary alone, so it stays 0. Each step exchanges the halo of the temperature and overlaps the
exchange with the update of the points that read no halo value. Arrays are CuPy on a GPU (one rank per GPU),
NumPy otherwise; heat3d_torch.py runs this same code on torch tensors. Rank 0 finally gathers the field, runs
the same steps serially on the whole grid and compares bit for bit: the update is elementwise and adds the
same terms in the same order at every point, wherever the grid is cut.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from common import parser, say, time_per_step, usable_cupy, verdict

import gridcomm

NU = 1.0 / 8.0  # diffusion number dt * kappa / h^2; explicit Euler in 3-D is stable up to 1/6
Box = tuple[slice, ...]


@dataclass(frozen=True)
class Arrays:
    """How the heat equation gets the arrays of one library (NumPy, CuPy, or torch in heat3d_torch.py)."""

    name: str  # what the arrays are, e.g. "numpy float64"
    device: str  # where this rank's live, e.g. "the CPU"
    zeros: Callable[[tuple[int, ...]], Any]  # a float64 array of zeros of this shape
    from_numpy: Callable[[np.ndarray], Any]
    to_numpy: Callable[[Any], np.ndarray]
    synchronize: Callable[[], Any] | None = None  # GPU: wait for the work enqueued so far
    stream: Callable[[], Any] | None = None  # GPU: the CuPy stream the arrays' own work is enqueued on


def numpy_arrays() -> Arrays:
    return Arrays("numpy float64", "the CPU", np.zeros, np.array, np.asarray)


def cupy_arrays(comm: gridcomm.Communicator) -> Arrays:
    import cupy

    device = gridcomm.use_local_gpu(comm)  # one rank per GPU, chosen before anything is allocated
    return Arrays(
        "cupy float64",
        f"GPU {device}",
        cupy.zeros,
        cupy.asarray,
        cupy.asnumpy,
        cupy.cuda.Device().synchronize,
        cupy.cuda.get_current_stream,
    )


def initial(shape: tuple[int, ...], where: Box) -> np.ndarray:
    """A hot ball across the periodic x boundary, on the points ``where`` of the global grid. Integer distances and
    one division: every rank computes bitwise the values the serial run computes."""
    i, j, k = np.ogrid[where]
    di = np.abs(i - 1)
    r2 = np.minimum(di, shape[0] - di) ** 2 + (j - shape[1] // 2) ** 2 + (k - shape[2] // 2) ** 2
    return np.maximum(0.0, 1.0 - r2 / (min(shape) // 3) ** 2)


def update(u: Any, new: Any, box: Box) -> None:
    """new = u + NU * (7-point Laplacian of u) on ``box`` (local indices, one point in from the array's edges).
    Plain slicing and arithmetic: the same code for NumPy, CuPy and torch."""

    def shifted(axis: int, by: int) -> Any:
        return u[tuple(slice(s.start + by, s.stop + by) if a == axis else s for a, s in enumerate(box))]

    c = u[box]
    laplacian = shifted(0, -1) + shifted(0, 1) + shifted(1, -1) + shifted(1, 1) + shifted(2, -1) + shifted(2, 1) - 6 * c
    new[box] = c + NU * laplacian


def inner_and_shell(n: tuple[int, ...]) -> tuple[Box, list[Box]]:
    """Of an interior of ``n`` points (local indices 1..n, halo 1): the box of points that read no halo value, and
    boxes covering the rest (the two faces of each axis, cut so that they do not overlap)."""
    inner = tuple(slice(2, max(2, m)) for m in n)
    full = tuple(slice(1, m + 1) for m in n)
    shell = []
    for axis, m in enumerate(n):
        for face in [slice(1, 2)] + ([slice(m, m + 1)] if m > 1 else []):
            shell.append((*inner[:axis], face, *full[axis + 1 :]))
    return inner, shell


class Overlapped:
    """A HaloExchanger whose exchange runs beside the caller's work: ``start()``, work that reads no halo value,
    ``wait()``. On the GPU the exchange runs on a stream of its own, after the work already enqueued on the arrays'
    stream and before the work enqueued there after ``wait()``: the work in between overlaps it on the GPU."""

    def __init__(self, halos: gridcomm.HaloExchanger, stream: Any) -> None:
        self.halos, self.compute = halos, stream
        if stream is not None:
            import cupy

            self.side = cupy.cuda.Stream(non_blocking=True)
            self.ready, self.arrived = cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True)

    def start(self) -> None:
        if self.compute is None:
            self.handle = self.halos.start()
            return
        self.ready.record(self.compute)
        self.side.wait_event(self.ready)
        self.handle = self.halos.start(self.side)

    def wait(self) -> None:
        self.handle.wait()
        if self.compute is not None:
            self.arrived.record(self.side)
            self.compute.wait_event(self.arrived)


def serial_run(shape: tuple[int, ...], steps: int, arrays: Arrays) -> np.ndarray:
    """The same steps on the whole grid in one array: the x halo filled by copies (periodic), y and z left at 0."""
    u, new = arrays.zeros(tuple(n + 2 for n in shape)), arrays.zeros(tuple(n + 2 for n in shape))
    u[1:-1, 1:-1, 1:-1] = arrays.from_numpy(initial(shape, tuple(slice(0, n) for n in shape)))
    whole = tuple(slice(1, n + 1) for n in shape)
    for _ in range(steps):
        u[0], u[-1] = u[-2], u[1]
        update(u, new, whole)
        u, new = new, u
    return arrays.to_numpy(u[whole])


def run(comm: gridcomm.Communicator, arrays: Arrays, shape: tuple[int, ...], steps: int, name: str) -> None:
    grid = gridcomm.CartesianDecomposition(comm, shape, halo=1, periodic=(True, False, False), stencil="star")
    # Two fields, old and new, swapped every step; each has its own exchanger, planned once.
    u, new = arrays.zeros(grid.local_shape), arrays.zeros(grid.local_shape)
    grid.interior(u)[...] = arrays.from_numpy(initial(shape, grid.global_slices))
    stream = arrays.stream() if arrays.stream else None
    pair = [(f, Overlapped(gridcomm.HaloExchanger(grid, [f]), stream)) for f in (u, new)]
    inner, shell = inner_and_shell(grid.interior_shape)

    def step() -> None:
        (u, exchange), (new, _) = pair
        exchange.start()
        update(u, new, inner)  # reads no halo: runs while the halo is in flight
        exchange.wait()
        for box in shell:
            update(u, new, box)
        pair.reverse()

    seconds = time_per_step(comm, steps, step, arrays.synchronize)
    transport = pair[0][1].halos.transport.name
    for _, exchange in pair:
        exchange.halos.close()
    field = grid.gather(arrays.to_numpy(pair[0][0]))  # gather takes NumPy or CuPy: a host copy serves every library
    devices = sorted(set(comm.mpi.allgather(arrays.device)))
    say(
        comm,
        f"{name}: {comm.size} rank(s) on process grid {grid.proc_grid}, grid {shape} (periodic in x, walls in y, z)",
        f"{name}: {arrays.name} arrays on {', '.join(devices)}; halo exchange over {transport!r}, overlapped",
        f"{name}: {steps} steps, {seconds * 1e3:.3f} ms per step (slowest rank)",
    )
    ok = None
    if comm.rank == 0:
        reference = serial_run(shape, steps, arrays)
        say(comm, f"{name}: peak temperature 1 -> {field.max():.4f}; the serial run on rank 0 is done")
        ok = np.array_equal(field, reference)
    verdict(comm, name, ok, "gathered field vs the serial run on rank 0, bit for bit")


def main(arrays_for: Callable[[gridcomm.Communicator, bool], Arrays], name: str, doc: str | None) -> None:
    """The command line, shared with heat3d_torch.py: ``arrays_for(comm, cpu)`` picks the arrays."""
    options = parser(doc)
    options.add_argument("--n", type=int, help="points per dimension (default: 24 with --quick, else 96; GPU 256)")
    options.add_argument("--steps", type=int, help="time steps (default: 20 with --quick, else 100)")
    args = options.parse_args()
    comm = gridcomm.Communicator()
    arrays = arrays_for(comm, args.cpu)
    n = args.n or (24 if args.quick else 96 if arrays.stream is None else 256)
    steps = args.steps or (20 if args.quick else 100)
    run(comm, arrays, (n, n, n), steps, name)


def numpy_or_cupy(comm: gridcomm.Communicator, cpu: bool) -> Arrays:
    return numpy_arrays() if cpu or usable_cupy() is None else cupy_arrays(comm)


if __name__ == "__main__":
    main(numpy_or_cupy, "heat3d", __doc__)
