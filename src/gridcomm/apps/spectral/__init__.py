"""The spectral-transform dwarf: spherical-harmonic transforms on the octahedral grid (see transform.py)."""

from .distribution import row_bands, wavenumber_sets
from .transform import SpectralTransform, coefficient_count, coefficient_index

__all__ = ["SpectralTransform", "coefficient_count", "coefficient_index", "row_bands", "wavenumber_sets"]
