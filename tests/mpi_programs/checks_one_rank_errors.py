"""Collective calls where only one rank's input is bad: every rank must come back with an error.

A rank that raises before a collective while its peers enter it leaves them blocked for good (MPI
collectives have no timeout), which turns one bad argument into a hung job. Each check runs in its own
launch with a short wall-clock limit, so a hang fails that test alone.
"""

from __future__ import annotations

import numpy as np
from harness import assert_everywhere, outcome, ranks

import gridcomm.errors as errors
from gridcomm import CartesianDecomposition, HaloExchanger


def _expect(name: str | None, message: str, wanted: type) -> str | None:
    got = getattr(errors, name, None) if name else None
    if isinstance(got, type) and issubclass(got, wanted):
        return None
    return f"{name or 'no exception'}: {message} (expected {wanted.__name__})"


@ranks(only=[2])
def check_wrong_field_shape_on_one_rank(comm):
    """Rank 1 passes a field of the wrong shape, rank 0 a right one: rank 1 gets FieldError, and rank 0 an
    error too (not a hang in HaloExchanger's collective agreement on the fields)."""
    d = CartesianDecomposition(comm, (8, 6), halo=1)
    field = d.zeros() if comm.Get_rank() == 0 else np.zeros((3, 3))
    name, message = outcome(lambda: HaloExchanger(d, field))
    wanted = errors.FieldError if comm.Get_rank() == 1 else errors.GridcommError
    assert_everywhere(comm, _expect(name, message, wanted))


@ranks(only=[2])
def check_scatter_bad_global_array_on_root(comm):
    """scatter() with a global array of the wrong shape on root: FieldError on root, and an error (not a
    hang in the broadcast that follows) on the other ranks."""
    d = CartesianDecomposition(comm, (8, 6), halo=1)
    name, message = outcome(lambda: d.scatter(np.zeros((5, 5)) if comm.Get_rank() == 0 else None))
    wanted = errors.FieldError if comm.Get_rank() == 0 else errors.GridcommError
    assert_everywhere(comm, _expect(name, message, wanted))
