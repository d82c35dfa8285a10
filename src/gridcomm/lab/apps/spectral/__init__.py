"""The spectral-transform dwarf: spherical-harmonic transforms on the octahedral grid (see transform.py)."""

from .distribution import row_bands, row_shares, wavenumber_sets
from .dwarf import DistributedTransform, run_spectral
from .operands import RowLayout
from .transform import SpectralTransform, coefficient_count, coefficient_index

__all__ = [
    "DistributedTransform",
    "RowLayout",
    "SpectralTransform",
    "coefficient_count",
    "coefficient_index",
    "row_bands",
    "row_shares",
    "run_spectral",
    "wavenumber_sets",
]
