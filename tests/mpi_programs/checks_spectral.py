"""The spectral-transform dwarf distributed over 1 to 4 ranks equals the one-rank transform to round-off.

Each rank transforms its wavenumbers' coefficients and its latitude band's points; both are compared with the
matching parts of the serial transform of the same global coefficients.
"""

from __future__ import annotations

import numpy as np
from harness import assert_everywhere

from gridcomm import Communicator
from gridcomm.apps.spectral import SpectralTransform, coefficient_count
from gridcomm.apps.spectral.dwarf import DistributedTransform, random_coefficients, run_spectral


def _compare(got, want, what: str) -> str | None:
    error = float(np.max(np.abs(got - want), initial=0.0)) / float(np.max(np.abs(want)))
    return None if error < 1e-12 else f"{what}: relative error {error:.2e}"


def check_distributed_transform_equals_serial(comm):
    problems = []
    with Communicator(comm) as gc:
        for grid, truncation in (("O16", None), ("O24", 11)):
            with DistributedTransform(gc, grid, truncation, batch=3) as dist:
                serial = SpectralTransform(dist.grid, dist.truncation)
                t = dist.truncation
                whole = random_coefficients(t, np.arange(t + 1), 3)
                assert whole.shape[1] == coefficient_count(t)
                mine = random_coefficients(t, dist.wavenumbers, 3)  # drawn per m: this rank's part of `whole`
                if p := _compare(mine, dist.local_coefficients(whole), f"{grid}: this rank's coefficients"):
                    problems.append(p)
                values = dist.inverse(mine)
                start, stop = dist.grid.offsets[dist.rows[0]], dist.grid.offsets[dist.rows[-1] + 1]
                reference = serial.inverse(whole)
                if p := _compare(values, reference[:, start:stop], f"{grid}: inverse on this rank's rows"):
                    problems.append(p)
                back = dist.direct(values)
                if p := _compare(back, dist.local_coefficients(serial.direct(reference)), f"{grid}: direct"):
                    problems.append(p)
    assert_everywhere(comm, "\n".join(problems) or None)


def check_run_spectral_round_trip(comm):
    with Communicator(comm) as gc:
        r = run_spectral(gc, "O20", levels=2, fields=2, steps=2)
    problems = []
    if not r["round_trip_error"] < 1e-12:
        problems.append(f"round-trip error {r['round_trip_error']:.2e}")
    if set(r["split_s"]) != {"legendre", "fft", "transposition"} or r["time_per_step_s"] <= 0:
        problems.append(f"timings {r}")
    assert_everywhere(comm, "\n".join(problems) or None)
