"""The collective checks in tests/mpi_programs/, each program launched under mpiexec (one test per rank count).

A failing check is reported by name with every rank's traceback (see conftest.run_checks).
"""

from __future__ import annotations

import os
import re

import pytest

from conftest import PROGRAMS, needs_mpiexec

pytestmark = [pytest.mark.mpi, needs_mpiexec]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
def test_exchanges(mpi_checks, nranks):
    """checks_exchange: layout, exchanges vs the serial reference, boundaries, star stencil, several fields,
    start/wait overlap, misuse, repeated exchanges, gather/scatter, the README example (4 ranks)."""
    mpi_checks("checks_exchange", nranks, timeout=300)


@pytest.mark.parametrize("nranks", [2, 4])
def test_bad_input_raises_on_every_rank(mpi_checks, nranks):
    mpi_checks("checks_errors", nranks, timeout=120)


def test_property_exchanges_match_serial_reference(mpi_checks):
    """Hypothesis on 8 ranks: random decompositions, fields, dtypes, orders and transports, bit for bit."""
    mpi_checks("checks_property", 8, timeout=600)


def test_timeout_names_the_silent_peer_and_recovers(mpi_checks):
    """2 ranks; rank 1 stays away: rank 0 gets GridcommTimeout after ~1 s (each transport's timeout is timed
    in the check), then the exchange completes."""
    mpi_checks("checks_timeout", 2, timeout=120, checks=("check_timeout_names_rank_and_peer_then_completes",))


def test_timeout_inside_a_with_block_stays_a_timeout(mpi_checks):
    mpi_checks("checks_timeout", 2, timeout=120, checks=("check_timeout_propagates_out_of_a_with_block",))


@pytest.mark.parametrize("check", ["check_wrong_field_shape_on_one_rank", "check_scatter_bad_global_array_on_root"])
def test_bad_input_on_one_rank_does_not_hang_the_others(mpi_checks, check):
    """Only one rank's argument is bad; the run must end (with errors everywhere) instead of hanging. A hang
    ends in gridcomm's timeout and abort (no report), or at this launch's wall-clock limit: a failure either way."""
    mpi_checks("checks_one_rank_errors", 2, timeout=120, checks=(check,))


def test_dropped_decompositions_do_not_leak_communicators(mpi_checks):
    mpi_checks("checks_resources", 1, timeout=120)


# -- the unstructured decomposition (tests/mpi_programs/checks_unstructured.py) -------------------------------

UNSTRUCTURED_KNOWN_CASE = "check_o4_equal_regions_two_layers_every_transport"
# Its bad-input checks, found by their prefix so that a new one cannot be left out of the launches below.
UNSTRUCTURED_BAD_INPUT = tuple(
    re.findall(r"^def (check_bad_\w+)\(", (PROGRAMS / "checks_unstructured.py").read_text(), flags=re.MULTILINE)
)


def _unstructured_env() -> dict[str, str]:
    """GRIDCOMM_UNSTRUCTURED_EXAMPLES from this environment (run_mpi passes on no other GRIDCOMM_* variables)."""
    return {k: v for k, v in os.environ.items() if k == "GRIDCOMM_UNSTRUCTURED_EXAMPLES"}


def test_unstructured_exchanges_match_serial_reference(mpi_checks):
    """6 ranks: hypothesis over random meshes (octahedral median duals, random graphs), sparse or permuted ids,
    owners, 1-2 layer or random halos, id orders, fields, dtypes, orders and transports, each example on 1..6
    ranks, bit for bit; then O4 in equal_regions parts over every transport."""
    checks = ("check_exchanges_match_serial_reference", UNSTRUCTURED_KNOWN_CASE)
    mpi_checks("checks_unstructured", 6, timeout=600, checks=checks, env=_unstructured_env())


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_unstructured_bad_input_raises_on_every_rank(mpi_checks, nranks):
    """Bad ids (twice, owned twice, unowned halo, owned and halo, negative, float, 2-D), gather without ids
    0..N-1 and fields of the wrong length: the right error on every rank; and the known O4 case on this many
    ranks. A rank that raises alone leaves its peers blocked in a collective: the launch's limit catches that."""
    assert len(UNSTRUCTURED_BAD_INPUT) >= 9, UNSTRUCTURED_BAD_INPUT
    mpi_checks("checks_unstructured", nranks, timeout=180, checks=(*UNSTRUCTURED_BAD_INPUT, UNSTRUCTURED_KNOWN_CASE))
