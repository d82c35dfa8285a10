"""MPDATA on the edge-based median-dual mesh, one part's share, with its two halo exchanges per step.

The scheme (Smolarkiewicz & Szmelter 2005; Smolarkiewicz, Kühnlein & Wedi 2016; Kühnlein & Smolarkiewicz
2017), for a tracer psi advected by a non-divergent wind whose volume flux through the dual face of edge
e = (i, j) is V_e (m^2/s, from i to j):

1. Upwind (donor-cell) pass: F_e = [V_e]+ psi_i + [V_e]- psi_j, psi1_i = psi_i - dt / A_i sum_e s_ie F_e
   (s_ie = +1 when i is the edge's first node, -1 otherwise; A_i the dual volume).
2. Corrective pass: the same upwind pass applied to psi1 with the antidiffusive pseudo-velocity
   V1_e = (|V_e| (psi1_j - psi1_i) - dt V_e v_e . grad(psi1)_e) / (|psi1_i| + |psi1_j| + eps),
   which cancels the leading truncation error of step 1 (the implicit diffusion 1/2 |V| delta psi and
   the forward-in-time error 1/2 dt^2 d2psi/dt2). grad(psi1)_e is the mean of the nodal gradients at i and
   j (Green-Gauss on the dual cell, taken tangent to the sphere) and v_e the wind at the edge midpoint.
3. Non-oscillatory option (FCT, Zalesak 1979 / Smolarkiewicz & Grabowski 1990): the corrective fluxes
   are scaled so that psi2_i stays within the min/max of psi and psi1 over node i and its neighbours.

Distribution: every part owns nodes and keeps two halo layers. Two exchanges per step make the owned
results exactly those of a serial run:

* exchange 1, at the start of a step: psi on both halo layers. The upwind pass is then computed on the
  owned nodes and on halo layer 1 (whose edges are all local), and the nodal gradients of psi1 on the
  owned nodes (which need psi1 on layer 1 only).
* exchange 2, after the gradients: psi1 and its gradient (3 components) on both halo layers. Every edge
  with a node in owned + layer 1 then has its corrective flux, every such node its FCT bounds and limiter
  coefficients, and every owned node its limited update.

Node sums over edges run over a node-to-edge table (the dwarf's node2edge): per node its edges in ascending
global edge id, padded to the largest degree with zero-signed entries, summed slot by slot. A node's sum
therefore adds the same terms in the same order on any number of parts; every other operation is
elementwise IEEE arithmetic, so owned values are bitwise those of the serial run. (np.add.reduceat over
the local mesh's incidences gives the same guarantee but is about 3x slower with many levels.)

Arrays are (nodes, levels), levels the fast (contiguous) axis; the horizontal scheme acts on each level.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...grids.local import LocalMesh

EPS = 1e-15  # guards the ratios of MPDATA and FCT where a field and its fluxes vanish


class NoExchange:
    """The exchange of a single part: nothing to do."""

    def exchange(self) -> None:
        pass


def no_exchanger(fields: Sequence[np.ndarray]) -> NoExchange:
    return NoExchange()


class Mpdata:
    """One part's MPDATA solver: owns the tracer ``psi`` (n_local, levels) and the work arrays.

    Args:
        local: the part's mesh; with halo nodes it must have at least 2 layers.
        fluxes: (local.n_edges,) volume flux through each local edge's dual face, m^2/s, from i to j.
        velocities: (local.n_edges, 3) wind at the edge midpoints, m/s (3-D, tangent to the sphere).
        dt: time step, s (check it with :func:`gridcomm.apps.mpdata.cfl.check_cfl`).
        levels: vertical levels (the second axis of every field).
        fct: apply the non-oscillatory (FCT) limiter to the corrective pass.
        iterations: corrective iterations: 1 (MPDATA, the default) or 0 (upwind only).
        make_exchanger: called (collectively, twice, in the same order on every part) with the list of
            fields that one exchange must fill; returns an object whose ``exchange()`` fills their halo
            rows from the owners, e.g. ``lambda f: gridcomm.HaloExchanger(decomp, f)``. Default: no
            exchange (a single part).
    """

    def __init__(
        self,
        local: LocalMesh,
        fluxes: np.ndarray,
        velocities: np.ndarray,
        dt: float,
        *,
        levels: int = 1,
        fct: bool = True,
        iterations: int = 1,
        make_exchanger: Callable[[list[np.ndarray]], Any] | None = None,
    ) -> None:
        if iterations not in (0, 1):
            raise ValueError(
                f"iterations={iterations!r}: this MPDATA does 0 (upwind only) or 1 corrective iteration; more "
                "would need the pseudo-velocity's full vector and one more halo exchange per iteration"
            )
        if local.n_halo and local.layers < 2:
            raise ValueError(f"MPDATA needs 2 halo layers, the local mesh of part {local.part} has {local.layers}")
        if levels < 1:
            raise ValueError(f"levels must be at least 1, got {levels}")
        fluxes = np.asarray(fluxes, np.float64)
        velocities = np.asarray(velocities, np.float64)
        if fluxes.shape != (local.n_edges,) or velocities.shape != (local.n_edges, 3):
            raise ValueError(
                f"fluxes {fluxes.shape} and velocities {velocities.shape} must be ({local.n_edges},) and "
                f"({local.n_edges}, 3): one per local edge"
            )
        self.local, self.dt, self.levels, self.fct, self.iterations = local, float(dt), int(levels), fct, iterations
        n, no = local.n_local, local.n_owned
        self._i, self._j = local.edge_nodes[:, 0], local.edge_nodes[:, 1]
        v = fluxes[:, None]
        self._vpos, self._vneg, self._vabs, self._vdt = np.maximum(v, 0.0), np.minimum(v, 0.0), np.abs(v), dt * v
        self._wind = [velocities[:, k : k + 1].copy() for k in range(3)]
        self._update = local.update_nodes
        self._edge_tab, signs, self._other_tab = node_edge_table(local)
        self._sign_tab = signs[:, :, None]
        self._degree = len(self._edge_tab)
        # Each owned node's face normals by slot, signed out of the node: (degree, 3, n_owned, 1).
        normals = local.normals[self._edge_tab[:, :no]] * signs[:, :no, None]
        self._normal_tab = np.ascontiguousarray(normals.transpose(0, 2, 1))[..., None]
        area = local.dual_volumes
        self._dt_area = (dt / area[self._update])[:, None]
        self._dt_area_o = self._dt_area[:no]
        self._area_o = area[:no, None]
        self._radial_o = [local.xyz[:no, k : k + 1].copy() for k in range(3)]
        shape = (n, self.levels)
        self.psi = np.zeros(shape)
        self._psi1 = np.zeros(shape)
        self._grad = np.zeros((3, *shape))  # three C-contiguous (n, levels) fields
        self._beta_up = np.zeros(shape)
        self._beta_dn = np.zeros(shape)
        make = make_exchanger or no_exchanger
        self.exchange_fields: tuple[list[np.ndarray], ...] = ([self.psi], [self._psi1, *self._grad])
        self._exchanges = [make(self.exchange_fields[0])]
        if iterations:
            self._exchanges.append(make(self.exchange_fields[1]))
        self.steps_done = 0
        self.exchange_s = 0.0  # seconds spent in halo exchanges
        self.step_s = 0.0  # seconds spent in steps, exchanges included

    @property
    def exchanges_per_step(self) -> int:
        """Halo exchanges per step: 2 (1 with ``iterations=0``)."""
        return len(self._exchanges)

    @property
    def owned(self) -> np.ndarray:
        """The tracer on the owned nodes, (n_owned, levels) (a view)."""
        return self.psi[: self.local.n_owned]

    def _exchange(self, k: int) -> None:
        start = time.perf_counter()
        self._exchanges[k].exchange()
        self.exchange_s += time.perf_counter() - start

    def _node_sums(self, edge_values: np.ndarray, nodes: int) -> np.ndarray:
        """For the first ``nodes`` update nodes: sum over their edges of s_ie x value_e, slot by slot."""
        edges, signs = self._edge_tab[:, :nodes], self._sign_tab[:, :nodes]
        total = edge_values[edges[0]] * signs[0]
        for k in range(1, self._degree):
            total += edge_values[edges[k]] * signs[k]
        return total

    def step(self) -> None:
        """Advance ``psi`` on the owned nodes by one time step (halo rows are refreshed by the next step)."""
        start = time.perf_counter()
        no, i, j, up = self.local.n_owned, self._i, self._j, self._update
        psi, psi1 = self.psi, self._psi1
        self._exchange(0)
        flux = self._vpos * psi[i] + self._vneg * psi[j]
        psi1[up] = psi[up] - self._dt_area * self._node_sums(flux, len(up))
        if not self.iterations:
            psi[:no] = psi1[:no]
        else:
            self._gradient_owned()
            self._exchange(1)
            flux = self._antidiffusive_flux()
            if self.fct:
                self._limit(flux)
            psi[:no] = psi1[:no] - self._dt_area_o * self._node_sums(flux, no)
        self.steps_done += 1
        self.step_s += time.perf_counter() - start

    def run(self, steps: int, progress: Callable[[int, int], Any] | None = None) -> None:
        """``steps`` time steps; ``progress(done, steps)`` after each."""
        for k in range(steps):
            self.step()
            if progress is not None:
                progress(k + 1, steps)

    def _gradient_owned(self) -> None:
        """Green-Gauss gradient of psi1 on the owned nodes, tangent to the sphere (1/m per tracer unit):
        (1/A_i) sum_e (psi1_other - psi1_i)/2 S_e (S_e out of i). Writing the face value as the mean minus
        psi1_i makes the gradient of a constant exactly zero although the 3-D face normals of a cell on a
        sphere do not sum to zero; the radial part that curvature leaves is then removed."""
        psi1, no, grad = self._psi1, self.local.n_owned, self._grad
        others = self._other_tab[:, :no]
        own = psi1[:no]
        for k in range(self._degree):
            half_diff = 0.5 * (psi1[others[k]] - own)  # 0 in padding: the other node is the node itself
            for c in range(3):
                if k == 0:
                    np.multiply(half_diff, self._normal_tab[k, c], out=grad[c, :no])
                else:
                    grad[c, :no] += half_diff * self._normal_tab[k, c]
        g, r = grad[:, :no], self._radial_o
        g /= self._area_o
        radial = g[0] * r[0] + g[1] * r[1] + g[2] * r[2]
        for c in range(3):
            g[c] -= radial * r[c]

    def _antidiffusive_flux(self) -> np.ndarray:
        """Upwind flux of psi1 with MPDATA's antidiffusive pseudo-velocity, per local edge."""
        i, j, psi1, g = self._i, self._j, self._psi1, self._grad
        pi, pj = psi1[i], psi1[j]
        w = self._wind
        wind_grad = 0.5 * (w[0] * (g[0, i] + g[0, j]) + w[1] * (g[1, i] + g[1, j]) + w[2] * (g[2, i] + g[2, j]))
        pseudo = (self._vabs * (pj - pi) - self._vdt * wind_grad) / (np.abs(pi) + np.abs(pj) + EPS)
        return np.maximum(pseudo, 0.0) * pi + np.minimum(pseudo, 0.0) * pj

    def _limit(self, flux: np.ndarray) -> None:
        """Scale ``flux`` in place (FCT): limiter coefficients on the update nodes, then per edge the
        smaller of the sender's outflow and the receiver's inflow coefficients (at most 1)."""
        up, psi, psi1, nu = self._update, self.psi, self._psi1, len(self._update)
        high = np.maximum(psi, psi1)
        low = np.minimum(psi, psi1)
        high_u, low_u = high[up], low[up]
        outflow = np.zeros((nu, self.levels))
        inflow = np.zeros((nu, self.levels))  # summed as negatives, negated below (exact)
        for k in range(self._degree):
            other = self._other_tab[k]
            np.maximum(high_u, high[other], out=high_u)
            np.minimum(low_u, low[other], out=low_u)
            out = flux[self._edge_tab[k]] * self._sign_tab[k]  # leaving the node; 0 in padding
            outflow += np.maximum(out, 0.0)
            inflow += np.minimum(out, 0.0)
        self._beta_up[up] = (high_u - psi1[up]) / (self._dt_area * -inflow + EPS)
        self._beta_dn[up] = (psi1[up] - low_u) / (self._dt_area * outflow + EPS)
        bu, bd, i, j = self._beta_up, self._beta_dn, self._i, self._j
        scale = np.where(flux >= 0.0, np.minimum(bd[i], bu[j]), np.minimum(bu[i], bd[j]))
        flux *= np.minimum(scale, 1.0)


def node_edge_table(local: LocalMesh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges of every update node as a table padded to the largest degree D (the dwarf's node2edge):
    (D, n_update) local edge indices in ascending global edge id, their signs (+1 where the node is the
    edge's first end, -1 where it is the second, 0 in padding) and the node at the other end (the node
    itself in padding, so that min/max and differences over the table ignore padding)."""
    starts, n_inc = local.inc_starts, len(local.inc_edges)
    degree = np.diff(np.append(starts, n_inc))
    width = int(degree.max()) if degree.size else 0
    slot = np.arange(n_inc) - np.repeat(starts, degree)
    column = np.repeat(np.arange(local.n_update), degree)
    edges = np.repeat(local.inc_edges[starts][None, :], width, axis=0)
    edges[slot, column] = local.inc_edges
    signs = np.zeros((width, local.n_update))
    signs[slot, column] = local.inc_signs
    others = np.repeat(local.update_nodes[None, :], width, axis=0)
    others[slot, column] = local.inc_others
    return edges, signs, others
