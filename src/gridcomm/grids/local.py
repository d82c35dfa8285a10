"""A part's piece of the median-dual mesh: owned nodes, halo, and the edges that update them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError
from .mesh import MedianDualMesh
from .partition import halo_layers, validate_owner


@dataclass(frozen=True, eq=False)
class LocalMesh:
    """What one part needs of the mesh, in local numbering: owned nodes first, in patches
    (``OctahedralGrid.patch_order``: consecutive nodes are near each other in both directions, so that what a
    GPU block gathers from its neighbours is mostly in its own patch), then the halo nodes of ``layers``
    layers (ascending global id).

    The *update set* is every node that this part computes: its owned nodes and the halo nodes of layers
    1..layers-1 (with 2 layers: owned nodes and the first halo layer). Its edges are all edges with at
    least one node in the update set, with the global orientation (edge_nodes[e] = local indices of global
    (i, j), i < j), so that every node of the update set has all of its edges and both of its ends are local.
    Edges between two owned nodes come first; each group is ordered by its ends' local positions (nearer end,
    then the other), so that an edge lies near its nodes in memory as well.

    Node sums over edges are segment sums over the *incidences* (node, edge): grouped by node in update
    order, within a node in ascending global edge id. A node's sum therefore adds the same terms in the same
    order in every partition (and in the serial run, the partition with one part), which is what makes
    distributed results bitwise identical to serial ones.

    Attributes:
        part, layers, n_owned, n_halo, n_local, n_update, n_edges.
        global_ids: (n_local,) global node id of each local node.
        halo_layer: (n_local,) 0 for owned nodes, k for halo layer k.
        update_nodes: (n_update,) local indices of the update set: 0..n_owned-1, then layer-1.. nodes.
        edge_ids: (n_edges,) global edge ids; edge_nodes: (n_edges, 2) local node indices.
        normals: (n_edges, 3) m; face_lengths: (n_edges,) m; dual_volumes: (n_local,) m^2;
        xyz: (n_local, 3) unit vectors.
        inc_starts: (n_update,) first incidence of each update node; inc_edges: local edge of each
        incidence; inc_signs: +1.0 where the node is the edge's first end i (the edge's normal points out
        of it), -1.0 where it is j; inc_others: local index of the edge's other end.
        n_inc_owned: incidences of the owned nodes (they come first).
    """

    part: int
    layers: int
    n_owned: int
    global_ids: np.ndarray
    halo_layer: np.ndarray
    update_nodes: np.ndarray
    edge_ids: np.ndarray
    edge_nodes: np.ndarray
    normals: np.ndarray
    face_lengths: np.ndarray
    dual_volumes: np.ndarray
    xyz: np.ndarray
    inc_starts: np.ndarray
    inc_edges: np.ndarray
    inc_signs: np.ndarray
    inc_others: np.ndarray
    n_inc_owned: int

    @property
    def n_local(self) -> int:
        return len(self.global_ids)

    @property
    def n_halo(self) -> int:
        return self.n_local - self.n_owned

    @property
    def n_update(self) -> int:
        return len(self.update_nodes)

    @property
    def n_edges(self) -> int:
        return len(self.edge_ids)

    @property
    def owned_ids(self) -> np.ndarray:
        return self.global_ids[: self.n_owned]

    @property
    def halo_ids(self) -> np.ndarray:
        return self.global_ids[self.n_owned :]

    @classmethod
    def build(cls, mesh: MedianDualMesh, owner: np.ndarray, part: int, layers: int = 2) -> LocalMesh:
        """The local mesh of ``part`` under ``owner`` (int per node) with ``layers`` halo layers."""
        owner = validate_owner(owner, mesh.n_nodes)
        if not 0 <= part <= int(owner.max()):
            raise ArgumentError(f"part {part} is not among the parts 0..{int(owner.max())} of owner")
        V = mesh.n_nodes
        owned = mesh.grid.patch_order(np.flatnonzero(owner == part))
        rings = halo_layers(mesh, owner, part, layers)
        halo = np.sort(np.concatenate(rings))
        global_ids = np.concatenate([owned, halo])
        layer_of = np.full(V, -1, np.int64)
        layer_of[owned] = 0
        for k, ring in enumerate(rings, start=1):
            layer_of[ring] = k
        local_of = np.full(V, -1, np.int64)
        local_of[global_ids] = np.arange(len(global_ids))
        halo_layer = layer_of[global_ids]
        update_global = np.concatenate([owned, halo[layer_of[halo] < layers]])
        in_update = np.zeros(V, bool)
        in_update[update_global] = True
        i, j = mesh.edges[:, 0], mesh.edges[:, 1]
        edge_ids = np.flatnonzero(in_update[i] | in_update[j])
        edge_nodes = local_of[mesh.edges[edge_ids]]
        assert (edge_nodes >= 0).all(), "an edge of the update set leaves the local nodes"
        between_owned = (edge_nodes < len(owned)).all(axis=1)
        order = np.lexsort((edge_nodes.max(axis=1), edge_nodes.min(axis=1), ~between_owned))
        edge_ids, edge_nodes = edge_ids[order], edge_nodes[order]
        local_edge_of = np.full(mesh.n_edges, -1, np.int64)
        local_edge_of[edge_ids] = np.arange(len(edge_ids))
        # Incidences of the update nodes, straight from the global CSR (already in ascending edge id).
        off = mesh.node_edge_offsets
        counts = off[update_global + 1] - off[update_global]
        pos = np.repeat(off[update_global] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        inc_global = mesh.node_edge_ids[np.arange(counts.sum()) + pos]
        node_of_inc = np.repeat(update_global, counts)
        first = mesh.edges[inc_global, 0] == node_of_inc
        other_global = np.where(first, mesh.edges[inc_global, 1], mesh.edges[inc_global, 0])
        return cls(
            part=int(part),
            layers=int(layers),
            n_owned=len(owned),
            global_ids=global_ids,
            halo_layer=halo_layer,
            update_nodes=local_of[update_global],
            edge_ids=edge_ids,
            edge_nodes=edge_nodes,
            normals=mesh.normals[edge_ids],
            face_lengths=mesh.face_lengths[edge_ids],
            dual_volumes=mesh.dual_volumes[global_ids],
            xyz=mesh.xyz[global_ids],
            inc_starts=np.concatenate([[0], np.cumsum(counts)[:-1]]),
            inc_edges=local_edge_of[inc_global],
            inc_signs=np.where(first, 1.0, -1.0),
            inc_others=local_of[other_global],
            n_inc_owned=int(counts[: len(owned)].sum()),
        )

    @classmethod
    def serial(cls, mesh: MedianDualMesh) -> LocalMesh:
        """The whole mesh as one part (no halo)."""
        return cls.build(mesh, np.zeros(mesh.n_nodes, np.int32), 0, layers=1)
