"""Williamson et al. (1992) test case 1: solid-body rotation of a cosine bell, and its error norms."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ....grids.mesh import EARTH_RADIUS_M, MedianDualMesh
from ....grids.spherical import arc_angle, dot, lonlat_to_xyz

DAY_S = 86400.0


@dataclass(frozen=True)
class CosineBell:
    """Solid-body rotation of a cosine bell (Williamson et al. 1992, J. Comput. Phys. 102, test case 1).

    The wind rotates the sphere as a solid body about an axis tilted by ``alpha`` (radians) from the polar
    axis towards longitude 180 (alpha = 0: zonal flow; pi/2: over the poles), once in ``period_s``
    (12 days: u0 = 2 pi R / 12 days, about 38.6 m/s on the Earth). The bell of height ``h0`` and radius R/3
    starts centred at longitude 3 pi/2 on the equator.
    """

    alpha: float = 0.0
    radius: float = EARTH_RADIUS_M
    period_s: float = 12.0 * DAY_S
    h0: float = 1000.0
    centre_lon: float = 1.5 * math.pi
    centre_lat: float = 0.0

    @property
    def u0(self) -> float:
        """Speed on the rotation's equator, m/s."""
        return 2.0 * math.pi * self.radius / self.period_s

    @property
    def axis(self) -> np.ndarray:
        """Unit rotation axis: Williamson's u = u0 (cos lat cos a + sin lat cos lon sin a), v = -u0 sin lon sin a."""
        return np.array([-math.sin(self.alpha), 0.0, math.cos(self.alpha)])

    def stream_function(self, xyz: np.ndarray) -> np.ndarray:
        """psi = -u0 R (axis . x), m^2/s, at unit vectors ``xyz`` (n, 3); the wind is k x grad(psi)."""
        return -self.u0 * self.radius * dot(xyz, np.broadcast_to(self.axis, xyz.shape))

    def velocity(self, xyz: np.ndarray) -> np.ndarray:
        """Wind u0 (axis x x), m/s, a 3-D vector tangent to the sphere at unit vectors ``xyz`` (n, 3)."""
        return self.u0 * np.cross(np.broadcast_to(self.axis, xyz.shape), xyz)

    def edge_fluxes(self, mesh: MedianDualMesh) -> np.ndarray:
        """Volume flux through each dual face, m^2/s, positive from node i to node j of the edge.

        Exact for this wind: across a curve the flux of k x grad(psi) is the difference of psi at its ends,
        so the face from the left centroid through the midpoint to the right centroid carries
        psi(right) - psi(left). Every node's dual faces chain centroid to centroid around it, so the fluxes
        out of every dual cell sum to zero up to round-off: the discrete wind is non-divergent.
        """
        psi = self.stream_function(mesh.centroids)
        return psi[mesh.edge_triangles[:, 1]] - psi[mesh.edge_triangles[:, 0]]

    def edge_velocities(self, mesh: MedianDualMesh) -> np.ndarray:
        """The wind at every edge midpoint, (E, 3) m/s (for the antidiffusive velocity's time term)."""
        return self.velocity(mesh.edge_midpoints)

    def centre(self, t: float = 0.0) -> np.ndarray:
        """Unit vector of the bell's centre after ``t`` seconds (Rodrigues' rotation about the axis)."""
        c = lonlat_to_xyz(np.array(self.centre_lon), np.array(self.centre_lat))
        k = self.axis
        angle = 2.0 * math.pi * t / self.period_s
        return c * math.cos(angle) + np.cross(k, c) * math.sin(angle) + k * float(k @ c) * (1.0 - math.cos(angle))

    def height(self, xyz: np.ndarray, t: float = 0.0) -> np.ndarray:
        """The exact solution at unit vectors ``xyz`` (n, 3) after ``t`` seconds: h0/2 (1 + cos(pi r / (R/3)))
        within great-circle distance r < R/3 of the centre, 0 elsewhere."""
        r = arc_angle(xyz, np.broadcast_to(self.centre(t), xyz.shape))  # in units of R
        return np.where(r < 1.0 / 3.0, 0.5 * self.h0 * (1.0 + np.cos(3.0 * np.pi * r)), 0.0)


def error_norms(h: np.ndarray, exact: np.ndarray, area: np.ndarray) -> dict[str, float]:
    """Williamson's normalised errors with area weights (per node, m^2; h, exact: (V,) or (V, levels)):
    l1 = I(|h - e|) / I(|e|), l2 = sqrt(I((h - e)^2) / I(e^2)), linf = max|h - e| / max|e|."""
    w = area.reshape(-1, *([1] * (h.ndim - 1)))
    diff = h - exact
    return {
        "l1": float((w * np.abs(diff)).sum() / (w * np.abs(exact)).sum()),
        "l2": float(math.sqrt((w * diff**2).sum() / (w * exact**2).sum())),
        "linf": float(np.abs(diff).max() / np.abs(exact).max()),
    }


def total_mass(h: np.ndarray, area: np.ndarray) -> float:
    """Sum over nodes of dual volume (m^2) x tracer, summed over levels; math.fsum keeps it exact enough to
    see round-off-sized changes."""
    w = area.reshape(-1, *([1] * (h.ndim - 1)))
    return math.fsum((w * h).ravel().tolist())
