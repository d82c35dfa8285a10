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


@pytest.mark.parametrize("host_wait", ["block", "poll"])
def test_timeout_names_the_silent_peer_and_recovers(mpi_checks, host_wait):
    """2 ranks; rank 1 stays away: rank 0 gets GridcommTimeout after ~1 s (each transport's timeout is timed
    in the check), then the exchange completes. The mpi channels waiting inside MPI (their receives cancelled at
    the timeout and posted again) and polling."""
    mpi_checks(
        "checks_timeout",
        2,
        timeout=120,
        checks=("check_timeout_names_rank_and_peer_then_completes",),
        env={"GRIDCOMM_HOST_WAIT": host_wait},
    )


def test_timeout_inside_a_with_block_stays_a_timeout(mpi_checks):
    mpi_checks("checks_timeout", 2, timeout=120, checks=("check_timeout_propagates_out_of_a_with_block",))


def test_shm_waits_for_its_receivers_before_writing_again(mpi_checks):
    """shm: a sender whose receiver never unpacks times out in its next start(), naming it, then goes on."""
    check = "check_shm_sender_times_out_on_a_receiver_that_never_unpacks"
    mpi_checks("checks_timeout", 2, timeout=120, checks=(check,))


@pytest.mark.parametrize("check", ["check_wrong_field_shape_on_one_rank", "check_scatter_bad_global_array_on_root"])
def test_bad_input_on_one_rank_does_not_hang_the_others(mpi_checks, check):
    """Only one rank's argument is bad; the run must end (with errors everywhere) instead of hanging. A hang
    ends in gridcomm's timeout and abort (no report), or at this launch's wall-clock limit: a failure either way."""
    mpi_checks("checks_one_rank_errors", 2, timeout=120, checks=(check,))


@pytest.mark.parametrize("nranks", [2, 3])
def test_ranks_that_disagree_raise_the_same_error(mpi_checks, nranks):
    """checks_agreement: decompositions, dtypes, roots, orders, closed communicators and collective calls that
    differ between ranks, across every collective: the same GridcommError on every rank, never a silent wrong
    result, a raw MPI error or an error on one rank only. A rank left waiting is caught by the short limit."""
    mpi_checks("checks_agreement", nranks, timeout=90)


def test_oversubscription_warning_and_log_rank_prefix(mpi_checks):
    """checks_conventions: on ranks sharing one CPU rank 0 warns once (and not when silenced); log lines carry
    their rank."""
    mpi_checks("checks_conventions", 2, timeout=60)


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


# -- fields of their own halos and staggering (tests/mpi_programs/checks_staggered.py) ------------------------

STAGGERED_FIXED = tuple(
    re.findall(r"^def (check_(?!mixed_)\w+)\(", (PROGRAMS / "checks_staggered.py").read_text(), flags=re.MULTILINE)
)


def test_staggered_fields_match_serial_reference(mpi_checks):
    """8 ranks: hypothesis over random decompositions (1-8 ranks each) with 1-3 fields of random halos (up to the
    decomposition's), staggering, dtypes, orders and transports in one exchanger, bit for bit against the global
    staggered arrays; gather and scatter round trips."""
    mpi_checks("checks_staggered", 8, timeout=300, checks=("check_mixed_fields_match_serial_reference",))


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_staggered_fields_every_transport_and_bad_input(mpi_checks, nranks):
    """A C-grid's u, v, h over every transport, an unstructured mesh's fields on two row sets, and bad input (a
    field halo wider than the decomposition's, on one rank or all; an unknown axis; a staggered shape that does not
    fit; ranks that choose differently; descriptor lists that do not fit): the same error on every rank."""
    assert len(STAGGERED_FIXED) >= 8, STAGGERED_FIXED
    mpi_checks("checks_staggered", nranks, timeout=120, checks=STAGGERED_FIXED)


# -- a transport per group of peers (tests/mpi_programs/checks_nodes.py) -------------------------------------


@pytest.mark.parametrize("per_node", ["2", "1", ""], ids=["2 per node", "1 per node", "one node"])
def test_transports_per_peer(mpi_checks, per_node):
    """4 ranks of one host, declared nodes of 2 and of 1 rank (GRIDCOMM_RANKS_PER_NODE), or one node: the peers on
    a rank's node and the others served each by its own transport, per auto, per mapping, bit for bit; bad
    mappings and disagreeing node sizes refused on every rank."""
    mpi_checks("checks_nodes", 4, timeout=180, env={"GRIDCOMM_RANKS_PER_NODE": per_node})


DETERMINISTIC = {
    "checks_exchange": (),  # the whole structured suite
    "checks_transpose": ("check_alltoallv_every_transport", "check_blocks_split_differently_on_each_side",
                         "check_slab_transposition_rows_to_columns_and_back", "check_boxes_cma_cannot_describe"),
    "checks_unstructured": ("check_o4_equal_regions_two_layers_every_transport",),
    "checks_staggered": ("check_c_grid_fields_every_transport", "check_unstructured_fields_of_different_row_sets"),
}  # fmt: skip


@pytest.mark.parametrize("program", sorted(DETERMINISTIC))
def test_suites_across_declared_nodes(mpi_checks, program):
    """The structured suite, and the transposition and unstructured checks of every transport, on 4 ranks
    declared 2 nodes of 2: auto mixes transports, and every result equals the serial reference bit for bit."""
    mpi_checks(program, 4, timeout=240, checks=DETERMINISTIC[program], env={"GRIDCOMM_RANKS_PER_NODE": "2"})
