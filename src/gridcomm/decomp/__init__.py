"""Decompositions: which rank owns which part of a grid, and which halo it needs."""

from .cartesian import CartesianDecomposition
from .field import CartesianField
from .procgrid import block_sizes, choose_proc_grid
from .unstructured import UnstructuredDecomposition

__all__ = ["CartesianDecomposition", "CartesianField", "UnstructuredDecomposition", "block_sizes", "choose_proc_grid"]
