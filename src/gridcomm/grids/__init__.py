"""Grids and meshes of distributed grid codes: ECMWF's octahedral reduced Gaussian grid, its median-dual
mesh on the sphere, partitions into parts with halos, and a part's local mesh."""

from .local import LocalMesh
from .mesh import EARTH_RADIUS_M, MedianDualMesh
from .octahedral import OctahedralGrid, parse_grid_name
from .partition import equal_regions, halo_ids, halo_layers, partition_report, validate_owner

__all__ = [
    "EARTH_RADIUS_M",
    "LocalMesh",
    "MedianDualMesh",
    "OctahedralGrid",
    "equal_regions",
    "halo_ids",
    "halo_layers",
    "parse_grid_name",
    "partition_report",
    "validate_owner",
]
