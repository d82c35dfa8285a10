"""A jitted JAX step between halo exchanges: Gray-Scott reaction-diffusion on a periodic 2-D grid over the ranks.

    mpiexec -n 4 python examples/jax_step.py [--quick] [--cpu]

JAX arrays are immutable, so no halo can be written into one (HaloExchanger refuses it: read-only). The code
therefore owns the two fields' buffers, halo included: NumPy on the CPU, CuPy when JAX has a GPU device (one rank
per GPU). The exchanger fills their halos in place, both fields in one message per neighbour. Each step

1. views the buffers in JAX through DLPack without a copy (``copy=False``: JAX raises rather than copy),
2. runs the jitted step, which returns the new interiors as fresh arrays that XLA allocated,
3. copies them into the buffers: the step's one copy, as JAX cannot write into memory it did not allocate and the
   exchanger needs fixed, writable memory,
4. exchanges the halos.

Rank 0 then gathers the fields, runs the same jitted step serially on the whole grid (halos filled by periodic
copies) and compares. Not bit for bit: XLA compiles the step once per array shape and may fuse it differently for
each (e.g. contract a multiply and an add into one FMA), so the last bits may differ. Rounding differences start
near 1e-16 and grow slowly; a wrong or missing halo differs by some 0.1 within a few steps: 1e-10 tells them apart.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from common import need, parser, say, time_per_step, usable_cupy, verdict

import gridcomm

DU, DV, FEED, KILL = 0.16, 0.08, 0.035, 0.060  # Gray-Scott diffusion rates, feed and kill rates (dt = 1, h = 1)
TOLERANCE = 1e-10


def gray_scott(u: Any, v: Any) -> tuple[Any, Any]:
    """One explicit step of u and v (arrays with a 1-point halo); returns the new interiors."""

    def laplacian(a: Any) -> Any:
        return a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4.0 * a[1:-1, 1:-1]

    uc, vc = u[1:-1, 1:-1], v[1:-1, 1:-1]
    uvv = uc * vc * vc
    return uc + DU * laplacian(u) - uvv + FEED * (1.0 - uc), vc + DV * laplacian(v) + uvv - (FEED + KILL) * vc


def initial(shape: tuple[int, ...], where: tuple[slice, ...]) -> tuple[np.ndarray, np.ndarray]:
    """u = 1, v = 0 but for a square seed with integer-hashed noise (bitwise the same values on any rank)."""
    i, j = np.ogrid[where]
    seed = (abs(i - shape[0] // 2) < shape[0] // 8) & (abs(j - shape[1] // 3) < shape[1] // 8)
    noise = ((i * 7919 + j * 104729) % 97) / 970.0
    return np.where(seed, 0.5 - noise, 1.0), np.where(seed, 0.25 + noise, 0.0)


def aligned_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """Zeros whose data starts on a 64-byte boundary: XLA's CPU buffers must, so JAX can view them without a copy."""
    raw = np.zeros(int(np.prod(shape)) * 8 + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + raw.size - 64].view(np.float64).reshape(shape)


class Fields:
    """The buffers of u and v, halo included, and the jitted step between JAX and them."""

    def __init__(self, shape: tuple[int, ...], xp: types.ModuleType, jax: types.ModuleType) -> None:
        zeros = aligned_zeros if xp is np else xp.zeros
        self.u, self.v = zeros(shape), zeros(shape)
        self.xp, self.jax = xp, jax
        self.step_fn = jax.jit(gray_scott)

    def view(self, a: Any) -> Any:
        return self.jax.numpy.from_dlpack(a, copy=False)  # shares the buffer: no copy

    def step(self, fill_halos: Callable[[], Any]) -> None:
        u, v = self.step_fn(self.view(self.u), self.view(self.v))
        # The one copy: JAX's new arrays into our buffers (np.asarray / cupy.from_dlpack only view them).
        back = np.asarray if self.xp is np else self.xp.from_dlpack
        self.u[1:-1, 1:-1], self.v[1:-1, 1:-1] = back(u), back(v)
        fill_halos()

    def shares_memory(self) -> bool:
        """Whether JAX's view of u is u's memory (CPU: the buffer must be 64-byte aligned)."""
        pointer = self.u.ctypes.data if self.xp is np else self.u.data.ptr
        return self.view(self.u).unsafe_buffer_pointer() == pointer


