"""The MPDATA dwarf of ESCAPE: a tracer advected by MPDATA on the median-dual mesh of the octahedral grid,
one rank or many (two halo exchanges per step), with Williamson's cosine-bell test case."""

from .cfl import COURANT_LIMIT, check_cfl, courant_numbers, dt_for_courant, max_courant
from .driver import Setup, benchmark_mpdata, run_mpdata, setup_mpdata
from .plot import plot_tracer
from .scheme import Mpdata
from .tables import MeshTables, node_edge_table
from .testcase import CosineBell, error_norms, total_mass

__all__ = [
    "COURANT_LIMIT",
    "CosineBell",
    "MeshTables",
    "Mpdata",
    "Setup",
    "benchmark_mpdata",
    "check_cfl",
    "courant_numbers",
    "dt_for_courant",
    "error_norms",
    "max_courant",
    "node_edge_table",
    "plot_tracer",
    "run_mpdata",
    "setup_mpdata",
    "total_mass",
]
