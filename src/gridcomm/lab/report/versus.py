"""Which seed figure (gridcomm.lab.bench.seeds) stands beside which of our rows, and how the problems differ."""

from __future__ import annotations

from typing import Any

from ...grids.octahedral import grid_points
from ..bench import seeds
from ..bench.seeds import SeedFigure

#: MPDATA on the GPU: our transport -> the seed's figure for the same way of moving halos (Figure 17's text).
#: ``staged`` (halos only, through pinned host memory) has no counterpart: the seed's host path moves whole fields.
MPDATA_BY_TRANSPORT: dict[str, SeedFigure] = {
    "none": seeds.MPDATA_NO_EXCHANGE,
    "ipc": seeds.MPDATA_GPU_EXCHANGE,
    "nccl": seeds.MPDATA_GPU_EXCHANGE,
    "mpi": seeds.MPDATA_GPU_EXCHANGE,
    "host": seeds.MPDATA_HOST_EXCHANGE,
}
#: The spectral transform's transposition: our transport -> the nearest of the seed's Figure 4 methods (staged,
#: through host MPI, against its original host MPI with CPU buffers; nccl has no counterpart).
SPECTRAL_BY_TRANSPORT: dict[str, SeedFigure] = {
    "staged": seeds.SPECTRAL_ORIGINAL,
    "mpi": seeds.SPECTRAL_CUDA_AWARE,
    "ipc": seeds.SPECTRAL_IPC,
}
#: One rank transposes nothing (transport "none"): its step stands beside the seed's fastest, the custom
#: all-to-all.
SPECTRAL_WITHOUT_TRANSPOSITION = seeds.SPECTRAL_IPC
SPECTRAL_GRID = "O640"  # TCO639: cubic octahedral truncation 639 on the octahedral grid O640


def spectral_seed(transport: str) -> SeedFigure | None:
    """The seed's Figure 4 method nearest to a spectral step over ``transport`` (None: no counterpart)."""
    return SPECTRAL_WITHOUT_TRANSPOSITION if transport == "none" else SPECTRAL_BY_TRANSPORT.get(transport)


def seed_text(figure: SeedFigure | None) -> str:
    return figure.text() if figure else "—"


def per_seed(ours_s: float | None, figure: SeedFigure | None) -> float | None:
    """Our time [s] over the seed's (its unit is s), None where either is missing."""
    return ours_s / figure.value if ours_s is not None and figure else None


def joules_range() -> str:
    low, high = seeds.MPDATA_JOULES_PER_STEP
    return f"{low.value:g} to {high.text()} (1 to 8 GPUs)"


def mpdata_problem(row: dict[str, Any], machine: dict[str, Any]) -> str:
    """How one of our MPDATA cases differs from the seed's 1024 test case."""
    theirs = grid_points(seeds.MPDATA_GRID)
    return (
        f"ours: {row['grid']} ({row['nodes']:,} nodes) x {row['levels']} levels on {row['gpus']} x "
        f"{machine['device']}; the seed's: {seeds.MPDATA_GRID} ({theirs:,} nodes, {theirs / row['nodes']:.3g} x "
        f"ours), levels not stated, on V100 GPUs"
    )


def spectral_problem(row: dict[str, Any], gpus: int, machine: dict[str, Any]) -> str:
    """How one of our spectral cases on GPUs differs from the seed's TCO639 test case."""
    theirs = grid_points(SPECTRAL_GRID)
    return (
        f"ours: {row['grid']} T{row['truncation']} ({row['points']:,} points), {row['fields']} fields x "
        f"{row['levels']} levels + 1 (batch {row['batch']}), on {gpus} x {machine['device']}; the seed's: TCO639 "
        f"({SPECTRAL_GRID}, {theirs:,} points, {theirs / row['points']:.3g} x ours), fields and levels not stated, "
        "on 4 V100 GPUs"
    )


def stencil2d_problem(result_where: str, row: dict[str, Any]) -> str:
    return (
        f"ours: n x n points per rank on {result_where} (process grid {' x '.join(map(str, row['proc_grid']))}), "
        f"{row['dtype']}; the seed's: the same n x n per GPU on {seeds.SEED_004_GPUS} K40m GPUs (4 processes), "
        "ghost width 1, boundary 16, dtype not stated"
    )
