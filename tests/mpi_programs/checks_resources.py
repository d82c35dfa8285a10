"""MPI resources: building and dropping decompositions must not use up the library's communicators.

Run on 1 rank, in a process of its own (a leak here would break every later test in the same process).
"""

from __future__ import annotations

import gc

from harness import ranks

from gridcomm import CartesianDecomposition

# MPICH runs out of communicator context ids after about 2000 communicators alive at once.
ROUNDS = 3000


@ranks(only=[1])
def check_dropped_decompositions_release_their_communicators(comm):
    """A decomposition over an mpi4py communicator duplicates it; one that is no longer referenced must not
    keep that duplicate forever (an application re-decomposing in a loop would stop after ~2000)."""
    for i in range(ROUNDS):
        try:
            d = CartesianDecomposition(comm, (4,), halo=1)
        except Exception as exc:
            raise AssertionError(
                f"CartesianDecomposition number {i + 1} failed after the earlier ones were dropped: {exc}"
            ) from None
        d.zeros()
        del d
        if i % 100 == 0:
            gc.collect()
