"""gridcomm.Transposer (all-to-all(v)) under MPI: tests/mpi_programs/checks_transpose.py on 1, 2, 3, 4 and 8 ranks.

Each launch runs every check that accepts its world size: all-to-all(v)s with zero counts over every CPU
transport, the rows -> columns slab transposition and back, blocks cut differently on each side, start/wait,
repetition, two transposers in flight, the context manager and misuse, bad input (the right error on every
rank), a silent peer (2 ranks), the slab and pencil redistributions (Transposer.slabs / .pencils: arrays of
the wrong shape and disagreeing ranks on 2 and 3 ranks; on 4, a hypothesis property over shapes, axes, grids and
1-4 ranks against the serial transpose) and, on 8 ranks, the hypothesis property against the serial reference.
"""

from __future__ import annotations

import pytest

from conftest import needs_mpiexec

pytestmark = [pytest.mark.mpi, needs_mpiexec]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
def test_transposer(mpi_checks, nranks):
    mpi_checks("checks_transpose", nranks, timeout=400)
