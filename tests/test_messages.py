"""Error messages name the argument and the rank they are about (in one process; the same errors on several
ranks are checked under MPI by tests/mpi_programs/checks_*.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import gridcomm
from gridcomm import DecompositionError, FieldError
from gridcomm.decomp.unstructured import _agree


def test_a_generator_of_fields_is_named_as_the_fields_argument(decompose):
    """HaloExchanger(g, (a for ...)) said "field 0 is a generator": it is the fields argument that is one."""
    grid = decompose((8, 8), halo=1)
    a = grid.zeros()
    with pytest.raises(FieldError, match=r"^fields is a generator, not an array or a list of arrays; pass a list"):
        gridcomm.HaloExchanger(grid, (x for x in [a]))


def test_a_generator_of_sources_is_named_as_the_sources_argument():
    rows = np.zeros((4, 4))
    with pytest.raises(FieldError, match=r"^sources is a generator"):
        gridcomm.Transposer(None, {}, {}, (x for x in [rows]), [np.zeros((4, 4))])


def _ranks_finding(*problems):
    """A stand-in communicator whose ranks found ``problems`` ((error class name, message); None: none)."""
    return SimpleNamespace(mpi=SimpleNamespace(allgather=lambda _: list(problems)))


def test_unstructured_errors_say_which_ranks_found_the_others():
    """'(and 1 more)' named neither the rank nor what it found."""
    with pytest.raises(DecompositionError) as error:
        found = [("DecompositionError", "rank 1: owned_global_ids lists id 4 more than once"),
                 ("ArgumentTypeError", "ids out of range")]  # fmt: skip
        _agree(_ranks_finding(None, *found), None)
    assert str(error.value) == (
        "rank 1: owned_global_ids lists id 4 more than once (and 1 more, found by rank(s) 2; the next: rank 2: ids "
        "out of range)"
    )


def test_an_unstructured_error_that_names_no_rank_gets_the_rank_that_found_it():
    with pytest.raises(DecompositionError, match=r"^rank 1: halo_global_ids holds a negative id \(-1\)$"):
        _agree(_ranks_finding(None, ("DecompositionError", "halo_global_ids holds a negative id (-1)")), None)
