"""The median-dual mesh of the triangulated octahedral grid, in spherical geometry."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from .octahedral import OctahedralGrid
from .spherical import arc_angle, arc_normal, normalize, triangle_area
from .triangulation import triangulate

EARTH_RADIUS_M = 6371.22e3


class MedianDualMesh:
    """Edges, dual volumes and dual-face normals of the octahedral grid O-N on a sphere of ``radius`` m.

    Primal mesh: the triangulation of :func:`gridcomm.grids.triangulation.triangulate` (rows zipped by
    longitude, each pole closed by a zig-zag strip across its polar row, no extra pole nodes), a closed
    triangulated sphere: V = 4N(N + 9) nodes, E = 3V - 6 edges, F = 2V - 4 triangles. Every edge and every
    dual face below is a great-circle arc.

    Median dual: node i's cell is bounded, inside each triangle around i, by the arcs from the midpoints of
    the triangle's two edges at i to the triangle's centroid (the planar centroid of its corners, projected
    onto the sphere). The dual face of edge (i, j) runs from the centroid of the triangle on its left
    (seen from outside, walking from i to j) through the edge midpoint to the centroid of the triangle on
    its right.

    Attributes (V nodes, E edges, F triangles):
        grid, radius: the grid and the sphere's radius (m).
        xyz: (V, 3) node positions, unit vectors.
        triangles: (F, 3) node ids, counter-clockwise seen from outside.
        edges: (E, 2) node ids (i, j) with i < j; the global edge id is the row, edges sorted by (i, j).
        edge_triangles: (E, 2) the triangles left and right of the directed edge i -> j.
        centroids: (F, 3) triangle centroids, unit vectors; edge_midpoints: (E, 3) unit vectors.
        dual_volumes: (V,) dual-cell areas on the sphere, m^2.
        normals: (E, 3) integrated normal of each dual face, m: the sum over its two arcs of
            (arc length) x (unit normal of the arc's great-circle plane), oriented from i to j. A 3-D vector:
            each arc's conormal is constant along the arc, so this is the exact integral of the unit
            conormal over the face. Its length is at most ``face_lengths`` (equal when the face is straight).
        face_lengths: (E,) dual-face lengths (sum of the two arc lengths), m.
        node_edge_offsets, node_edge_ids: the edges at each node, CSR: node n's edges are
            ``node_edge_ids[node_edge_offsets[n]:node_edge_offsets[n + 1]]``, in ascending edge id.
    """

    def __init__(self, grid: OctahedralGrid | int | str, radius: float = EARTH_RADIUS_M) -> None:
        self.grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
        if not radius > 0:
            raise ArgumentError(f"radius must be a positive length in m, got {radius!r}")
        self.radius = float(radius)
        self.xyz = self.grid.xyz
        self.triangles = triangulate(self.grid)
        V, F = self.grid.size, len(self.triangles)
        self._edges_from_triangles()
        E = len(self.edges)
        assert F == 2 * V - 4, f"{F} triangles, expected 2V - 4 = {2 * V - 4}"
        assert E == 3 * V - 6, f"{E} edges, expected 3V - 6 = {3 * V - 6}"
        self.centroids = normalize(self.xyz[self.triangles].sum(axis=1))
        self.edge_midpoints = normalize(self.xyz[self.edges[:, 0]] + self.xyz[self.edges[:, 1]])
        self._dual_volumes()
        self._dual_faces()
        self._node_edges()

    @property
    def n_nodes(self) -> int:
        return self.grid.size

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    @property
    def n_triangles(self) -> int:
        return len(self.triangles)

    def _edges_from_triangles(self) -> None:
        V, F = self.grid.size, len(self.triangles)
        tail = self.triangles.reshape(-1)  # half-edges k -> k+1 of each triangle, counter-clockwise
        head = self.triangles[:, [1, 2, 0]].reshape(-1)
        lo, hi = np.minimum(tail, head), np.maximum(tail, head)
        keys, edge_of_half = np.unique(lo * V + hi, return_inverse=True)
        self.edges = np.stack([keys // V, keys % V], axis=1)
        tri_of_half = np.repeat(np.arange(F), 3)
        forward = tail < head  # the triangle holding i -> j (i < j) counter-clockwise lies left of it
        left = np.full(len(keys), -1)
        right = np.full(len(keys), -1)
        left[edge_of_half[forward]] = tri_of_half[forward]
        right[edge_of_half[~forward]] = tri_of_half[~forward]
        if (left < 0).any() or (right < 0).any() or np.bincount(edge_of_half).max() != 2:
            raise AssertionError("triangulation is not a consistently oriented closed surface")
        self.edge_triangles = np.stack([left, right], axis=1)

    def _dual_volumes(self) -> None:
        """Each triangle gives each corner the two spherical triangles (corner, next midpoint, centroid) and
        (corner, centroid, previous midpoint): the median-dual quadrilateral, counter-clockwise."""
        t = self.triangles
        p = self.xyz[t]  # (F, 3 corners, 3)
        g = self.centroids[:, None, :]
        mid_next = normalize(p + p[:, [1, 2, 0]])  # midpoint of corner k -> k+1
        mid_prev = mid_next[:, [2, 0, 1]]  # midpoint of corner k-1 -> k
        area = triangle_area(p, mid_next, np.broadcast_to(g, p.shape)) + triangle_area(
            p, np.broadcast_to(g, p.shape), mid_prev
        )
        if (area <= 0).any():
            raise AssertionError("a median-dual sub-triangle has non-positive area")
        self.dual_volumes = np.bincount(t.reshape(-1), weights=area.reshape(-1), minlength=self.grid.size)
        self.dual_volumes *= self.radius**2

    def _dual_faces(self) -> None:
        left = self.centroids[self.edge_triangles[:, 0]]
        right = self.centroids[self.edge_triangles[:, 1]]
        m = self.edge_midpoints
        self.normals = self.radius * (arc_normal(left, m) + arc_normal(m, right))
        self.face_lengths = self.radius * (arc_angle(left, m) + arc_angle(m, right))

    def _node_edges(self) -> None:
        E = len(self.edges)
        nodes = self.edges.T.reshape(-1)
        ids = np.tile(np.arange(E), 2)
        order = np.lexsort((ids, nodes))
        self.node_edge_ids = ids[order]
        self.node_edge_offsets = np.concatenate([[0], np.cumsum(np.bincount(nodes, minlength=self.grid.size))])

    def neighbours(self, node: int) -> np.ndarray:
        """Node ids joined to ``node`` by an edge, in ascending edge id."""
        ids = self.node_edge_ids[self.node_edge_offsets[node] : self.node_edge_offsets[node + 1]]
        ends = self.edges[ids]
        return np.where(ends[:, 0] == node, ends[:, 1], ends[:, 0])

    def __repr__(self) -> str:
        return (
            f"MedianDualMesh({self.grid.name}: {self.n_nodes} nodes, {self.n_edges} edges, "
            f"{self.n_triangles} triangles, R = {self.radius:g} m)"
        )