def periodic_fill(a: Any) -> Callable[[], None]:
    """The halo of a whole periodic grid, filled by copies: the serial run's stand-in for the exchange."""

    def fill() -> None:
        a[0], a[-1] = a[-2], a[1]
        a[:, 0], a[:, -1] = a[:, -2], a[:, 1]

    return fill


def serial_run(shape: tuple[int, ...], steps: int, xp: types.ModuleType, jax: types.ModuleType) -> list[np.ndarray]:
    """The same steps on the whole grid in one pair of buffers, on rank 0."""
    whole = Fields(tuple(n + 2 for n in shape), xp, jax)
    for a, start in zip((whole.u, whole.v), initial(shape, (slice(0, shape[0]), slice(0, shape[1]))), strict=True):
        a[1:-1, 1:-1] = xp.asarray(start)
    fills = periodic_fill(whole.u), periodic_fill(whole.v)

    def fill_halos() -> None:
        for fill in fills:
            fill()

    fill_halos()
    for _ in range(steps):
        whole.step(fill_halos)
    return [to_numpy(a[1:-1, 1:-1]) for a in (whole.u, whole.v)]


def to_numpy(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--n", type=int, help="points per side (default: 64 with --quick, else 512; GPU 4096)")
    options.add_argument("--steps", type=int, help="time steps (default: 50 with --quick, else 500)")
    args = options.parse_args()
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"  # before JAX starts: no GPU backend at all
    # Several ranks per node: JAX would otherwise take 75% of each GPU it sees for each of them.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = need("jax")
    jax.config.update("jax_enable_x64", True)
    comm = gridcomm.Communicator()
    cupy = None if args.cpu else usable_cupy()
    on_gpu = cupy is not None and any(d.platform == "gpu" for d in jax.devices())
    xp = cupy if on_gpu else np
    device = f"GPU {gridcomm.use_local_gpu(comm)}" if on_gpu else "the CPU"
    n = args.n or (64 if args.quick else 4096 if on_gpu else 512)
    steps = args.steps or (50 if args.quick else 500)
    shape = (n, n)

    grid = gridcomm.CartesianDecomposition(comm, shape, halo=1, periodic=True, stencil="star")
    fields = Fields(grid.local_shape, xp, jax)
    for a, start in zip((fields.u, fields.v), initial(shape, grid.global_slices), strict=True):
        grid.interior(a)[...] = xp.asarray(start)
    with gridcomm.HaloExchanger(grid, [fields.u, fields.v]) as halos:
        halos.exchange()
        fields.step(halos.exchange)  # compiles the step for this rank's shape before the clock starts
        sync = xp.cuda.Device().synchronize if on_gpu else None
        seconds = time_per_step(comm, steps - 1, lambda: fields.step(halos.exchange), sync)
        transport = halos.transport.name
    gathered = [grid.gather(a) for a in (fields.u, fields.v)]
    devices = sorted(set(comm.mpi.allgather(device)))
    say(
        comm,
        f"jax_step: {comm.size} rank(s) on process grid {grid.proc_grid}, periodic grid {shape}, Gray-Scott u and v",
        f"jax_step: JAX {jax.__version__} on {', '.join(devices)}; {xp.__name__} float64 buffers viewed by JAX "
        f"without a copy: {fields.shares_memory()}; both halos in one exchange over {transport!r}",
        f"jax_step: {steps} steps, {seconds * 1e3:.3f} ms per step (slowest rank, the first step's compilation apart)",
    )
    ok = None
    if comm.rank == 0:
        reference = serial_run(shape, steps, xp, jax)
        difference = max(float(np.abs(a - b).max()) for a, b in zip(gathered, reference, strict=True))
        say(
            comm,
            f"jax_step: mean of v {gathered[1].mean():.6f}; largest difference from the serial run {difference:.1e}",
        )
        ok = difference <= TOLERANCE
    verdict(comm, "jax_step", ok, f"gathered u, v vs the serial run on rank 0, within {TOLERANCE:g}")


if __name__ == "__main__":
    main()
