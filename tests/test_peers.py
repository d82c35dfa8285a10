"""The GPU benchmarks' optional peers on the CPU, where their libraries are installed (skipped elsewhere)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.skipif(
    importlib.util.find_spec("mpi4jax") is None or importlib.util.find_spec("jax") is None,
    reason="mpi4jax or JAX is not installed (an optional peer: docs/benchmarks.md, Peers)",
)
def test_mpi4jax_alltoall_as_the_benchmark_calls_it(mpi_checks):
    mpi_checks("checks_peers", 2, timeout=180)
