"""The benchmarks' optional peers: mpi4jax's call where it is installed (skipped elsewhere), and when GHEX may
run on the GPU."""

from __future__ import annotations

import importlib.util
import sys

import pytest


@pytest.mark.skipif(
    importlib.util.find_spec("mpi4jax") is None or importlib.util.find_spec("jax") is None,
    reason="mpi4jax or JAX is not installed (an optional peer: docs/benchmarks.md, Peers)",
)
def test_mpi4jax_alltoall_as_the_benchmark_calls_it(mpi_checks):
    mpi_checks("checks_peers", 2, timeout=180)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"gpu": False, "transport": "MPI"}, "built without GPU support"),
        ({"gpu": True, "transport": "MPI"}, "not CUDA-aware"),  # this MPI takes no device buffers
        ({"gpu": True, "transport": "NCCL"}, None),
    ],
)
def test_ghex_runs_on_the_gpu_only_where_built_so_and_its_transport_takes_device_buffers(monkeypatch, config, says):
    import types

    import gridcomm
    from gridcomm.lab.bench.peers import ghex_gpu_reason

    monkeypatch.setitem(sys.modules, "ghex", types.SimpleNamespace(__config__=config))
    with gridcomm.Communicator() as comm:
        assert not comm.cuda_aware
        reason = ghex_gpu_reason(comm)
    assert reason is None if says is None else says in reason and reason.startswith("GHEX on the GPU: ")
