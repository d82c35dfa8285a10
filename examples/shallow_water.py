"""Rotating shallow water on an Arakawa C-grid: a channel periodic in x, walls in y, over the ranks.

    mpiexec -n 4 python examples/shallow_water.py [--quick] [--cpu]      (or: gridcomm run --np 4 -- python ...)

The layer depth h lives at cell centres, the velocity u on the x faces and v on the y faces (face i is the low face
of cell i, gridcomm's convention): along the periodic x axis there are as many x faces as cells, across the channel
one more y face than cells, the two walls, where v stays 0. Each field gets the halo its stencil reads and no more:

    h: 1 point on every side          continuity: the fluxes on both faces of a cell
    u: 1 high in x, 1 low in y        continuity reads u[i + 1]; the Coriolis term at v faces reads u[i + 1, j - 1]
    v: 1 low in x, 1 high in y        continuity reads v[j + 1]; the Coriolis term at u faces reads v[i - 1, j + 1]

and one HaloExchanger moves all three in one message per neighbour (``HaloExchanger([xfaces, yfaces, grid],
[u, v, h])``). The equations: flux-form continuity, linear momentum with gravity and Coriolis (the four-point
averages of the other component), three-stage Runge-Kutta (Wicker and Skamarock), each stage one exchange. Rank 0
finally gathers the three fields, runs the same steps serially on the whole grid (x halos filled by periodic
copies) and compares bit for bit: every point adds the same terms in the same order wherever the grid is cut. The
total mass must be kept to round-off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from common import parser, say, time_per_step, usable_cupy, verdict

import gridcomm

GRAVITY, DEPTH, CORIOLIS, DT = 1.0, 1.0, 0.1, 0.25  # grid spacing 1: gravity-wave Courant number 0.25
STAGES = (1 / 3, 1 / 2, 1.0)  # Wicker-Skamarock RK3: stage k is the step's start + STAGES[k] * DT * tendency
Index = tuple[int, int]


@dataclass
class State:
    """One copy of the three fields (local arrays, halos included)."""

    u: Any
    v: Any
    h: Any


@dataclass(frozen=True)
class Block:
    """What a rank updates: its cells, and where its first owned point lies in each field's local array.

    ``v_rows`` are the owned y faces that move, as rows of the owned ones (the walls, faces 0 and N, stay 0)."""

    cells: Index
    u_origin: Index
    v_origin: Index
    h_origin: Index
    v_rows: tuple[int, int]


def window(a: Any, origin: Index, offset: Index, shape: Index) -> Any:
    """The ``shape`` points of ``a`` from owned point ``offset`` on (``origin``: owned point (0, 0) in ``a``)."""
    return a[tuple(slice(o + d, o + d + n) for o, d, n in zip(origin, offset, shape, strict=True))]


def advance(start: State, now: State, into: State, dt: float, b: Block) -> None:
    """into = start + dt * tendency(now), on the owned points that move (plain slicing: NumPy and CuPy alike)."""
    (nx, ny), (r0, r1) = b.cells, b.v_rows
    u, v, h = now.u, now.v, now.h
    # Continuity: the mass fluxes through every face of the owned cells, the depth averaged onto the face.
    fu = 0.5 * (window(h, b.h_origin, (-1, 0), (nx + 1, ny)) + window(h, b.h_origin, (0, 0), (nx + 1, ny)))
    fu = fu * window(u, b.u_origin, (0, 0), (nx + 1, ny))
    fv = 0.5 * (window(h, b.h_origin, (0, -1), (nx, ny + 1)) + window(h, b.h_origin, (0, 0), (nx, ny + 1)))
    fv = fv * window(v, b.v_origin, (0, 0), (nx, ny + 1))
    dh = -(fu[1:] - fu[:-1]) - (fv[:, 1:] - fv[:, :-1])
    # x momentum on the owned x faces (as many as cells: x is periodic).
    gx = window(h, b.h_origin, (0, 0), (nx, ny)) - window(h, b.h_origin, (-1, 0), (nx, ny))
    vbar = window(v, b.v_origin, (-1, 0), (nx, ny)) + window(v, b.v_origin, (0, 0), (nx, ny))
    vbar = 0.25 * (vbar + window(v, b.v_origin, (-1, 1), (nx, ny)) + window(v, b.v_origin, (0, 1), (nx, ny)))
    du = CORIOLIS * vbar - GRAVITY * gx
    # y momentum on the owned y faces that are not walls: rows r0..r1 - 1.
    m = r1 - r0
    gy = window(h, b.h_origin, (0, r0), (nx, m)) - window(h, b.h_origin, (0, r0 - 1), (nx, m))
    ubar = window(u, b.u_origin, (0, r0 - 1), (nx, m)) + window(u, b.u_origin, (1, r0 - 1), (nx, m))
    ubar = 0.25 * (ubar + window(u, b.u_origin, (0, r0), (nx, m)) + window(u, b.u_origin, (1, r0), (nx, m)))
    dv = -CORIOLIS * ubar - GRAVITY * gy
    window(into.h, b.h_origin, (0, 0), (nx, ny))[...] = window(start.h, b.h_origin, (0, 0), (nx, ny)) + dt * dh
    window(into.u, b.u_origin, (0, 0), (nx, ny))[...] = window(start.u, b.u_origin, (0, 0), (nx, ny)) + dt * du
    window(into.v, b.v_origin, (0, r0), (nx, m))[...] = window(start.v, b.v_origin, (0, r0), (nx, m)) + dt * dv


def initial_depth(shape: Index, where: tuple[slice, ...]) -> np.ndarray:
    """DEPTH plus a bump across the periodic x boundary, on the cells ``where`` of the global grid: integer distances
    and one division, so that every rank computes bitwise the values the serial run computes."""
    i, j = np.ogrid[where]
    di = np.abs(i - 2)
    r2 = np.minimum(di, shape[0] - di) ** 2 + (j - shape[1] // 2) ** 2
    return DEPTH + 0.1 * np.maximum(0.0, 1.0 - r2 / (min(shape) // 4) ** 2)


def serial_run(shape: Index, steps: int) -> State:
    """The same steps on the whole grid, every field with a halo of 1: the x halos filled by periodic copies, the y
    halos beyond the walls never read (or read as 0 times a zero wall velocity)."""
    nx, ny = shape
    states = [State(np.zeros((nx + 2, ny + 2)), np.zeros((nx + 2, ny + 3)), np.zeros((nx + 2, ny + 2))) for _ in "ABC"]
    states[0].h[1:-1, 1:-1] = initial_depth(shape, (slice(0, nx), slice(0, ny)))
    block = Block(shape, (1, 1), (1, 1), (1, 1), (1, ny))
    for _ in range(steps):
        start, b, c = states
        for fraction, now, into in zip(STAGES, (start, b, c), (b, c, b), strict=True):
            for a in (now.u, now.v, now.h):
                a[0], a[-1] = a[-2], a[1]
            advance(start, now, into, fraction * DT, block)
        states = [b, start, c]
    return states[0]


def run(comm: gridcomm.Communicator, xp: Any, device: str, shape: Index, steps: int) -> None:
    grid = gridcomm.CartesianDecomposition(comm, shape, halo=1, periodic=(True, False))
    xfaces = grid.field(stagger="x", halo=((0, 1), (1, 0)))  # u
    yfaces = grid.field(stagger="y", halo=((1, 0), (0, 1)))  # v; h lives on the grid's own cells, halo 1
    states = [State(xfaces.zeros(xp=xp), yfaces.zeros(xp=xp), grid.zeros(xp=xp)) for _ in "ABC"]
    grid.interior(states[0].h)[...] = xp.asarray(initial_depth(shape, grid.global_slices))
    # One exchanger per copy of the fields: u, v and h of different halos and shapes in one message per neighbour.
    halos = {id(s): gridcomm.HaloExchanger([xfaces, yfaces, grid], [s.u, s.v, s.h]) for s in states}
    wall_low = yfaces.global_slices[1].start == 0
    wall_high = yfaces.global_slices[1].stop == yfaces.global_shape[1]
    block = Block(
        grid.interior_shape,
        (xfaces.halo[0][0], xfaces.halo[1][0]),
        (yfaces.halo[0][0], yfaces.halo[1][0]),
        (grid.halo[0][0], grid.halo[1][0]),
        (int(wall_low), yfaces.interior_shape[1] - int(wall_high)),
    )
    mass = float(grid.interior(states[0].h).sum())

    def step() -> None:
        start, b, c = states
        for fraction, now, into in zip(STAGES, (start, b, c), (b, c, b), strict=True):
            halos[id(now)].exchange()
            advance(start, now, into, fraction * DT, block)
        states[:] = [b, start, c]

    synchronize = xp.cuda.Device().synchronize if xp is not np else None
    seconds = time_per_step(comm, steps, step, synchronize)
    exchanger = halos[id(states[0])]
    sent = comm.mpi.allreduce(exchanger.bytes_per_exchange[0]) / comm.size
    transport = exchanger.transport.name
    for h in halos.values():
        h.close()
    final = states[0]
    fields = {"h": grid.gather(final.h), "u": xfaces.gather(final.u), "v": yfaces.gather(final.v)}
    drift = comm.mpi.allreduce(float(grid.interior(final.h).sum())) / comm.mpi.allreduce(mass) - 1
    devices = sorted(set(comm.mpi.allgather(device)))
    say(
        comm,
        f"shallow_water: {comm.size} rank(s) on process grid {grid.proc_grid}, {shape[0]} x {shape[1]} cells "
        f"(periodic in x, walls in y); u {xfaces.global_shape}, v {yfaces.global_shape}, h {grid.global_shape}",
        f"shallow_water: arrays on {', '.join(devices)}; u, v and h in one exchange over {transport!r}, "
        f"{sent / 1024:.1f} KiB sent per rank and exchange",
        f"shallow_water: {steps} steps, 3 exchanges each, {seconds * 1e3:.3f} ms per step (slowest rank)",
    )
    ok = None
    if comm.rank == 0:
        reference = serial_run(shape, steps)
        serial = {"h": reference.h[1:-1, 1:-1], "u": reference.u[1:-1, 1:-1], "v": reference.v[1:-1, 1:-1]}
        same = {name: np.array_equal(fields[name], serial[name]) for name in fields}
        say(comm, f"shallow_water: mass drift {drift:.1e}; bit for bit per field: {same}")
        ok = all(same.values()) and abs(drift) < 1e-12
    verdict(comm, "shallow_water", ok, "gathered u, v, h vs the serial run on rank 0, bit for bit; mass kept")


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--nx", type=int, help="cells along the channel (default: 40 with --quick, else 192)")
    options.add_argument("--ny", type=int, help="cells across the channel (default: 40 with --quick, else 192)")
    options.add_argument("--steps", type=int, help="time steps (default: 20 with --quick, else 200)")
    args = options.parse_args()
    comm = gridcomm.Communicator()
    cupy = None if args.cpu else usable_cupy()
    device = "the CPU"
    if cupy is not None:
        device = f"GPU {gridcomm.use_local_gpu(comm)}"  # one rank per GPU, chosen before anything is allocated
    shape = (args.nx or (40 if args.quick else 192), args.ny or (40 if args.quick else 192))
    run(comm, cupy or np, device, shape, args.steps or (20 if args.quick else 200))


if __name__ == "__main__":
    main()
