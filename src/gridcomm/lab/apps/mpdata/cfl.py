"""Courant numbers of the edge-based scheme, the time step they allow, and a clear error when it is exceeded."""

from __future__ import annotations

import math

import numpy as np

from ....errors import ArgumentError

# The upwind pass keeps a non-negative field non-negative while every node sends out at most what it
# holds: (dt / V_i) x (sum of its outgoing face fluxes) <= 1. The corrective pass of MPDATA is an upwind
# pass too, and with the non-oscillatory option its fluxes are limited to keep the field within the
# bounds of the first pass, so this is the stability limit of the whole step.
COURANT_LIMIT = 1.0


def courant_numbers(edges: np.ndarray, fluxes: np.ndarray, dual_volumes: np.ndarray, dt: float) -> np.ndarray:
    """Per node: dt / V_i x (sum of the fluxes out of its dual cell), dimensionless.

    edges: (E, 2) node ids; fluxes: (E,) m^2/s from i to j; dual_volumes: (V,) m^2; dt: s.
    """
    n = len(dual_volumes)
    out = np.bincount(edges[:, 0], np.maximum(fluxes, 0.0), n) + np.bincount(edges[:, 1], np.maximum(-fluxes, 0.0), n)
    return dt * out / dual_volumes


def max_courant(edges: np.ndarray, fluxes: np.ndarray, dual_volumes: np.ndarray, dt: float) -> tuple[float, int]:
    """The largest Courant number and the node where it occurs."""
    c = courant_numbers(edges, fluxes, dual_volumes, dt)
    node = int(np.argmax(c))
    return float(c[node]), node


def dt_for_courant(edges: np.ndarray, fluxes: np.ndarray, dual_volumes: np.ndarray, courant: float) -> float:
    """The time step (s) whose largest Courant number is ``courant``."""
    if not 0 < courant <= COURANT_LIMIT:
        raise ArgumentError(f"courant={courant!r} must lie in (0, {COURANT_LIMIT}] (the upwind pass's limit)")
    c1, _ = max_courant(edges, fluxes, dual_volumes, 1.0)
    return courant / c1


def check_cfl(
    edges: np.ndarray, fluxes: np.ndarray, dual_volumes: np.ndarray, dt: float, limit: float = COURANT_LIMIT
) -> float:
    """The largest Courant number of time step ``dt`` (s); ValueError naming it, the limit and a time step
    that works when it exceeds ``limit``."""
    if not (dt > 0 and math.isfinite(dt)):
        raise ArgumentError(f"time step dt={dt!r} must be a positive number of seconds")
    c, node = max_courant(edges, fluxes, dual_volumes, dt)
    if c > limit * (1.0 + 1e-12):  # a dt made for the limit itself may land an ulp above it
        safe = 0.9 * limit * dt / c
        raise ArgumentError(
            f"time step dt={dt:g} s violates the CFL condition: the largest Courant number is {c:.3f} (at node "
            f"{node}), above the limit {limit:g} of the upwind pass; use dt <= {limit * dt / c:.6g} s, e.g. "
            f"dt={safe:.6g} s (Courant number {0.9 * limit:g})"
        )
    return c
