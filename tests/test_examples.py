"""The examples (examples/*.py), each run as a user runs it, under mpiexec with ``--quick``: on 4 ranks on the CPU,
and on a GPU machine without ``--cpu`` on one rank per GPU. Each example checks itself against a serial run on
rank 0 and ends with a line ``<name>: ...: OK`` (or ``MISMATCH``, exiting 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_mpi
from gpu_support import gpu_count, needs_gpus

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# (example, the module it needs beyond gridcomm's own dependencies: its test skips where that is missing)
CASES = [
    ("heat3d", None),
    ("heat3d_torch", "torch"),
    ("jax_step", "jax"),
    ("advection_octahedral", None),
    ("spectral_transform", None),
    ("shallow_water", None),
]

# One thread per rank: 4 ranks share 2 cores here, and torch, XLA and BLAS would otherwise each start a thread per
# core in every rank, more busy threads than cores. At --quick sizes that costs little (jax_step: 0.8 ms per step
# instead of 0.6), but a rank whose threads wait for a core stalls its peers at every exchange once the machine is
# busy with other tests.
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}


def run_example(name: str, nranks: int, *options: str, timeout: float) -> str:
    """Run examples/<name>.py --quick on ``nranks`` ranks; fail unless it exits 0 with its final OK line."""
    rc, out = run_mpi(nranks, [str(EXAMPLES / f"{name}.py"), "--quick", *options], timeout, env=ONE_THREAD)
    lines = [line for line in out.splitlines() if line.startswith(f"{name}: ")]
    assert rc == 0 and lines and lines[-1].endswith(": OK"), f"{name} on {nranks} ranks exited {rc}:\n{out[-6000:]}"
    assert "MISMATCH" not in out, out[-6000:]
    assert f"{nranks} rank(s)" in out, out[-6000:]  # it ran on the ranks it was given, not on one rank each
    return out


@pytest.mark.mpi
@pytest.mark.parametrize(("name", "needs"), CASES)
def test_example_on_4_ranks_on_the_cpu(name: str, needs: str | None) -> None:
    if needs:
        pytest.importorskip(needs, reason=f"{name} needs {needs} (pip install -e '.[examples]')")
    out = run_example(name, 4, "--cpu", timeout=300)
    assert "on the CPU" in out, out[-6000:]


@pytest.mark.mpi
@pytest.mark.parametrize(("name", "module"), [("heat3d_torch", "torch"), ("jax_step", "jax")])
def test_example_says_once_what_to_install(tmp_path: Path, name: str, module: str) -> None:
    """Where the library an example drives is missing (hidden here by a package of its name that cannot be
    imported), rank 0 says what to install, once, and every rank exits 1: no ModuleNotFoundError per rank."""
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text(f"raise ModuleNotFoundError({f'No module named {module!r}'!r})\n")
    rc, out = run_mpi(2, [str(EXAMPLES / f"{name}.py"), "--quick", "--cpu"], 60, env={"PYTHONPATH": str(tmp_path)})
    assert rc != 0, out
    assert out.count(f"needs {module}, which is not installed") == 1, out
    assert f"pip install {module}, or pip install 'gridcomm[examples]'" in out, out
    assert "Traceback" not in out, out


def jax_has_a_gpu() -> bool:
    """Asked in a child process: JAX in this one would hold GPU memory that the example's ranks need."""
    code = "import jax; print(any(d.platform == 'gpu' for d in jax.devices()))"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    return done.stdout.strip().endswith("True")


@pytest.mark.gpu
@needs_gpus(1)
@pytest.mark.mpi
@pytest.mark.parametrize(("name", "needs"), CASES)
def test_example_on_one_rank_per_gpu(name: str, needs: str | None) -> None:
    if needs:
        module = pytest.importorskip(needs, reason=f"{name} needs {needs} (pip install -e '.[examples]')")
        if needs == "torch" and not module.cuda.is_available():
            pytest.skip("this torch has no CUDA: heat3d_torch would run on the CPU")
        if needs == "jax" and not jax_has_a_gpu():
            pytest.skip("this JAX has no GPU device: jax_step would run on the CPU")
    out = run_example(name, gpu_count(), timeout=300)
    assert "GPU 0" in out and "on the CPU" not in out, out[-6000:]
