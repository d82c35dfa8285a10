"""The GPU benchmarks' optional peers, run on the CPU where their libraries are installed: mpi4jax's all-to-all as
``bench alltoall`` calls it (lab/bench/ceilings.py), with JAX's CPU device standing for the rank's GPU and a CuPy
runtime that only names the current device. Run by tests/test_peers.py, which skips where mpi4jax is missing."""

from __future__ import annotations

import sys
import types

from harness import assert_everywhere, ranks

import gridcomm


def _cpu_for_gpu() -> None:
    """JAX's CPU device where the peer asks for the rank's GPU; a CuPy runtime whose current device is 0."""
    import jax
    import mpi4jax

    devices = jax.devices
    jax.devices = lambda kind=None: devices("cpu") if kind == "gpu" else devices(kind)
    mpi4jax.has_cuda_support = lambda: True
    runtime = types.SimpleNamespace(getDevice=lambda: 0, setDevice=lambda device: None)
    sys.modules["cupy"] = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


@ranks(minimum=2)
def check_mpi4jax_alltoall_delivers_every_block(comm):
    """Every rank's block arrives at every rank (the peer checks it once), and a timed call runs again."""
    from gridcomm.lab.bench.ceilings import mpi4jax_alltoall, mpi4jax_reason

    _cpu_for_gpu()
    with gridcomm.Communicator(comm) as gc:
        reason = mpi4jax_reason(gc)
        problem = None if reason is None else f"refused: {reason}"
        if problem is None:
            for nbytes in (1, 4096):
                mpi4jax_alltoall(gc, nbytes)()
    assert_everywhere(comm, problem)
