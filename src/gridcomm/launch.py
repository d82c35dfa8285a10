"""Starting ranks: finding mpiexec, and running a command under it for users who do not know it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# Variables that MPI launchers (MPICH's hydra, Open MPI, PMIx, Slurm) set in every rank they start.
_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID")


def under_launcher() -> bool:
    """True when this process was started by mpiexec/mpirun/srun (so MPI_COMM_WORLD may have peers)."""
    return any(v in os.environ for v in _LAUNCHER_VARIABLES)


# Where each launcher puts this process's rank and the job's size.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")


def launcher_rank() -> tuple[int, int] | None:
    """(rank, ranks) as the launcher that started this process tells them, without initialising MPI; None
    outside a launcher (or where it tells neither)."""

    def first(names: Sequence[str]) -> int | None:
        return next((int(os.environ[n]) for n in names if os.environ.get(n, "").isdigit()), None)

    rank, size = first(_RANK_VARIABLES), first(_SIZE_VARIABLES)
    return None if rank is None or size is None else (rank, size)


def find_mpiexec() -> str:
    """The mpiexec that matches mpi4py's MPI: ``GRIDCOMM_MPIEXEC`` when set (the user's choice wins), then the
    one beside this Python (the venv's, from the ``mpich`` wheel), then mpiexec or mpirun on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    candidates = [
        os.environ.get("GRIDCOMM_MPIEXEC"),
        str(beside) if beside.exists() else None,
        shutil.which("mpiexec"),
        shutil.which("mpirun"),
    ]
    for candidate in candidates:
        if candidate:
            return candidate
    raise FileNotFoundError(
        "no mpiexec found: install MPICH (pip install mpich, part of gridcomm[test]) or your site's MPI, "
        "or point GRIDCOMM_MPIEXEC at its launcher"
    )


def mpiexec_command(nprocs: int, command: Sequence[str], mpiexec: str | None = None) -> list[str]:
    """The argument list that runs ``command`` on ``nprocs`` ranks of this machine."""
    if nprocs < 1:
        raise ValueError(f"--np {nprocs}: the number of ranks must be at least 1")
    launcher = mpiexec or find_mpiexec()
    args = [launcher, "-n", str(nprocs)]
    if _is_open_mpi(launcher):
        # Open MPI binds each rank to one core when it starts 2 or fewer; the threads a rank's libraries start
        # then share that core with it (NVSHMEM's proxy polls without sleeping: every wait of the rank's own
        # thread then lasted a scheduler tick, 4 ms; docs/nvshmem.md). MPICH binds nothing unless asked.
        args[1:1] = ["--oversubscribe", "--bind-to", "none"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return args + list(command)


def _is_open_mpi(launcher: str) -> bool:
    try:
        out = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out or "OpenRTE" in out


def with_abort_on_error(command: Sequence[str]) -> list[str]:
    """``python script.py ...`` becomes ``python -m mpi4py script.py ...``: an uncaught exception on one rank
    then aborts the whole job instead of leaving the other ranks waiting for it forever."""
    command = list(command)
    if command and Path(command[0]).name.startswith("python") and len(command) > 1 and command[1].endswith(".py"):
        return [command[0], "-m", "mpi4py", *command[1:]]
    return command


#: What to do for a rank bound to one CPU, whose libraries' threads (NVSHMEM's polling proxy) then share it.
ONE_CPU_ADVICE = (
    "launch with at least 2 cores per rank (Open MPI: mpirun --bind-to none, or --map-by slot:PE=2; "
    "Slurm: --cpus-per-task=2)"
)

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def rank_environment(nprocs: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for ``nprocs`` ranks on this machine: unless the user set a thread count, each rank's
    BLAS and OpenMP get an equal share of the cores (at least 1). Every rank's BLAS would otherwise start a
    thread per core, and on 2 cores 2 ranks ran a matrix product 25 times slower than with one thread each."""
    env = dict(os.environ if environ is None else environ)
    if not any(v in env for v in _THREAD_VARIABLES):
        share = str(max(1, (os.cpu_count() or 1) // nprocs))
        env.update(dict.fromkeys(_THREAD_VARIABLES, share))
    return env


def run_under_mpiexec(nprocs: int, command: Sequence[str]) -> int:
    """Run ``command`` on ``nprocs`` ranks, streaming its output; returns its exit status."""
    args = mpiexec_command(nprocs, with_abort_on_error(command))
    env = rank_environment(nprocs)
    if sys.stdout.isatty() and "COLUMNS" not in env:  # the ranks write into mpiexec's pipes: tell them its width
        env["COLUMNS"] = str(shutil.get_terminal_size().columns)
    return subprocess.run(args, env=env).returncode


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """End ``proc`` (started with ``start_new_session=True``, so it leads a process group) and everything in its
    group: SIGINT first, which lets mpiexec end its ranks, then SIGKILL after ``grace_s`` seconds."""
    for sig, grace in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def relaunch_self(nprocs: int) -> int:
    """Run this same ``gridcomm`` command line again on ``nprocs`` ranks; returns its exit status."""
    return run_under_mpiexec(nprocs, [sys.executable, "-m", "gridcomm", *sys.argv[1:]])
