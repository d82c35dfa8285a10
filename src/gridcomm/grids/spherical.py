"""Geometry on the unit sphere: positions, great-circle arcs and spherical triangles (all vectorised)."""

from __future__ import annotations

import numpy as np


def lonlat_to_xyz(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Unit vectors (n, 3) of longitudes/latitudes in radians (x: lon 0 on the equator, z: north pole)."""
    coslat = np.cos(lat)
    return np.stack([coslat * np.cos(lon), coslat * np.sin(lon), np.sin(lat)], axis=-1)


def xyz_to_lonlat(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longitude in [0, 2 pi) and latitude, radians, of vectors (n, 3) (any length)."""
    lon = np.mod(np.arctan2(xyz[..., 1], xyz[..., 0]), 2.0 * np.pi)
    lat = np.arctan2(xyz[..., 2], np.hypot(xyz[..., 0], xyz[..., 1]))
    return lon, lat


def normalize(v: np.ndarray) -> np.ndarray:
    """``v`` scaled to unit length along the last axis."""
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot product of (n, 3) arrays, written out (a fixed order of operations)."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def arc_angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Great-circle angle (radians) between unit vectors; atan2 keeps short arcs accurate."""
    return np.arctan2(np.linalg.norm(np.cross(a, b), axis=-1), dot(a, b))


def triangle_area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Signed area (steradians) of spherical triangles with unit-vector corners; positive when a, b, c run
    counter-clockwise seen from outside. Van Oosterom & Strackee (1983): tan(E/2) = a.(b x c) / (1 + a.b +
    b.c + c.a); the triple product is taken of differences, which keeps small triangles accurate."""
    triple = dot(a, np.cross(b - a, c - a))
    return 2.0 * np.arctan2(triple, 1.0 + dot(a, b) + dot(b, c) + dot(c, a))


def arc_normal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integrated unit conormal of the great-circle arc from a to b on the unit sphere: the unit vector
    a x b / |a x b| (normal to the arc's plane, so the same all along the arc) times the arc's angle.
    It points to the left of the direction of travel, seen from outside the sphere."""
    axb = np.cross(a, b)
    sin = np.linalg.norm(axb, axis=-1, keepdims=True)
    angle = np.arctan2(sin[..., 0], dot(a, b))[..., None]
    return axb * (angle / sin)
