"""Maps of the tracer: before and after (and the exact solution), saved as a PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ....grids.octahedral import OctahedralGrid


def plot_tracer(
    grid: OctahedralGrid | str | int,
    initial: np.ndarray,
    final: np.ndarray,
    path: str | Path,
    *,
    exact: np.ndarray | None = None,
    level: int = 0,
    title: str | None = None,
) -> Path:
    """Filled-contour maps (longitude-latitude, degrees) of ``initial`` and ``final`` (and ``final - exact``
    when ``exact`` is given), fields by global id, (V,) or (V, levels) (``level`` is shown). Returns the path."""
    from ....extras import figure

    grid = grid if isinstance(grid, OctahedralGrid) else OctahedralGrid(grid)
    # Points near longitude 0 appear again at 360, so that the map closes across the date line.
    wrap = np.flatnonzero(grid.lon < np.radians(30.0))
    lon = np.concatenate([np.degrees(grid.lon), np.degrees(grid.lon[wrap]) + 360.0])
    lat = np.degrees(np.concatenate([grid.lat, grid.lat[wrap]]))

    def pick(a: np.ndarray) -> np.ndarray:
        values = a[:, level] if a.ndim == 2 else a
        return np.concatenate([values, values[wrap]])

    panels = [("initial", pick(initial), "viridis"), ("final", pick(final), "viridis")]
    if exact is not None:
        panels.append(("final - exact", pick(final) - pick(exact), "RdBu_r"))
    fig = figure(figsize=(5.0 * len(panels), 3.2), layout="constrained")
    vmax = max(float(np.abs(p[1]).max()) for p in panels[:2]) or 1.0
    for k, (name, values, cmap) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        if cmap == "RdBu_r":
            span = float(np.abs(values).max()) or 1.0
            levels = np.linspace(-span, span, 21)
        else:
            levels = np.linspace(min(0.0, float(values.min())), vmax, 21)
        filled = ax.tricontourf(lon, lat, values, levels=levels, cmap=cmap)
        fig.colorbar(filled, ax=ax, shrink=0.8)
        ax.set(title=name, xlabel="longitude (deg)", ylabel="latitude (deg)", xlim=(0, 360), ylim=(-90, 90))
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
