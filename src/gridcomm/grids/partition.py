"""Partitions of the octahedral grid: equal-regions parts, user owner arrays, halos and a per-part report."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ArgumentError
from .mesh import MedianDualMesh
from .octahedral import OctahedralGrid


def equal_region_bands(nparts: int) -> list[int]:
    """Regions per latitude band, north to south, of Leopardi's recursive zonal equal-area partition of the
    sphere into ``nparts`` regions (the partition Atlas's EqualRegionsPartitioner uses): one polar cap at
    each pole, collars between them split into as many regions as their area holds, rounded with carry."""
    if nparts < 1:
        raise ArgumentError(f"nparts must be at least 1, got {nparts}")
    if nparts == 1:
        return [1]
    if nparts == 2:
        return [1, 1]
    region_area = 4.0 * math.pi / nparts
    cap = 2.0 * math.asin(math.sqrt(1.0 / nparts))  # colatitude of a cap of one region's area
    n_collars = max(1, round((math.pi - 2.0 * cap) / math.sqrt(region_area)))
    width = (math.pi - 2.0 * cap) / n_collars

    def cap_area(colatitude: float) -> float:
        return 4.0 * math.pi * math.sin(colatitude / 2.0) ** 2

    counts, carry = [], 0.0
    for k in range(1, n_collars + 1):
        ideal = (cap_area(cap + k * width) - cap_area(cap + (k - 1) * width)) / region_area
        counts.append(round(ideal + carry))
        carry += ideal - counts[-1]
    bands = [1, *counts, 1]
    assert sum(bands) == nparts, (nparts, bands)
    return bands


def part_sizes(n_nodes: int, nparts: int) -> np.ndarray:
    """Nodes per part within one of even: floor(V/n) + 1 for the first V mod n parts."""
    return np.full(nparts, n_nodes // nparts, np.int64) + (np.arange(nparts) < n_nodes % nparts)


def equal_regions(grid: OctahedralGrid | MedianDualMesh, nparts: int) -> np.ndarray:
    """Owner (int32 per node) of compact, balanced parts: latitude bands split into sectors.

    As Atlas's EqualRegionsPartitioner: the bands of :func:`equal_region_bands` take consecutive nodes in
    global order (north to south), as many as their parts hold; within a band, nodes are ordered by
    longitude (then north to south) and cut into consecutive sectors. Parts are numbered band by band from
    the north, west to east. Every part has floor(V/n) or ceil(V/n) nodes.
    """
    grid = grid.grid if isinstance(grid, MedianDualMesh) else grid
    V = grid.size
    if not 1 <= nparts <= V:
        raise ArgumentError(f"nparts must be between 1 and the {V} nodes of {grid.name}, got {nparts}")
    sizes = part_sizes(V, nparts)
    bands = equal_region_bands(nparts)
    first_part = np.concatenate([[0], np.cumsum(bands)])
    part_end = np.concatenate([[0], np.cumsum(sizes)])
    band_start = part_end[first_part[:-1]]  # nodes are in global order, north to south
    band_of_node = np.repeat(np.arange(len(bands)), np.diff(np.append(band_start, V)))
    order = np.lexsort((np.arange(V), grid.lon, band_of_node))  # by band, then longitude, then id
    owner = np.empty(V, np.int32)
    owner[order] = np.repeat(np.arange(nparts, dtype=np.int32), sizes)
    return owner


def validate_owner(owner: Any, n_nodes: int, nparts: int | None = None) -> np.ndarray:
    """``owner`` as an int32 array after checking it: length V, values in 0..n-1, every part non-empty.

    ``nparts`` defaults to max(owner) + 1. Raises ArgumentError (a ValueError) saying what is wrong.
    """
    a = np.asarray(owner)
    if a.ndim != 1 or a.shape[0] != n_nodes:
        raise ArgumentError(f"owner must be a 1-D array of one part per node ({n_nodes} nodes), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ArgumentError(f"owner must hold integer part numbers, got dtype {a.dtype}")
    n = int(a.max()) + 1 if nparts is None else int(nparts)
    if a.min() < 0 or a.max() >= n:
        raise ArgumentError(f"owner values must lie in 0..{n - 1}, found {int(a.min())}..{int(a.max())}")
    counts = np.bincount(a, minlength=n)
    if (counts == 0).any():
        empty = np.flatnonzero(counts == 0)
        raise ArgumentError(f"parts {empty[:10].tolist()} own no node; every one of the {n} parts needs at least one")
    return a.astype(np.int32, copy=False)


def neighbour_mask(mesh: MedianDualMesh, mask: np.ndarray) -> np.ndarray:
    """Nodes joined by an edge to a node of ``mask`` (a boolean per node), excluding ``mask`` itself."""
    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    out = np.zeros_like(mask)
    out[j[mask[i]]] = True
    out[i[mask[j]]] = True
    return out & ~mask


def halo_layers(mesh: MedianDualMesh, owner: np.ndarray, part: int, layers: int) -> list[np.ndarray]:
    """Global ids (ascending) of the halo nodes of ``part`` by layer: layer k holds the nodes of other parts
    k edges away from the part (breadth first). Returns ``layers`` arrays."""
    if layers < 1:
        raise ArgumentError(f"layers must be at least 1, got {layers}")
    reached = np.asarray(owner) == part
    if not reached.any():
        raise ArgumentError(f"part {part} owns no node")
    out = []
    for _ in range(layers):
        ring = neighbour_mask(mesh, reached)
        out.append(np.flatnonzero(ring))
        reached |= ring
    return out


def halo_ids(mesh: MedianDualMesh, owner: np.ndarray, part: int, layers: int = 1) -> np.ndarray:
    """Global ids of the halo of ``part``: the nodes of other parts within ``layers`` edges of it, ascending."""
    return np.sort(np.concatenate(halo_layers(mesh, owner, part, layers)))


def partition_report(mesh: MedianDualMesh, owner: np.ndarray, layers: int = 2) -> list[dict[str, Any]]:
    """Per part: owned nodes, halo nodes for 1..``layers`` layers, and the parts owning its halo nodes.

    Each entry: ``part``, ``owned``, ``halo`` (a list: halo sizes for 1, 2, ... layers), ``neighbours``
    (sorted parts owning nodes of its 1-layer halo) and ``neighbours_all`` (of its ``layers``-layer halo).
    """
    owner = validate_owner(owner, mesh.n_nodes)
    report = []
    for part in range(int(owner.max()) + 1):
        rings = halo_layers(mesh, owner, part, layers)
        report.append(
            {
                "part": part,
                "owned": int((owner == part).sum()),
                "halo": np.cumsum([len(r) for r in rings]).tolist(),
                "neighbours": np.unique(owner[rings[0]]).tolist(),
                "neighbours_all": np.unique(owner[np.concatenate(rings)]).tolist(),
            }
        )
    return report
