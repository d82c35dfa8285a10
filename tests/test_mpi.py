"""The collective checks in tests/mpi_programs/, each program launched under mpiexec (one test per rank count).

A failing check is reported by name with every rank's traceback (see conftest.run_checks).
"""

from __future__ import annotations

import time

import pytest

from conftest import needs_mpiexec

pytestmark = [pytest.mark.mpi, needs_mpiexec]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
def test_exchanges(mpi_checks, nranks):
    """checks_exchange: layout, exchanges vs the serial reference, boundaries, star stencil, several fields,
    start/wait overlap, misuse, repeated exchanges, gather/scatter, the README example (4 ranks)."""
    mpi_checks("checks_exchange", nranks, timeout=180)


@pytest.mark.parametrize("nranks", [2, 4])
def test_bad_input_raises_on_every_rank(mpi_checks, nranks):
    mpi_checks("checks_errors", nranks, timeout=120)


def test_property_exchanges_match_serial_reference(mpi_checks):
    """Hypothesis on 8 ranks: random decompositions, fields, dtypes, orders and transports, bit for bit."""
    start = time.perf_counter()
    mpi_checks("checks_property", 8, timeout=420)
    assert time.perf_counter() - start < 400


def test_timeout_names_the_silent_peer_and_recovers(mpi_checks):
    """2 ranks; rank 1 stays away: rank 0 gets GridcommTimeout after ~1 s, then the exchange completes."""
    start = time.perf_counter()
    summary = mpi_checks("checks_timeout", 2, timeout=120, checks=("check_timeout_names_rank_and_peer_then_completes",))
    (check,) = summary["checks"]
    # One timeout of 1 s per transport (5 of them), plus start-up: bounded well below the launch limit.
    assert check["seconds"] < 30, check
    assert time.perf_counter() - start < 60


def test_timeout_inside_a_with_block_stays_a_timeout(mpi_checks):
    mpi_checks("checks_timeout", 2, timeout=120, checks=("check_timeout_propagates_out_of_a_with_block",))


@pytest.mark.parametrize("check", ["check_wrong_field_shape_on_one_rank", "check_scatter_bad_global_array_on_root"])
def test_bad_input_on_one_rank_does_not_hang_the_others(mpi_checks, check):
    """Only one rank's argument is bad; the run must end (with errors everywhere) instead of hanging. A hang
    is caught by the short wall-clock limit of this launch."""
    mpi_checks("checks_one_rank_errors", 2, timeout=30, checks=(check,))


def test_dropped_decompositions_do_not_leak_communicators(mpi_checks):
    mpi_checks("checks_resources", 1, timeout=120)
