"""Fuzzing of the public constructors with hypothesis: every input either works and is bitwise right, or raises
one of gridcomm's documented errors on every rank; never a bare TypeError/ValueError, a NumPy error from deep
inside, a crash or a hang.

The cases, oracles and serial references are in tests/mpi_programs/checks_fuzz.py. Each constructor's property
runs twice: in this process on one rank (hypothesis shrinks a failure right here), and under mpiexec on 4 ranks,
each example on 1 to 4 of them, with faults on one rank or on all. Both draw their examples from
GRIDCOMM_PROPERTY_SEED (the same every run unless it is changed).
"""

from __future__ import annotations

import time

import checks_fuzz_spectral  # noqa: F401 (registers the spectral transform's constructors into CONSTRUCTORS)
import pytest
from checks_fuzz import CONSTRUCTORS, run_case
from harness import examples, property_settings
from hypothesis import given
from hypothesis import strategies as st
from mpi4py import MPI

from conftest import needs_mpiexec

# Examples per constructor in process, as a share of the MPI run's (these are cheaper: no other ranks to wait for).
IN_PROCESS_SHARE = 0.5


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_constructor_fuzzed_on_one_rank(name):
    """The property of checks_fuzz on one rank, in process: COMM_WORLD here is a singleton."""
    constructor = CONSTRUCTORS[name]
    count = examples(round(constructor.examples * IN_PROCESS_SHARE))
    seen = {"examples": 0, "with a fault": 0}

    @property_settings(count)
    @given(st.data())
    def property_holds(data):
        case = data.draw(constructor.cases(1), label="case")
        seen["examples"] += 1
        seen["with a fault"] += case.fault is not None
        sub = MPI.COMM_WORLD.Dup()
        try:
            problems = run_case(sub, case)
        finally:
            sub.Free()
        assert not problems, "\n".join(problems)

    start = time.perf_counter()
    property_holds()
    seconds = time.perf_counter() - start
    print(f"{name}: {seen['examples']} examples ({seen['with a fault']} with a fault) in {seconds:.1f} s")
    assert seen["examples"] >= count // 2, seen  # hypothesis stops early only when it runs out of cases


@pytest.mark.mpi
@needs_mpiexec
def test_constructors_fuzzed_on_1_to_4_ranks(mpi_checks):
    """checks_fuzz on 4 ranks: every constructor's property, each example on 1 to 4 ranks."""
    mpi_checks("checks_fuzz", 4, timeout=600)
    mpi_checks("checks_fuzz_spectral", 4, timeout=300)


def test_property_seed_picks_the_examples_and_a_failure_names_it(monkeypatch):
    """harness.property_settings: the same seed draws the same examples (a failure can be replayed), another seed
    others, and a failure carries the seed that replays it."""
    import harness

    def drawn(seed: int) -> list[int]:
        monkeypatch.setattr(harness, "PROPERTY_SEED", seed)
        seen = []

        @property_settings(20)
        @given(st.integers())
        def record(x):
            seen.append(x)

        record()
        return seen

    assert drawn(5) == drawn(5) != drawn(6)

    @property_settings(20)
    @given(st.integers(0, 100))
    def fails(x):
        assert x < 10

    with pytest.raises(AssertionError) as failure:
        fails()
    notes = "\n".join(failure.value.__notes__)  # with GRIDCOMM_PROPERTY_SCALE set, the note names it too
    assert "GRIDCOMM_PROPERTY_SEED=6" in notes and "set it to replay them" in notes, notes
