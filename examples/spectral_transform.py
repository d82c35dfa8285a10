"""Spherical-harmonic transforms of real fields over the ranks: grid values on the octahedral grid to spectral
coefficients and back, with gridcomm.lab.apps.spectral.

    mpiexec -n 4 python examples/spectral_transform.py [--quick] [--cpu] [--grid O160]

DistributedTransform shares the work as ECMWF's ectrans does: each rank owns latitude rows (grid space: the FFTs
along the rows; a few bands, as many rows and points on every rank) and a set of zonal wavenumbers m (spectral
space: the Legendre sums over the rows), and a planned all-to-all (gridcomm.Transposer) moves the Fourier
coefficients between the two halves. The fields are polynomials in x, y, z of degree at most T (one of them Re (x +
iy)^T, the highest wavenumber), so they are exactly representable at truncation T and the round trip must give them
back. Rank 0 also gathers the coefficients and compares them with a serial transform of the whole grid: the check of
what moved between the ranks. Neither check can be bit for bit: the Legendre sums are matrix products whose
blocking, hence summation order, follows the shape of each rank's share. Arrays are CuPy on a GPU (one rank per
GPU), NumPy otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from common import parser, say, time_per_step, usable_cupy, verdict

import gridcomm
from gridcomm.grids import OctahedralGrid
from gridcomm.lab.apps.spectral import DistributedTransform, SpectralTransform, coefficient_index

# Relative to the largest value. Distributed vs serial: the same sums in other orders, round-off (a few 1e-17).
SERIAL_TOLERANCE = 1e-12
# The round trip is as good as the quadrature and the Legendre functions: a few 1e-13 at O160 (the grid's Gaussian
# weights are good to round-off).
ROUND_TRIP_TOLERANCE = 1e-11


def fields(grid: OctahedralGrid, points: np.ndarray) -> np.ndarray:
    """Four real fields (4, points) of degree at most T = N - 1 >= 3, on the grid points ``points``."""
    x, y, z = grid.xyz[points].T
    t = grid.N - 1
    return np.stack([1.0 + 0.5 * z, x * y * z, ((x + 1j * y) ** (t // 2)).real * z, ((x + 1j * y) ** t).real])


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--grid", help="octahedral grid (default: O16 with --quick, else O160); truncation N - 1")
    options.add_argument("--steps", type=int, default=5, help="round trips timed (default 5)")
    args = options.parse_args()
    comm = gridcomm.Communicator()
    xp: Any = (None if args.cpu else usable_cupy()) or np
    device = "the CPU" if xp is np else f"GPU {gridcomm.use_local_gpu(comm)}"
    grid = OctahedralGrid(args.grid or ("O16" if args.quick else "O160"))

    with DistributedTransform(comm, grid, batch=4, xp=xp) as transform:
        rows = transform.rows  # this rank's latitude rows: a few bands, as many rows and points as every other rank
        mine = grid.points_of(rows)
        values = xp.asarray(fields(grid, mine))
        coefficients = transform.direct(values)  # grid -> spectral: this rank's wavenumbers, all degrees l
        back = transform.inverse(coefficients)  # spectral -> grid: this rank's rows again
        sync = xp.cuda.Device().synchronize if xp is not np else None
        seconds = time_per_step(comm, args.steps, lambda: transform.inverse(transform.direct(values)), sync)
        transport, ms = transform.transport, transform.wavenumbers

    from mpi4py import MPI

    # The round trip on every rank, then the largest error over all of them, relative to the largest value.
    error = comm.mpi.allreduce(float(abs(back - values).max()), op=MPI.MAX)
    error /= comm.mpi.allreduce(float(abs(values).max()), op=MPI.MAX)
    t = grid.N - 1
    where = np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in ms] or [np.zeros(0, int)])
    host = coefficients.get() if xp is not np else coefficients
    pieces = comm.mpi.gather((where, host, len(rows), len(ms)), root=0)
    devices = sorted(set(comm.mpi.allgather(device)))
    ok = None
    if comm.rank == 0:
        say(
            comm,
            f"spectral_transform: {grid.name} ({grid.size} points), T{t}, 4 real fields, {comm.size} rank(s) "
            f"(latitude rows per rank: {[p[2] for p in pieces]}, wavenumbers: {[p[3] for p in pieces]})",
            f"spectral_transform: {xp.__name__} arrays on {', '.join(devices)}; transpositions over {transport!r}",
            f"spectral_transform: grid -> spectral -> grid in {seconds * 1e3:.3f} ms (slowest rank); round-trip error "
            f"{error:.1e} of the largest value",
        )
        gathered = np.empty((4, (t + 1) * (t + 2) // 2), complex)
        for index, values_there, *_ in pieces:
            gathered[:, index] = values_there
        serial = SpectralTransform(grid, xp=xp).direct(xp.asarray(fields(grid, slice(None))))
        serial = serial.get() if xp is not np else serial
        difference = float(abs(gathered - serial).max() / abs(serial).max())
        say(comm, f"spectral_transform: gathered coefficients vs the serial transform: {difference:.1e} of the largest")
        ok = difference <= SERIAL_TOLERANCE and error <= ROUND_TRIP_TOLERANCE
    verdict(
        comm,
        "spectral_transform",
        ok,
        f"vs the serial transform within {SERIAL_TOLERANCE:g}, round trip within {ROUND_TRIP_TOLERANCE:g}",
    )


if __name__ == "__main__":
    main()
