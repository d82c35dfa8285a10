"""What MPDATA's kernels read besides the fields: one part's node-to-edge table and edge coefficients, on the
host, built once; and the split of the update nodes into those a phase may compute while an exchange runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....grids.local import LocalMesh

EPS = 1e-15  # guards the ratios of MPDATA and FCT where a field and its fluxes vanish
INNER = "inner"  # the nodes of a phase that read no halo value: computed while the exchange runs
OUTER = "outer"  # the rest: computed after it


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


@dataclass(frozen=True, eq=False)
class MeshTables:
    """One part's mesh as MPDATA's phases read it (host arrays, local numbering).

    Attributes:
        n_owned, n_local, n_update, levels, degree (D, the largest node degree), dt (s).
        update_nodes: (n_update,) local node of each update position (owned nodes first, as 0..n_owned-1).
        edge_tab, sign_tab, other_tab: (D, n_update) from :func:`node_edge_table`.
        edge_i, edge_j: (n_edges,) the local nodes of each edge (global orientation).
        fluxes: (n_edges,) volume flux through each dual face, m^2/s, from i to j.
        velocities: (n_edges, 3) wind at the edge midpoints, m/s.
        normals: (n_edges, 3) each edge's dual-face normal, from its first node to its second, m.
        normal_tab: (D, 3, n_owned) each owned node's face normals by slot, signed out of the node, m.
        dt_area: (n_update,) dt / dual volume, s/m^2.
        inv_area_owned: (n_owned,) 1 / dual volume, 1/m^2 (the gradient multiplies by it: one division per
        node instead of three per value, the same on the CPU and the GPU).
        xyz: (n_local, 3) unit vectors (the radial direction at each node).
        inner: update positions whose node and neighbours are all owned (ascending); outer: the others.
        inner_edges: local edges with both ends owned (ascending); outer_edges: the others.
    """

    n_owned: int
    n_local: int
    levels: int
    dt: float
    update_nodes: np.ndarray
    edge_tab: np.ndarray
    sign_tab: np.ndarray
    other_tab: np.ndarray
    edge_i: np.ndarray
    edge_j: np.ndarray
    fluxes: np.ndarray
    velocities: np.ndarray
    normals: np.ndarray
    normal_tab: np.ndarray
    dt_area: np.ndarray
    inv_area_owned: np.ndarray
    xyz: np.ndarray
    inner: np.ndarray
    outer: np.ndarray
    inner_edges: np.ndarray
    outer_edges: np.ndarray

    @property
    def n_update(self) -> int:
        return len(self.update_nodes)

    @property
    def degree(self) -> int:
        return len(self.edge_tab)

    @classmethod
    def build(cls, local: LocalMesh, fluxes: np.ndarray, velocities: np.ndarray, dt: float, levels: int) -> MeshTables:
        edge_tab, signs, other_tab = node_edge_table(local)
        no = local.n_owned
        normal_tab = (local.normals[edge_tab[:, :no]] * signs[:, :no, None]).transpose(0, 2, 1)
        area = local.dual_volumes
        owned = local.halo_layer == 0
        reads_owned_only = owned[local.update_nodes] & owned[other_tab].all(axis=0)
        positions = np.arange(local.n_update)
        edges_owned = owned[local.edge_nodes].all(axis=1)
        edge_ids = np.arange(local.n_edges)
        return cls(
            n_owned=no,
            n_local=local.n_local,
            levels=int(levels),
            dt=float(dt),
            update_nodes=local.update_nodes,
            edge_tab=edge_tab,
            sign_tab=signs,
            other_tab=other_tab,
            edge_i=local.edge_nodes[:, 0],
            edge_j=local.edge_nodes[:, 1],
            fluxes=fluxes,
            velocities=velocities,
            normals=local.normals,
            normal_tab=np.ascontiguousarray(normal_tab),
            dt_area=dt / area[local.update_nodes],
            inv_area_owned=1.0 / area[:no],
            xyz=local.xyz,
            inner=positions[reads_owned_only],
            outer=positions[~reads_owned_only],
            inner_edges=edge_ids[edges_owned],
            outer_edges=edge_ids[~edges_owned],
        )
