"""Validation mode: a corrupted halo is caught and named (field, peer, elements); right exchanges pass.

Run on 2 and 3 ranks. The corruption is made on purpose after the unpack, where nothing else would see it.
"""

from __future__ import annotations

import os

import numpy as np
from harness import TRANSPORTS, assert_everywhere, ranks

from gridcomm import CartesianDecomposition, HaloExchanger, Transposer, UnstructuredDecomposition, ValidationError


def _fields(d):
    """A float64 C-ordered and an int32 Fortran-ordered field, interiors numbered by global position."""
    f = d.zeros(np.float64)
    g = np.asfortranarray(d.zeros(np.int32))
    d.interior(f)[...] = d.comm.rank + np.arange(np.prod(d.interior_shape)).reshape(d.interior_shape) / 7
    d.interior(g)[...] = 1000 * d.comm.rank + np.arange(np.prod(d.interior_shape)).reshape(d.interior_shape)
    return [f, g]


def _corrupt_after_unpack(exchanger, field, index) -> None:
    """From now on, every unpack of ``exchanger`` ends by changing one element of ``field`` at ``index``."""
    unpack = exchanger.packer.unpack

    def corrupted() -> None:
        unpack()
        field[index] += 1

    exchanger.packer.unpack = corrupted


def _corrupted_exchange_problems(label, exchanger, field, index, corrupter, rank, wanted) -> list[str]:
    """Rank ``corrupter`` changes ``field[index]`` after every unpack from now on: the next exchange must raise
    ValidationError there, its message holding every word of ``wanted``, and pass on every other rank."""
    if rank == corrupter:
        _corrupt_after_unpack(exchanger, field, index)
    try:
        exchanger.exchange()
    except ValidationError as error:
        text = str(error)
        if rank != corrupter:
            return [f"{label}: rank {rank} raised although nothing was corrupted there: {text}"]
        missing = [w for w in wanted if w not in text]
        return [f"{label}: the message lacks {missing}: {text}"] if missing else []
    return [f"{label}: no ValidationError although a received element was changed"] if rank == corrupter else []


@ranks(minimum=2, maximum=3)
def check_corrupted_halo_is_named(comm):
    """Rank 0 corrupts one cell of field 1's halo received from its right neighbour (rank 1) after each
    unpack: its wait() raises ValidationError naming field 1, rank 1 and a box holding that cell; the other
    ranks' exchanges pass; with the corruption gone the next exchange passes everywhere."""
    rank = comm.Get_rank()
    problems = []
    for name, transport in TRANSPORTS.items():
        d = CartesianDecomposition(comm, (6 * comm.Get_size(), 5, 4), halo=1, proc_grid=(comm.Get_size(), 1, 1))
        fields = _fields(d)
        ex = HaloExchanger(d, fields, transport, validate=True)
        ex.exchange()
        cell = (d.local_shape[0] - 1, 2, 3)  # the high-x halo, received from rank 1
        unpack = ex.packer.unpack
        wanted = ["field 1", "from rank 1", "rank 0:", "halo exchange #2", f"{cell[0]}:{cell[0] + 1}"]
        problems += _corrupted_exchange_problems(name, ex, fields[1], cell, 0, rank, wanted)
        ex.packer.unpack = unpack
        ex.exchange()  # right again
        ex.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2, maximum=3)
def check_environment_turns_validation_on(comm):
    """GRIDCOMM_VALIDATE=1 validates exchangers built without validate=...; validate=False overrides it."""
    d = CartesianDecomposition(comm, (4 * comm.Get_size(),), halo=1, periodic=True)
    os.environ["GRIDCOMM_VALIDATE"] = "1"
    try:
        with HaloExchanger(d, d.zeros()) as on, HaloExchanger(d, d.zeros(), validate=False) as off:
            on.exchange()
            off.exchange()
            problem = None if (on.validate, off.validate) == (True, False) else (on.validate, off.validate)
    finally:
        del os.environ["GRIDCOMM_VALIDATE"]
    assert_everywhere(comm, problem and f"validate was {problem}, expected (True, False)")


@ranks(minimum=2, maximum=3)
def check_unstructured_and_transposer_validate(comm):
    """Validated unstructured exchanges (rows with levels) and transpositions pass when right and name the
    peer when a received element is changed."""
    rank, size = comm.Get_rank(), comm.Get_size()
    problems = []
    # A ring of 4 nodes per rank; each rank's halo is the first node of the next rank.
    owned = np.arange(4 * rank, 4 * rank + 4)
    halo = np.array([(4 * (rank + 1)) % (4 * size)])
    d = UnstructuredDecomposition(comm, owned, halo)
    field = np.zeros((5, 3))
    field[:4] = owned[:, None] + np.arange(3) / 10
    with HaloExchanger(d, field, validate=True) as ex:
        ex.exchange()
        wanted = ["from rank 1", "(4, 2) (row 0 of 1"]
        problems += _corrupted_exchange_problems("unstructured", ex, field, (4, 2), 0, rank, wanted)
    source = np.arange(2 * size, dtype=np.int64) + 100 * rank
    dest = np.zeros(2 * size, dtype=np.int64)
    with Transposer.from_counts(comm, [2] * size, None, [2] * size, None, source, dest, validate=True) as t:
        t.exchange()
        want = np.array([100 * r + 2 * rank + k for r in range(size) for k in range(2)])
        if not np.array_equal(dest, want):
            problems.append(f"transposer: {dest.tolist()}, expected {want.tolist()}")
        wanted = ["from rank 0", "(0,) of box [0:2]"]
        problems += _corrupted_exchange_problems("transposer", t, dest, 0, 1, rank, wanted)
    assert_everywhere(comm, "\n".join(problems) or None)
