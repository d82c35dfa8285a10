"""Partitions of the octahedral grid: equal-regions balance and compactness, owner checks, halos, local meshes."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from harness import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from gridcomm.grids import (
    LocalMesh,
    MedianDualMesh,
    OctahedralGrid,
    equal_regions,
    halo_ids,
    halo_layers,
    partition_report,
    validate_owner,
)
from gridcomm.grids.partition import equal_region_bands

MESHES: dict[int, MedianDualMesh] = {}


def mesh_of(n: int) -> MedianDualMesh:
    if n not in MESHES:
        MESHES[n] = MedianDualMesh(n)
    return MESHES[n]


def adjacency(mesh: MedianDualMesh) -> list[list[int]]:
    adj: list[list[int]] = [[] for _ in range(mesh.n_nodes)]
    for a, b in mesh.edges.tolist():
        adj[a].append(b)
        adj[b].append(a)
    return adj


def components(adj: list[list[int]], nodes: np.ndarray) -> int:
    """Connected pieces of the subgraph on ``nodes`` (plain BFS: an independent check)."""
    inside, seen, pieces = set(nodes.tolist()), set(), 0
    for start in inside:
        if start in seen:
            continue
        pieces += 1
        seen.add(start)
        queue = deque([start])
        while queue:
            for nb in adj[queue.popleft()]:
                if nb in inside and nb not in seen:
                    seen.add(nb)
                    queue.append(nb)
    return pieces


def bfs_halo(adj: list[list[int]], owner: np.ndarray, part: int, layers: int) -> list[int]:
    dist = {int(n): 0 for n in np.flatnonzero(owner == part)}
    queue = deque(dist)
    while queue:
        node = queue.popleft()
        if dist[node] == layers:
            continue
        for nb in adj[node]:
            if nb not in dist:
                dist[nb] = dist[node] + 1
                queue.append(nb)
    return sorted(n for n, d in dist.items() if d > 0)


def test_equal_region_bands():
    assert equal_region_bands(1) == [1]
    assert equal_region_bands(2) == [1, 1]
    assert equal_region_bands(4) == [1, 2, 1]
    assert equal_region_bands(8) == [1, 6, 1]
    for n in range(1, 300):
        bands = equal_region_bands(n)
        assert sum(bands) == n and min(bands) >= 1
        if n > 2:
            assert bands[0] == bands[-1] == 1  # a polar cap at each pole


@given(st.integers(1, 24), st.integers(1, 200))
@settings(max_examples=examples(60))
def test_equal_regions_balanced_within_one_node(n, nparts):
    grid = OctahedralGrid(n)
    nparts = min(nparts, grid.size)
    owner = equal_regions(grid, nparts)
    assert owner.dtype == np.int32 and owner.shape == (grid.size,)
    counts = np.bincount(owner, minlength=nparts)
    assert len(counts) == nparts
    assert set(counts.tolist()) <= {grid.size // nparts, -(-grid.size // nparts)}


@pytest.mark.parametrize("n", [2, 4, 8, 16, 24])
def test_equal_regions_parts_are_connected_and_compact(n):
    mesh = mesh_of(n)
    adj = adjacency(mesh)
    for nparts in range(1, min(40, mesh.n_nodes // 16) + 1):
        owner = equal_regions(mesh, nparts)
        for part in range(nparts):
            assert components(adj, np.flatnonzero(owner == part)) == 1, (n, nparts, part)
    # Compact: a part's 1-layer halo is a small fraction of its size (a band of sectors, not a stripe).
    owner = equal_regions(mesh, 4)
    for entry in partition_report(mesh, owner):
        assert entry["halo"][0] <= 4 * np.sqrt(entry["owned"]) + 8


def test_equal_regions_polar_caps_and_order():
    grid = OctahedralGrid(8)
    owner = equal_regions(grid, 8)  # bands [1, 6, 1]
    assert (owner[:20] == 0).all() and (owner[-20:] == 7).all()  # the polar rows are caps
    with pytest.raises(ValueError, match="nparts"):
        equal_regions(grid, 0)
    with pytest.raises(ValueError, match="nparts"):
        equal_regions(grid, grid.size + 1)


def test_validate_owner():
    good = np.array([0, 1, 1, 2, 0])
    assert validate_owner(good, 5).dtype == np.int32
    with pytest.raises(ValueError, match="shape"):
        validate_owner(good[:4], 5)
    with pytest.raises(ValueError, match=r"0\.\.2"):
        validate_owner(np.array([0, 1, -1, 2, 0]), 5)
    with pytest.raises(ValueError, match="own no node"):
        validate_owner(np.array([0, 2, 2, 2, 0]), 5)
    with pytest.raises(ValueError, match=r"0\.\.1"):
        validate_owner(good, 5, nparts=2)
    with pytest.raises(ValueError, match="integer"):
        validate_owner(good.astype(float), 5)


@pytest.mark.parametrize("n, nparts", [(2, 3), (4, 5), (8, 4)])
def test_halo_ids_match_breadth_first_search(n, nparts):
    mesh = mesh_of(n)
    adj = adjacency(mesh)
    rng = np.random.default_rng(n)
    random_owner = rng.integers(0, nparts, mesh.n_nodes)
    random_owner[:nparts] = np.arange(nparts)
    for owner in (equal_regions(mesh, nparts), random_owner):
        for part in range(nparts):
            for layers in (1, 2):
                expected = bfs_halo(adj, owner, part, layers)
                got = halo_ids(mesh, owner, part, layers)
                assert got.tolist() == expected
            rings = halo_layers(mesh, owner, part, 2)
            assert rings[0].tolist() == bfs_halo(adj, owner, part, 1)
            assert not np.intersect1d(rings[0], rings[1]).size


def test_partition_report():
    mesh = mesh_of(8)
    owner = equal_regions(mesh, 5)
    report = partition_report(mesh, owner)
    assert [r["part"] for r in report] == list(range(5))
    assert sum(r["owned"] for r in report) == mesh.n_nodes
    for r in report:
        assert len(halo_ids(mesh, owner, r["part"], 1)) == r["halo"][0] < r["halo"][1]
        assert len(halo_ids(mesh, owner, r["part"], 2)) == r["halo"][1]
        assert r["part"] not in r["neighbours"] and set(r["neighbours"]) <= set(r["neighbours_all"])
    # Neighbourhood is symmetric for one layer.
    for r in report:
        for q in r["neighbours"]:
            assert r["part"] in report[q]["neighbours"]
    assert partition_report(mesh, np.zeros(mesh.n_nodes, int))[0]["halo"] == [0, 0]


@pytest.mark.parametrize("layers", [1, 2])
def test_local_mesh(layers):
    mesh = mesh_of(8)
    owner = equal_regions(mesh, 3)
    seen_owned = []
    for part in range(3):
        local = LocalMesh.build(mesh, owner, part, layers)
        owned = mesh.grid.patch_order(np.flatnonzero(owner == part))
        halo = halo_ids(mesh, owner, part, layers)
        assert local.global_ids.tolist() == owned.tolist() + halo.tolist()
        assert local.n_owned == len(owned) and local.n_halo == len(halo)
        seen_owned.append(local.owned_ids)
        # Update set: owned nodes, then halo layers below `layers`; edges: all that touch it, those between two
        # owned nodes first, each group by its ends' local positions.
        update_global = local.global_ids[local.update_nodes]
        expected_update = owned if layers == 1 else np.concatenate([owned, halo_layers(mesh, owner, part, 1)[0]])
        assert update_global.tolist() == expected_update.tolist()
        touching = np.isin(mesh.edges, update_global).any(axis=1)
        assert sorted(local.edge_ids.tolist()) == np.flatnonzero(touching).tolist()
        between_owned = (local.edge_nodes < local.n_owned).all(axis=1)
        assert not np.any(np.diff(between_owned.astype(int)) > 0), "an edge between owned nodes after another"
        for group in (between_owned, ~between_owned):
            key = local.edge_nodes[group].min(axis=1) * local.n_local + local.edge_nodes[group].max(axis=1)
            assert (np.diff(key) > 0).all()
        assert (local.global_ids[local.edge_nodes] == mesh.edges[local.edge_ids]).all()
        assert (local.normals == mesh.normals[local.edge_ids]).all()
        assert (local.dual_volumes == mesh.dual_volumes[local.global_ids]).all()
        # Incidences: each update node's edges, all of them, in ascending global edge id.
        ends = np.append(local.inc_starts, len(local.inc_edges))
        for k in range(local.n_update):
            node = local.update_nodes[k]
            inc = slice(ends[k], ends[k + 1])
            gids = local.edge_ids[local.inc_edges[inc]]
            ids = mesh.node_edge_ids[mesh.node_edge_offsets[local.global_ids[node]] :][: len(gids)]
            assert gids.tolist() == ids.tolist() and (np.diff(gids) > 0).all()
            first = local.edge_nodes[local.inc_edges[inc], 0] == node
            assert (local.inc_signs[inc] == np.where(first, 1.0, -1.0)).all()
            assert (local.inc_others[inc] == np.where(first, *local.edge_nodes[local.inc_edges[inc]].T[::-1])).all()
        assert local.n_inc_owned == ends[local.n_owned]
    assert np.sort(np.concatenate(seen_owned)).tolist() == list(range(mesh.n_nodes))
    serial = LocalMesh.serial(mesh)
    assert serial.n_halo == 0 and serial.n_edges == mesh.n_edges and serial.n_update == mesh.n_nodes
    with pytest.raises(ValueError, match="part 3"):
        LocalMesh.build(mesh, owner, 3, 2)
