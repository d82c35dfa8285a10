"""The octahedral grid and its median-dual mesh on the sphere: formulas, counts, areas, closure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from harness import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from gridcomm.grids import EARTH_RADIUS_M, MedianDualMesh, OctahedralGrid, parse_grid_name
from gridcomm.grids.spherical import arc_angle, lonlat_to_xyz, triangle_area, xyz_to_lonlat

MESH_NS = (1, 2, 3, 8, 24)


@pytest.fixture(scope="module", params=MESH_NS, ids=lambda n: f"O{n}")
def mesh(request) -> MedianDualMesh:
    return MedianDualMesh(request.param)


# -- grid -------------------------------------------------------------------------------------------------


@given(st.integers(1, 64))
@settings(max_examples=examples(25))
def test_grid_formulas(n):
    g = OctahedralGrid(n)
    assert g.name == f"O{n}" and g.N == n  # noqa: SIM300
    assert g.size == len(g) == 4 * n * (n + 9) == g.offsets[-1]
    i = np.arange(1, n + 1)
    assert g.nlon.tolist() == (20 + 4 * (i - 1)).tolist() + (20 + 4 * (i - 1))[::-1].tolist()
    assert (np.diff(g.offsets) == g.nlon).all()
    assert len(g.latitudes) == 2 * n and (np.diff(g.latitudes) < 0).all()  # north to south
    assert np.allclose(g.latitudes, -g.latitudes[::-1], rtol=0, atol=0)  # symmetric
    # The latitudes are the roots of P_2N (in sin(lat)) and the weights integrate polynomials of degree 4N-1.
    p2n = np.zeros(2 * n + 1)
    p2n[-1] = 1.0
    assert np.abs(np.polynomial.legendre.legval(np.sin(g.latitudes), p2n)).max() < 1e-12
    assert g.weights.sum() == pytest.approx(2.0, rel=1e-14)
    assert (g.weights * np.sin(g.latitudes) ** (4 * n - 2)).sum() == pytest.approx(2.0 / (4 * n - 1), rel=1e-12)


@pytest.mark.parametrize("n", [160, 640])
def test_grid_rows_are_the_gauss_legendre_rule_to_rounding(n):
    """Weights and latitudes to about 1e-14 against ducc0 at the dwarfs' sizes (numpy's leggauss, used before,
    is off by 2e-10 at O160 and 2e-8 at O640, which the spectral round trip showed)."""
    ducc0 = pytest.importorskip("ducc0")
    g = OctahedralGrid(n)
    ref_w = ducc0.misc.GL_weights(2 * n, 1) / (2.0 * np.pi)
    assert np.abs(g.weights / ref_w - 1.0).max() < 1e-13
    assert np.abs(g.latitudes - (0.5 * np.pi - ducc0.misc.GL_thetas(2 * n))).max() < 1e-14


def test_grid_nodes_row_major_from_longitude_zero():
    g = OctahedralGrid(3)
    assert (np.diff(g.row) >= 0).all()
    for r in range(6):
        ids = np.arange(g.offsets[r], g.offsets[r + 1])
        assert g.lon[ids[0]] == 0.0
        assert np.allclose(np.diff(g.lon[ids]), 2 * np.pi / g.nlon[r], rtol=1e-12)
        assert (g.lat[ids] == g.latitudes[r]).all()
    assert np.allclose(np.linalg.norm(g.xyz, axis=1), 1.0, rtol=1e-15)
    lon, lat = xyz_to_lonlat(g.xyz)
    assert np.allclose(lat, g.lat, atol=1e-14)
    assert np.allclose(np.cos(lon - g.lon), 1.0, atol=1e-14)


def test_grid_names():
    assert parse_grid_name("O32") == 32 and parse_grid_name("o8") == 8 and parse_grid_name(" O1280 ") == 1280
    assert OctahedralGrid(16).size == OctahedralGrid("O16").size
    for bad in ("N32", "F32", "O", "O-3", "32x", "", "O3.5", True):
        with pytest.raises(ValueError, match="grid"):
            OctahedralGrid(bad)
    with pytest.raises(ValueError, match="at least 1"):
        OctahedralGrid(0)
    with pytest.raises(ValueError, match="O32"):
        OctahedralGrid("T159")


# -- spherical helpers ------------------------------------------------------------------------------------


def test_spherical_triangle_area_octant():
    a, b, c = np.eye(3)
    assert triangle_area(a[None], b[None], c[None])[0] == pytest.approx(np.pi / 2, rel=1e-15)
    assert triangle_area(a[None], c[None], b[None])[0] == pytest.approx(-np.pi / 2, rel=1e-15)
    assert arc_angle(a[None], b[None])[0] == pytest.approx(np.pi / 2, rel=1e-15)
    x = lonlat_to_xyz(np.array([0.0, 1e-4]), np.array([0.0, 0.0]))
    assert arc_angle(x[:1], x[1:])[0] == pytest.approx(1e-4, rel=1e-12)


# -- mesh -------------------------------------------------------------------------------------------------


def test_mesh_counts(mesh):
    V = mesh.grid.size
    assert mesh.n_nodes == V == 4 * mesh.grid.N * (mesh.grid.N + 9)
    assert mesh.n_edges == 3 * V - 6 and mesh.edges.shape == (3 * V - 6, 2)
    assert mesh.n_triangles == 2 * V - 4 and mesh.triangles.shape == (2 * V - 4, 3)
    assert V - mesh.n_edges + mesh.n_triangles == 2  # a closed surface of genus 0


def test_mesh_edges_sorted_and_each_between_two_triangles(mesh):
    e = mesh.edges
    assert (e[:, 0] < e[:, 1]).all()
    key = e[:, 0] * mesh.n_nodes + e[:, 1]
    assert (np.diff(key) > 0).all()  # global edge id = rank of (i, j)
    t = mesh.triangles
    for side, (a, b) in ((0, (0, 1)), (1, (1, 0))):  # left triangle holds i -> j, right one j -> i
        tri = t[mesh.edge_triangles[:, side]]
        hits = np.zeros(len(e), bool)
        for k in range(3):
            hits |= (tri[:, k] == e[:, a]) & (tri[:, (k + 1) % 3] == e[:, b])
        assert hits.all()
    # Every row neighbour is joined (periodic in longitude) and the triangles run counter-clockwise.
    p = mesh.xyz[t]
    assert (np.einsum("ij,ij->i", p[:, 0], np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])) > 0).all()
    g = mesh.grid
    ring = np.arange(g.size)
    nxt = np.where(ring + 1 == g.offsets[g.row + 1], g.offsets[g.row], ring + 1)
    pairs = set(map(tuple, e.tolist()))
    assert all((min(a, b), max(a, b)) in pairs for a, b in zip(ring.tolist(), nxt.tolist(), strict=True))


def test_dual_areas_sum_to_the_sphere(mesh):
    assert (mesh.dual_volumes > 0).all()
    total = math.fsum(mesh.dual_volumes.tolist())
    assert total == pytest.approx(4 * np.pi * EARTH_RADIUS_M**2, rel=1e-12)
    small = MedianDualMesh(mesh.grid, radius=2.0)
    assert math.fsum(small.dual_volumes.tolist()) == pytest.approx(16 * np.pi, rel=1e-12)


def test_dual_face_normals_point_from_i_to_j(mesh):
    chord = mesh.xyz[mesh.edges[:, 1]] - mesh.xyz[mesh.edges[:, 0]]
    assert (np.einsum("ij,ij->i", mesh.normals, chord) > 0).all()
    length = np.linalg.norm(mesh.normals, axis=1)
    assert (length <= mesh.face_lengths * (1 + 1e-12)).all() and (length > 0.5 * mesh.face_lengths).all()
    # Tangent to the sphere at the edge midpoint to second order in the face length.
    radial = np.einsum("ij,ij->i", mesh.normals, mesh.edge_midpoints)
    assert (np.abs(radial) <= mesh.face_lengths**2 / mesh.radius).all()


def test_dual_faces_close(mesh):
    """Closure of every node's dual faces.

    (1) Exact: the faces of a node chain centroid to centroid around it, so the flux of any solid-body
    rotation (the difference of its stream function at each face's two ends) sums to zero up to round-off.
    (2) The 3-D integrated normals: on a sphere the conormals of a closed curve do not sum to zero but to
    -(2/R) times the cell's first moment (the sphere's mean curvature), a vector of length 2A/R pointing into
    the sphere (relative to the face lengths about h/R, 2 % at O48). Its radial part is -2A/R up to
    O((h/R)^2) and its part tangent to the sphere at the node is O((h/R)^2) of the face lengths; both are
    checked with h/R = pi/(2N), the Gaussian latitude spacing.
    """
    V, i, j = mesh.n_nodes, mesh.edges[:, 0], mesh.edges[:, 1]

    def node_sum(w):
        return np.bincount(i, w, V) - np.bincount(j, w, V)

    rng = np.random.default_rng(7)
    for axis in rng.normal(size=(4, 3)):
        axis /= np.linalg.norm(axis)
        psi = -mesh.radius * 40.0 * (mesh.centroids @ axis)  # m^2/s
        flux = psi[mesh.edge_triangles[:, 1]] - psi[mesh.edge_triangles[:, 0]]
        scale = np.bincount(i, np.abs(flux), V) + np.bincount(j, np.abs(flux), V)
        assert (np.abs(node_sum(flux)) <= 1e-13 * scale).all()
    total = np.stack([node_sum(mesh.normals[:, k]) for k in range(3)], axis=1)
    lengths = np.bincount(i, mesh.face_lengths, V) + np.bincount(j, mesh.face_lengths, V)
    radial = np.einsum("ij,ij->i", total, mesh.xyz)
    tangential = np.linalg.norm(total - radial[:, None] * mesh.xyz, axis=1)
    h = np.pi / (2 * mesh.grid.N)
    assert (np.abs(radial / (-2 * mesh.dual_volumes / mesh.radius) - 1) <= h**2).all()
    assert (tangential <= 0.25 * h**2 * lengths).all()


def test_node_edges_csr(mesh):
    for node in (0, 5, mesh.n_nodes // 2, mesh.n_nodes - 1):
        ids = mesh.node_edge_ids[mesh.node_edge_offsets[node] : mesh.node_edge_offsets[node + 1]]
        assert (np.diff(ids) > 0).all()
        assert set(ids.tolist()) == set(np.flatnonzero((mesh.edges == node).any(axis=1)).tolist())
        assert len(mesh.neighbours(node)) == len(ids)
    assert mesh.node_edge_offsets[-1] == 2 * mesh.n_edges


def test_mesh_repr_and_bad_radius():
    assert "O2" in repr(MedianDualMesh("O2")) and "O2" in repr(OctahedralGrid(2))
    with pytest.raises(ValueError, match="radius"):
        MedianDualMesh(2, radius=-1.0)


def _touched_per_block(mesh: MedianDualMesh, order: np.ndarray, block: int) -> float:
    """Mean number of distinct nodes that ``block`` consecutive nodes of ``order`` and their neighbours make up."""
    sizes = []
    for start in range(0, len(order) - block + 1, block):
        nodes = order[start : start + block]
        neighbours = np.concatenate([mesh.neighbours(int(n)) for n in nodes])
        sizes.append(len(np.union1d(nodes, neighbours)))
    return float(np.mean(sizes))


@pytest.mark.parametrize("n", [24, 64])
def test_patch_order_is_a_permutation_into_compact_patches(n):
    """patch_order returns the ids it was given, each once, and 16 consecutive ones with their neighbours touch
    far fewer nodes than 16 consecutive ones of a row (about 36 against 52): what a GPU block gathers."""
    mesh = MedianDualMesh(n)
    every = np.arange(mesh.n_nodes)
    order = mesh.grid.patch_order(every)
    assert np.array_equal(np.sort(order), every)
    some = np.random.default_rng(n).choice(mesh.n_nodes, mesh.n_nodes // 3, replace=False)
    assert np.array_equal(np.sort(mesh.grid.patch_order(some)), np.sort(some))
    patches, rows = _touched_per_block(mesh, order, 16), _touched_per_block(mesh, every, 16)
    assert patches < 0.8 * rows, (patches, rows)
