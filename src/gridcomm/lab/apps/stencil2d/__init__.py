"""The 2-D Jacobi dwarf of the NVSHMEM stencil study (seed 004): a five-point star stencil on n x n points per
rank, fixed outer boundary, halo exchanged every step, on the CPU (NumPy) or the GPU (CuPy and one CUDA kernel),
in three modes: ``traditional`` (exchange, then compute), ``overlapped`` (interior computed while the exchange
flies) and ``graph`` (the whole step captured in CUDA graphs and replayed). Results are bitwise those of a serial
NumPy run of the same global grid."""

from .config import CPU_MODES, DTYPES, MODES, StencilError
from .driver import run_stencil2d
from .initial import DEFAULT_SEED, initial_block
from .reference import compare, reference_run
from .regions import Rect, split_region, update_region
from .solver import Stencil2D, process_grid

__all__ = [
    "CPU_MODES",
    "DEFAULT_SEED",
    "DTYPES",
    "MODES",
    "Rect",
    "Stencil2D",
    "StencilError",
    "compare",
    "initial_block",
    "process_grid",
    "reference_run",
    "run_stencil2d",
    "split_region",
    "update_region",
]
