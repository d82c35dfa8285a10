"""Ranks that disagree: a probe of bad input that differs between ranks, across every collective of gridcomm.

Shapes, dtypes, roots, orders, decompositions, closed objects and mismatched collective calls, each on some
ranks only. None may give a silent wrong result, a raw MPI (or NumPy) exception, or an error on one rank only:
every rank must raise the same GridcommError subclass, naming what differs, and the communicator must still
work afterwards (every check ends with a gather and a scatter checked bit for bit).

Run on 2 and 3 ranks (tests/test_mpi.py).
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np
from harness import assert_everywhere, assert_raises_everywhere, gather_problems, random_global, ranks

from gridcomm import (
    ArgumentError,
    ArgumentTypeError,
    Box,
    CartesianDecomposition,
    Communicator,
    FieldError,
    GridcommError,
    HaloExchanger,
    PatternError,
    Transposer,
    UnstructuredDecomposition,
)


def assert_same_error_everywhere(comm: Any, fn: Any, exc_type: type, *words: str | tuple[str, ...]) -> None:
    """Collective: every rank raises ``exc_type`` (a GridcommError subclass) with ``words`` in its message, as
    harness.assert_raises_everywhere checks, and the class raised is the same on every rank."""
    raised: list[str] = []

    def tracked() -> Any:
        try:
            return fn()
        except Exception as error:
            raised.append(type(error).__name__)
            raise

    assert issubclass(exc_type, GridcommError), exc_type
    assert_raises_everywhere(comm, tracked, exc_type, *words)
    names = comm.allgather(raised[0])
    assert_everywhere(comm, None if len(set(names)) == 1 else f"different errors on different ranks: {names}")


def still_works(comm: Any, d: CartesianDecomposition) -> None:
    """Collective: after the errors, a gather and a scatter over ``d`` give the right arrays, bit for bit."""
    rank, size = comm.Get_rank(), comm.Get_size()
    want = random_global(d.global_shape, np.float64, seed=7)
    local = d.zeros()
    local[d.interior_slices] = want[d.global_slices]
    problems = gather_problems(d.gather(local, root=size - 1), want, size - 1, rank)
    back = d.scatter(want if rank == 0 else None)
    if not np.array_equal(back[d.interior_slices], want[d.global_slices]):
        problems.append("scatter from 0: wrong interior")
    assert_everywhere(comm, "; ".join(problems) or None)


def _grid(comm: Any, shape: tuple[int, ...] = (9, 7)) -> CartesianDecomposition:
    return CartesianDecomposition(comm, shape, halo=1, periodic=True)


def _first_rank(comm: Any, mine: Any, others: Any) -> Any:
    """``mine`` on rank 0, ``others`` on every other rank."""
    return mine if comm.Get_rank() == 0 else others


# -- the four cases of issue 32 ------------------------------------------------------------------------------


def check_decompositions_that_differ_are_refused(comm):
    """Different global_shape on rank 0: the constructor raises PatternError everywhere (gather on such
    decompositions returned uninitialised memory on root); so do halo, periodic, proc_grid and stencil."""
    size = comm.Get_size()
    for name, mine, others in [
        ("global_shape", {"global_shape": (8, 6)}, {"global_shape": (9, 6)}),
        ("halo", {"halo": 1}, {"halo": 2}),
        ("periodic", {"periodic": True}, {"periodic": (True, False)}),
        ("proc_grid", {"proc_grid": (size, 1)}, {"proc_grid": (1, size)}),
        ("stencil", {"stencil": "box"}, {"stencil": "star"}),
    ]:
        kwargs = {"global_shape": (12, 12), **_first_rank(comm, mine, others)}
        assert_same_error_everywhere(
            comm, lambda k=kwargs: CartesianDecomposition(comm, **k), PatternError, name, "rank 0", "on rank"
        )
    still_works(comm, _grid(comm))


def check_gather_refuses_what_differs(comm):
    """gather over decompositions that differ between ranks (each built by every rank), of fields whose dtype
    differs, or to roots that differ: PatternError everywhere, naming it (was: garbage on root, no error)."""
    small, large = _grid(comm), _grid(comm, (11, 7))
    d = _first_rank(comm, small, large)
    assert_same_error_everywhere(comm, lambda: d.gather(d.zeros()), PatternError, "gather()", "global_shape", "(9, 7)")
    dtype = _first_rank(comm, np.float64, np.float32)
    assert_same_error_everywhere(
        comm, lambda: small.gather(small.zeros(dtype)), PatternError, "dtype", "float64", "float32"
    )
    root = _first_rank(comm, 0, 1)
    assert_same_error_everywhere(comm, lambda: small.gather(small.zeros(), root=root), PatternError, "root")
    still_works(comm, small)


def check_scatter_refuses_what_differs(comm):
    """scatter over decompositions that differ between ranks, or from roots that differ: PatternError everywhere
    (was: mpi4py's "Message truncated" on one rank only)."""
    small, large = _grid(comm), _grid(comm, (11, 7))
    d = _first_rank(comm, small, large)
    g = np.ones(small.global_shape)
    assert_same_error_everywhere(comm, lambda: d.scatter(g), PatternError, "scatter()", "global_shape")
    root = _first_rank(comm, 0, 1)
    assert_same_error_everywhere(comm, lambda: small.scatter(g, root=root), PatternError, "root")
    still_works(comm, small)


def check_roots_out_of_range_are_refused(comm):
    """gather(a, root=size + 3) and scatter(g, root=-1): ArgumentError everywhere (was: MPI's "Invalid root");
    a root that is not a whole number: ArgumentTypeError; a bad root on rank 0 only: its error everywhere."""
    size = comm.Get_size()
    d = _grid(comm)
    for root in (size, size + 3, -1):
        assert_same_error_everywhere(comm, lambda r=root: d.gather(d.zeros(), root=r), ArgumentError, f"root={root}")
        assert_same_error_everywhere(comm, lambda r=root: d.scatter(None, root=r), ArgumentError, f"root={root}")
    for root in ("0", 0.0, True):
        assert_same_error_everywhere(comm, lambda r=root: d.gather(d.zeros(), root=r), ArgumentTypeError, "root")
    root = _first_rank(comm, size, 0)
    assert_same_error_everywhere(comm, lambda: d.gather(d.zeros(), root=root), ArgumentError, "root")
    still_works(comm, d)


def check_closed_communicator_is_refused(comm):
    """A closed Communicator: every constructor, and gather, scatter and HaloExchanger on a decomposition
    built before the close, raise GridcommError naming it (was: MPI_Ibarrier(MPI_COMM_NULL) failing)."""
    closed = Communicator(comm)
    d = CartesianDecomposition(closed, (9, 7))
    closed.close()
    rank, size = comm.Get_rank(), comm.Get_size()
    source = np.zeros(size)
    made = [
        lambda: CartesianDecomposition(closed, (9, 7)),
        lambda: Communicator(closed),
        lambda: UnstructuredDecomposition(closed, [rank], []),
        lambda: Transposer.from_counts(closed, [1] * size, None, [1] * size, None, source, np.zeros(size)),
        lambda: HaloExchanger(d, d.zeros()),
        lambda: d.gather(d.zeros()),
        lambda: d.scatter(None),
    ]
    for make in made:
        assert_same_error_everywhere(comm, make, GridcommError, "closed", "make a new one")
    still_works(comm, _grid(comm))


# -- the wider probe ----------------------------------------------------------------------------------------


def check_bad_arrays_on_some_ranks(comm):
    """gather of an array of the wrong shape, a list, or an unsupported dtype on rank 0 only; scatter of None,
    a wrong shape or an unsupported dtype on root, or a bad order or xp on rank 0: one error class everywhere."""
    d = _grid(comm)
    for bad, words in [
        (np.zeros((3, 3)), ("shape", "(3, 3)")),
        ([[1.0]], ("not an array",)),
        (np.zeros(d.local_shape, dtype="U2"), ("dtype",)),
    ]:
        a = _first_rank(comm, bad, d.zeros())
        assert_same_error_everywhere(comm, lambda a=a: d.gather(a), FieldError, *words)
    for bad, words in [(None, ("root passed None",)), (np.zeros((2, 2)), ("(2, 2)",)), (np.zeros((9, 7), "O"), ())]:
        assert_same_error_everywhere(comm, lambda b=bad: d.scatter(b), FieldError, *words)
    assert_same_error_everywhere(
        comm, lambda: d.scatter(None, order=_first_rank(comm, "X", "C")), ArgumentError, "order"
    )
    assert_same_error_everywhere(
        comm, lambda: d.scatter(None, xp=_first_rank(comm, "torch", np)), ArgumentTypeError, "xp"
    )
    still_works(comm, d)


def check_mixed_orders_gather_right(comm):
    """Fortran-ordered arrays on some ranks and C-ordered on others: gather and scatter are still exact (the
    order is each rank's own business), and buffers (a memoryview) gather as the arrays they view."""
    rank, size = comm.Get_rank(), comm.Get_size()
    d = _grid(comm)
    want = random_global(d.global_shape, np.int32, seed=11)
    local = d.zeros(np.int32, order="F" if rank % 2 else "C")
    local[d.interior_slices] = want[d.global_slices]
    problems = gather_problems(d.gather(memoryview(local) if rank == 0 else local), want, 0, rank)
    back = d.scatter(want if rank == size - 1 else None, root=size - 1, order="F" if rank == 0 else "C")
    if not np.array_equal(back[d.interior_slices], want[d.global_slices]) or back.dtype != want.dtype:
        problems.append("scatter with mixed orders: wrong interior")
    assert_everywhere(comm, "; ".join(problems) or None)


def check_mismatched_collective_calls(comm):
    """Rank 0 calls one collective, the others another: every rank raises PatternError naming both calls,
    instead of MPI matching a gather with a scatter (or a barrier with a gather) and hanging or corrupting."""
    rank, size = comm.Get_rank(), comm.Get_size()
    d = _grid(comm)
    calls = {
        "gather()": lambda: d.gather(d.zeros()),
        "scatter()": lambda: d.scatter(np.zeros(d.global_shape)),
        "HaloExchanger()": lambda: HaloExchanger(d, d.zeros()),
        "CartesianDecomposition()": lambda: _grid(comm),
        "UnstructuredDecomposition()": lambda: UnstructuredDecomposition(d.comm, [rank], []),
        "Transposer()": lambda: Transposer(d.comm, {}, {}, np.zeros(size), np.zeros(size)),
    }
    names = list(calls)
    for first, second in zip(names, names[1:] + names[:1], strict=True):
        call = calls[_first_rank(comm, first, second)]
        assert_same_error_everywhere(comm, call, PatternError, "different operations", first, second)
    still_works(comm, d)


def check_unstructured_gather_scatter_refuse_what_differs(comm):
    """UnstructuredDecomposition.gather with dtypes, levels or roots that differ between ranks, a root out of
    range, and scatter of a global array too short for the ids or of None on root: one error everywhere."""
    rank, size = comm.Get_rank(), comm.Get_size()
    d = UnstructuredDecomposition(comm, [2 * rank, 2 * rank + 1], [(2 * rank + 2) % (2 * size)])
    assert_same_error_everywhere(
        comm, lambda: d.gather(d.zeros(_first_rank(comm, np.float64, np.int64))), PatternError, "dtype", "int64"
    )
    assert_same_error_everywhere(
        comm, lambda: d.gather(d.zeros(levels=_first_rank(comm, 2, 3))), PatternError, "trailing shape"
    )
    assert_same_error_everywhere(comm, lambda: d.gather(d.zeros(), root=_first_rank(comm, 0, 1)), PatternError, "root")
    assert_same_error_everywhere(comm, lambda: d.gather(d.zeros(), root=size), ArgumentError, "root")
    short = np.zeros(2 * size - 1)
    assert_same_error_everywhere(comm, lambda: d.scatter(short), FieldError, "indexed by global id")
    assert_same_error_everywhere(comm, lambda: d.scatter(None), FieldError, "root passed None")
    want = np.arange(2.0 * size)
    local = d.scatter(array.array("d", want) if rank == 0 else None)  # a buffer, viewed as the array it holds
    got = d.gather(local)
    assert_everywhere(comm, None if rank or np.array_equal(got, want) else f"round trip gave {got}")


@ranks(minimum=2)
def check_transposer_plans_that_differ(comm):
    """A Transposer whose ranks pass sources of different dtypes: PatternError everywhere; one that sends a box
    its peer does not expect: PatternError everywhere."""
    rank, size = comm.Get_rank(), comm.Get_size()
    dtype = _first_rank(comm, np.float64, np.float32)
    assert_same_error_everywhere(
        comm,
        lambda: Transposer.from_counts(
            comm, [1] * size, None, [1] * size, None, np.zeros(size, dtype), np.zeros(size, dtype)
        ),
        PatternError,
        "dtype",
    )
    peer = (rank + 1) % size
    send = {peer: Box((0,), (_first_rank(comm, 2, 1),))}
    recv = {(rank - 1) % size: Box((0,), (1,))}
    assert_same_error_everywhere(
        comm, lambda: Transposer(comm, send, recv, np.zeros(2), np.zeros(2)), PatternError, "disagree"
    )
    still_works(comm, _grid(comm))
