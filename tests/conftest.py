"""Shared test helpers: running MPI programs under mpiexec and reading their per-check reports."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from gridcomm import launch

TESTS = Path(__file__).resolve().parent
PROGRAMS = TESTS / "mpi_programs"
RUNNER = PROGRAMS / "runner.py"

# The in-process tests share the MPI programs' helpers (tests/mpi_programs/harness.py).
sys.path.insert(0, str(PROGRAMS))

from harness import PROPERTY_SCALE, PROPERTY_SEED, examples, replay_hint  # noqa: E402 (found through the path above)
from hypothesis import seed, settings  # noqa: E402

# Seconds a rank waits for a silent peer inside gridcomm before GridcommTimeout (keeps hangs short), times the
# ranks each core serves (8 ranks on 2 cores: 120 s): ranks sharing the cores of a machine that other jobs keep
# busy can be kept from a healthy peer for long. A hang still ends well within each launch's wall-clock limit.
RANK_TIMEOUT_S = 30

# Commands the tests start themselves (gridcomm run --np 4, gridcomm bench ...) oversubscribe 2 cores too.
os.environ.setdefault("GRIDCOMM_OVERSUBSCRIBE_OK", "1")
# The in-process property tests: a fixed number of examples (GRIDCOMM_PROPERTY_SCALE times the test's own, or
# 100), no deadline (a busy machine is slow, not wrong), no example database (each run is what its seed says).
# The seed is applied in pytest_collection_modifyitems; the MPI programs' run_property does the same.
settings.register_profile("gridcomm", max_examples=examples(100), deadline=None, database=None, print_blob=True)
settings.load_profile("gridcomm")


def pytest_collection_modifyitems(items):
    """Every hypothesis test draws its examples from GRIDCOMM_PROPERTY_SEED (harness.PROPERTY_SEED)."""
    for item in items:
        test = getattr(item, "obj", None)
        if getattr(test, "is_hypothesis_test", False):
            seed(PROPERTY_SEED)(test)


def pytest_report_header():
    return f"property tests: GRIDCOMM_PROPERTY_SEED={PROPERTY_SEED}"


def pytest_terminal_summary(terminalreporter):
    if terminalreporter.stats.get("failed"):
        terminalreporter.write_line(f"Property tests: {replay_hint()}.")


def find_mpiexec() -> str | None:
    """The mpiexec that matches mpi4py (gridcomm.launch.find_mpiexec: the venv's, GRIDCOMM_MPIEXEC, PATH)."""
    try:
        return launch.find_mpiexec()
    except FileNotFoundError:
        return None


MPIEXEC = find_mpiexec()

needs_mpiexec = pytest.mark.skipif(
    MPIEXEC is None, reason="no mpiexec beside sys.executable or on PATH (pip install mpich)"
)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (ranks run in sessions of their own, so not in mpiexec's group)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _dump_stacks(proc: subprocess.Popen) -> None:
    """Ask every rank (tests/mpi_programs/runner.py registers faulthandler on SIGUSR1) for its stacks."""
    for pid in _descendants(proc.pid):
        try:
            if "runner.py" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGUSR1)
        except OSError:
            continue
    time.sleep(1.5)  # let them write before the kill; only on the failure path


def run_mpi(
    nranks: int,
    argv: Sequence[str],
    timeout: float,
    env: dict[str, str] | None = None,
    launcher_args: Sequence[str] = (),
) -> tuple[int, str]:
    """Run ``python argv...`` on ``nranks`` ranks (oversubscribed) under mpiexec, given ``launcher_args`` too;
    (returncode, output).

    stdout and stderr are merged and decoded leniently (MPICH output may hold NUL bytes). On passing
    ``timeout`` seconds of wall time (times GRIDCOMM_PROPERTY_SCALE where that is above 1) the whole process
    group is killed and the test fails with the output.
    """
    if MPIEXEC is None:
        pytest.skip("no mpiexec beside sys.executable or on PATH (pip install mpich)")
    timeout *= max(1.0, PROPERTY_SCALE)  # a harder search (more examples) takes longer
    # Nothing from the caller's environment may change what the checks see (GRIDCOMM_PROPERTY_* excepted:
    # they tune the property tests, see tests/mpi_programs/harness.py).
    full_env = launch.rank_environment(
        nranks,
        {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_")) or k.startswith("GRIDCOMM_PROPERTY_")
        },
    )
    per_core = max(1, math.ceil(nranks / len(os.sched_getaffinity(0))))
    # The suite runs more ranks than this machine has cores on purpose: no OversubscriptionWarning in outputs.
    full_env.update(
        {
            "GRIDCOMM_TIMEOUT": str(RANK_TIMEOUT_S * per_core),
            "GRIDCOMM_OVERSUBSCRIBE_OK": "1",
            "GRIDCOMM_PROPERTY_SEED": str(PROPERTY_SEED),  # resolved here when it was "random"
            "PYTHONUNBUFFERED": "1",
            "PYTHONHASHSEED": "0",
        }
    )
    full_env.update(env or {})
    cmd = launch.mpiexec_command(nranks, [sys.executable, *argv], MPIEXEC)  # Open MPI needs --oversubscribe
    cmd[1:1] = launcher_args
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, cwd=TESTS.parent,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ranks = _descendants(proc.pid)
        _dump_stacks(proc)
        launch.stop_process_group(proc, 3.0)  # SIGINT first: hydra then cleans its ranks up
        for pid in ranks:  # anything hydra left behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate()
        text = out.decode("utf-8", errors="replace")
        pytest.fail(
            f"{' '.join(cmd[1:])}: still running after {timeout:.0f} s of wall time (killed; a hang or a "
            f"deadlock). Output:\n{text[-12000:]}",
            pytrace=False,
        )
    return proc.returncode, out.decode("utf-8", errors="replace")


def run_checks(
    program: str,
    nranks: int,
    tmp_path: Path,
    timeout: float = 120,
    checks: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> dict:
    """Run the ``check_*`` functions of tests/mpi_programs/<program>.py on ``nranks`` ranks.

    Fails the calling test with every failed check's name, ranks and traceback; returns the summary.
    """
    report = tmp_path / f"{program}-{nranks}.json"
    start = time.perf_counter()
    rc, out = run_mpi(
        nranks, [str(RUNNER), program, *checks], timeout, {**(env or {}), "GRIDCOMM_CHECK_REPORT": str(report)}
    )
    seconds = time.perf_counter() - start
    if not report.exists():
        pytest.fail(
            f"{program} on {nranks} rank(s) exited {rc} without a report. Output:\n{out[-12000:]}", pytrace=False
        )
    summary = json.loads(report.read_text())
    for check in summary["checks"]:
        print(f"{program}[{nranks}] {check['name']}: {check['status']} ({check['seconds']:.2f} s)")
    print(f"{program}[{nranks}]: {seconds:.1f} s wall")
    failed = [c for c in summary["checks"] if c["status"] == "failed"]
    if failed:
        parts = []
        for check in failed:
            by_text: dict[str, list[int]] = {}
            for f in check["failures"]:
                by_text.setdefault(f["traceback"], []).append(f["rank"])
            for text, where in by_text.items():
                parts.append(f"--- {check['name']} failed on rank(s) {where} of {nranks}:\n{text}")
        names = ", ".join(c["name"] for c in failed)
        pytest.fail(
            f"{program} on {nranks} rank(s): {len(failed)} check(s) failed: {names}\n" + "\n".join(parts), pytrace=False
        )
    if rc != 0:
        pytest.fail(
            f"{program} on {nranks} rank(s): every check passed but mpiexec exited {rc}:\n{out[-6000:]}", pytrace=False
        )
    if summary["checks"] and all(c["status"] == "skipped" for c in summary["checks"]):
        pytest.fail(f"{program} on {nranks} rank(s): every check skipped itself; drop this rank count", pytrace=False)
    return summary


@pytest.fixture
def mpi_checks(tmp_path):
    """``mpi_checks(program, nranks, timeout=..., checks=(...))``: run an MPI check program (see run_checks)."""

    def run(program: str, nranks: int, **kwargs):
        return run_checks(program, nranks, tmp_path, **kwargs)

    return run


@pytest.fixture
def decompose():
    """``decompose(global_shape, ...)``: a CartesianDecomposition over COMM_WORLD (in process: one rank). The
    kept Communicator is closed afterwards, so cached facts (CUDA-awareness, NCCL) never leak between tests."""
    from gridcomm import CartesianDecomposition

    made = []

    def make(*args, **kwargs):
        d = CartesianDecomposition(None, *args, **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.comm.close()
