"""MPDATA's step arithmetic on the CPU: NumPy over all update nodes (or all owned nodes) at once.

Each phase is vectorised over the whole node set; node sums run slot by slot over the padded node-to-edge
table (see :class:`~gridcomm.lab.apps.mpdata.tables.MeshTables`), so a node adds the same terms in the same order
on any number of parts. The CUDA kernels (mpdata.cu) do the same operations in the same order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tables import EPS, INNER, MeshTables


class NumpyMpdata:
    """The five phases of a step on NumPy fields (see :class:`~gridcomm.lab.apps.mpdata.scheme.Mpdata`).

    NumPy has no second stream to overlap an exchange with, so the ``inner`` part of every phase is empty and
    ``outer`` is the whole node set: the exchange completes before the phase runs.
    """

    def __init__(self, tables: MeshTables, fields: Any) -> None:
        t = self.t = tables
        self.f = fields
        no = t.n_owned
        v = t.fluxes[:, None]
        self._vpos, self._vneg, self._vabs, self._vdt = np.maximum(v, 0.0), np.minimum(v, 0.0), np.abs(v), t.dt * v
        self._wind = [t.velocities[:, k : k + 1].copy() for k in range(3)]
        self._sign_tab = t.sign_tab[:, :, None]
        self._normal_tab = np.ascontiguousarray(t.normal_tab)[..., None]  # (degree, 3, n_owned, 1)
        self._dt_area = t.dt_area[:, None]
        self._dt_area_o = self._dt_area[:no]
        self._inv_area_o = t.inv_area_owned[:, None]
        self._radial_o = [t.xyz[:no, k : k + 1].copy() for k in range(3)]

    def _node_sums(self, edge_values: np.ndarray, nodes: int) -> np.ndarray:
        """For the first ``nodes`` update nodes: sum over their edges of s_ie x value_e, slot by slot."""
        edges, signs = self.t.edge_tab[:, :nodes], self._sign_tab[:, :nodes]
        total = edge_values[edges[0]] * signs[0]
        for k in range(1, self.t.degree):
            total += edge_values[edges[k]] * signs[k]
        return total

    def upwind(self, part: str) -> None:
        """psi1 on the update nodes: psi minus the divergence of the upwind fluxes of psi."""
        if part == INNER:
            return
        t, psi = self.t, self.f.psi
        flux = self._vpos * psi[t.edge_i] + self._vneg * psi[t.edge_j]
        self.f.psi1[t.update_nodes] = psi[t.update_nodes] - self._dt_area * self._node_sums(flux, t.n_update)

    def accept_upwind(self) -> None:
        """Upwind only (no corrective pass): psi = psi1 on the owned nodes."""
        no = self.t.n_owned
        self.f.psi[:no] = self.f.psi1[:no]

    def gradient(self) -> None:
        """Green-Gauss gradient of psi1 on the owned nodes, tangent to the sphere (1/m per tracer unit):
        (1/A_i) sum_e (psi1_other - psi1_i)/2 S_e (S_e out of i). Writing the face value as the mean minus
        psi1_i makes the gradient of a constant exactly zero although the 3-D face normals of a cell on a
        sphere do not sum to zero; the radial part that curvature leaves is then removed."""
        t, psi1, grad = self.t, self.f.psi1, self.f.grad
        no = t.n_owned
        others = t.other_tab[:, :no]
        own = psi1[:no]
        for k in range(t.degree):
            half_diff = 0.5 * (psi1[others[k]] - own)  # 0 in padding: the other node is the node itself
            for c in range(3):
                if k == 0:
                    np.multiply(half_diff, self._normal_tab[k, c], out=grad[c, :no])
                else:
                    grad[c, :no] += half_diff * self._normal_tab[k, c]
        g, r = grad[:, :no], self._radial_o
        g *= self._inv_area_o
        radial = g[0] * r[0] + g[1] * r[1] + g[2] * r[2]
        for c in range(3):
            g[c] -= radial * r[c]

    def fluxes(self, part: str) -> None:
        """The antidiffusive flux of every local edge: the upwind flux of psi1 with MPDATA's pseudo-velocity."""
        if part == INNER:
            return
        i, j, psi1, g = self.t.edge_i, self.t.edge_j, self.f.psi1, self.f.grad
        pi, pj = psi1[i], psi1[j]
        w = self._wind
        wind_grad = 0.5 * (w[0] * (g[0, i] + g[0, j]) + w[1] * (g[1, i] + g[1, j]) + w[2] * (g[2, i] + g[2, j]))
        pseudo = (self._vabs * (pj - pi) - self._vdt * wind_grad) / (np.abs(pi) + np.abs(pj) + EPS)
        self.f.flux[...] = np.maximum(pseudo, 0.0) * pi + np.minimum(pseudo, 0.0) * pj

    def bounds(self, part: str) -> None:
        """FCT limiter coefficients on the update nodes: the bounds of psi and psi1 over each node and its
        neighbours against the node's antidiffusive outflow and inflow."""
        if part == INNER:
            return
        t, f = self.t, self.f
        up, nu = t.update_nodes, t.n_update
        high = np.maximum(f.psi, f.psi1)
        low = np.minimum(f.psi, f.psi1)
        high_u, low_u = high[up], low[up]
        outflow = np.zeros((nu, t.levels))
        inflow = np.zeros((nu, t.levels))  # summed as negatives, negated below (exact)
        for k in range(t.degree):
            other = t.other_tab[k]
            np.maximum(high_u, high[other], out=high_u)
            np.minimum(low_u, low[other], out=low_u)
            out = f.flux[t.edge_tab[k]] * self._sign_tab[k]  # leaving the node; 0 in padding
            outflow += np.maximum(out, 0.0)
            inflow += np.minimum(out, 0.0)
        f.beta_up[up] = (high_u - f.psi1[up]) / (self._dt_area * -inflow + EPS)
        f.beta_dn[up] = (f.psi1[up] - low_u) / (self._dt_area * outflow + EPS)

    def corrective(self, limit: bool) -> None:
        """psi on the owned nodes: psi1 minus the divergence of the antidiffusive fluxes, each scaled (``limit``)
        by the smaller of its sender's outflow and its receiver's inflow coefficient (at most 1)."""
        t, f = self.t, self.f
        flux = f.flux
        if limit:
            bu, bd, i, j = f.beta_up, f.beta_dn, t.edge_i, t.edge_j
            scale = np.where(flux >= 0.0, np.minimum(bd[i], bu[j]), np.minimum(bu[i], bd[j]))
            flux *= np.minimum(scale, 1.0)
        no = t.n_owned
        f.psi[:no] = f.psi1[:no] - self._dt_area_o * self._node_sums(flux, no)
