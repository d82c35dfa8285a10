"""Resource hygiene (tests/mpi_programs/checks_hygiene.py) and a smoke run of ``gridcomm bench soak``.

Each hygiene launch makes, uses once and closes 1,000 HaloExchangers and 1,000 Transposers (plus 20 of each other
resource holder) and fails on growth of memory, file descriptors, threads, shared-memory mappings or MPI objects:
about 4 s on 1 rank and 30 s on 4 ranks sharing 2 cores. The GPU launch runs on the device machine
(benchmarks/gpu_session.sh, stage ``hygiene``). The soak itself (100,000 exchanges) is a benchmark, not a test.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import PROGRAMS, needs_mpiexec
from gpu_support import gpu_count, needs_gpus
from test_cli import gridcomm

pytestmark = [pytest.mark.mpi, needs_mpiexec]

HELD_AFTER_CLOSE = "check_closed_objects_hold_no_buffers"
# Every other check of the program, found by its prefix so that a new one cannot be left out.
LEAK_CHECKS = tuple(
    name
    for name in re.findall(r"^def (check_\w+)\(", (PROGRAMS / "checks_hygiene.py").read_text(), flags=re.MULTILINE)
    if name != HELD_AFTER_CLOSE
)
ON_GPU = {"GRIDCOMM_CHECK_DEVICE": "gpu"}


@pytest.mark.parametrize("nranks", [1, 4])
def test_making_and_closing_exchangers_and_transposers_leaks_nothing(mpi_checks, nranks):
    mpi_checks("checks_hygiene", nranks, timeout=600, checks=LEAK_CHECKS)


def test_a_closed_exchanger_or_transposer_holds_no_buffers(mpi_checks):
    mpi_checks("checks_hygiene", 2, timeout=60, checks=(HELD_AFTER_CLOSE,))


# 2 ranks, one per GPU; where only one GPU is lent they share it, over staged, ipc and (where installed) nvshmem
# (NCCL refuses two ranks on one device).
ON_GPUS = ON_GPU if gpu_count() >= 2 else {**ON_GPU, "GRIDCOMM_CHECK_TRANSPORTS": "staged,ipc,auto,nvshmem"}


@pytest.mark.gpu
@needs_gpus(1)
def test_gpu_exchangers_leak_no_device_memory_mappings_streams_or_events(mpi_checks):
    """The same on 2 ranks over the GPU transports (staged, nccl, ipc, auto; mpi where MPI is CUDA-aware; nvshmem
    where gridcomm[nvshmem] is installed, its symmetric allocations counted too)."""
    mpi_checks("checks_hygiene", 2, timeout=500, checks=LEAK_CHECKS, env=ON_GPUS)


@pytest.mark.gpu
@needs_gpus(1)
def test_a_closed_gpu_exchanger_holds_no_device_memory_or_events(mpi_checks):
    mpi_checks("checks_hygiene", 2, timeout=120, checks=(HELD_AFTER_CLOSE,), env=ON_GPUS)


def test_bench_soak_checks_every_block_and_writes_results_and_plot(tmp_path):
    out = gridcomm("bench", "soak", "--np", "2", "--steps", "300", "--check-every", "100", "--shape", "12,10,8",
                   "--halo", "1", "--out", str(tmp_path))  # fmt: skip
    assert "bitwise checks: 3 of 3 all passed" in out and "first 100 steps" in out
    (path,) = tmp_path.glob("soak-cpu-2r-*.json")
    payload = json.loads(path.read_text())
    assert payload["machine"]["date"] and payload["machine"]["versions"]["mpi"]
    assert payload["config"]["steps"] == 300 and payload["config"]["transport_used"]
    blocks = payload["results"]
    assert [b["step"] for b in blocks] == [99, 199, 299] and all(b["passed"] for b in blocks)
    assert all(b["median_us"] > 0 and len(b["resident_MiB"]) == 2 for b in blocks)
    summary = payload["summary"]
    assert summary["all_checks_passed"] and summary["exchanges"] == 300
    assert path.with_suffix(".png").stat().st_size > 10_000
