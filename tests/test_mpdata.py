"""MPDATA on the octahedral grid: conservation, convergence, boundedness, CFL, and identical results on
any number of parts (threads with an in-memory exchange here, MPI ranks through mpdata_ranks.py)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
from harness import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_mpi
from gridcomm.grids import LocalMesh, MedianDualMesh, equal_regions
from gridcomm.lab.apps.mpdata import (
    CosineBell,
    Mpdata,
    benchmark_mpdata,
    check_cfl,
    dt_for_courant,
    plot_tracer,
    run_mpdata,
    setup_mpdata,
)

PROGRAM = Path(__file__).resolve().parent / "mpi_programs" / "mpdata_ranks.py"
MESH4 = MedianDualMesh(4)  # built once: the argument fuzzing below makes many solvers on it


# -- serial behaviour --------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, math.pi / 4, math.pi / 2], ids=["zonal", "diagonal", "polar"])
def test_runs_conserve_mass_and_stay_bounded(alpha):
    """All three rotation angles run; mass is conserved to 1e-12; the non-oscillatory option keeps the
    field within the initial min/max (up to round-off)."""
    r = run_mpdata(None, "O16", alpha=alpha, revolutions=0.25, levels=2)
    assert r["steps"] > 10 and 0 < r["courant"] <= 0.5
    assert abs(r["mass_rel_change"]) < 1e-12
    assert r["min"] >= r["min0"] - 1e-12 * r["max0"] and r["max"] <= r["max0"] * (1 + 1e-12)
    assert 0 < r["l2"] < 1 and np.isfinite([r["l1"], r["l2"], r["linf"]]).all()
    assert r["simulated_s"] == pytest.approx(3 * 86400.0)


def test_mass_conserved_without_limiter_and_upwind_only():
    for options in ({"fct": False}, {"iterations": 0}):
        r = run_mpdata(None, "O16", alpha=math.pi / 4, steps=40, **options)
        assert abs(r["mass_rel_change"]) < 1e-12, options


def test_error_decreases_with_resolution():
    """A quarter revolution (3 days, diagonal flow) at O24 and O48: the same physical time; a full
    revolution is measured in docs/mpdata.md."""
    coarse = run_mpdata(None, "O24", alpha=math.pi / 4, revolutions=0.25)
    fine = run_mpdata(None, "O48", alpha=math.pi / 4, revolutions=0.25)
    assert coarse["simulated_s"] == pytest.approx(fine["simulated_s"], rel=1e-12)
    for norm in ("l1", "l2", "linf"):
        assert fine[norm] < 0.7 * coarse[norm], (norm, coarse[norm], fine[norm])
    assert abs(fine["mass_rel_change"]) < 1e-12


def test_corrective_pass_beats_upwind():
    upwind = run_mpdata(None, "O24", alpha=0.0, revolutions=0.25, iterations=0)
    mpdata = run_mpdata(None, "O24", alpha=0.0, revolutions=0.25)
    assert mpdata["l2"] < 0.75 * upwind["l2"] and mpdata["max"] > upwind["max"]


def test_constant_field_stays_constant():
    """The edge fluxes of the solid-body wind are discretely non-divergent, so a constant is kept to round-off."""
    s = setup_mpdata(None, "O16", alpha=math.pi / 3, levels=3)
    s.solver.psi[:] = 7.0
    s.solver.run(20)
    assert np.abs(s.solver.psi - 7.0).max() < 1e-12 * 7.0


def test_levels_are_independent_columns():
    s = setup_mpdata(None, "O8", alpha=math.pi / 4, levels=3)
    s.solver.psi[:, 1] *= 0.5
    s.solver.psi[:, 2] = 0.0
    single = setup_mpdata(None, "O8", alpha=math.pi / 4, levels=1)
    s.solver.run(5)
    single.solver.run(5)
    assert s.solver.psi.flags.c_contiguous and s.solver.psi.shape == (s.mesh.n_nodes, 3)
    assert np.array_equal(s.solver.psi[:, 0], single.solver.psi[:, 0])
    assert (s.solver.psi[:, 2] == 0).all()


def test_cfl_violation_raises_a_clear_error():
    mesh = MedianDualMesh(16)
    case = CosineBell(alpha=math.pi / 2, radius=mesh.radius)
    fluxes = case.edge_fluxes(mesh)
    dt = dt_for_courant(mesh.edges, fluxes, mesh.dual_volumes, 1.0)
    assert check_cfl(mesh.edges, fluxes, mesh.dual_volumes, dt) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"Courant number is 2\.000.*limit 1.*use dt <= ") as info:
        check_cfl(mesh.edges, fluxes, mesh.dual_volumes, 2 * dt)
    assert f"{dt:.6g}" in str(info.value)
    with pytest.raises(ValueError, match="CFL"):
        run_mpdata(None, "O16", alpha=math.pi / 2, dt=3 * dt, steps=1)
    with pytest.raises(ValueError, match="courant"):
        run_mpdata(None, "O16", courant=1.5, steps=1)
    with pytest.raises(ValueError, match="positive"):
        check_cfl(mesh.edges, fluxes, mesh.dual_volumes, -1.0)


def test_bad_input():
    with pytest.raises(ValueError, match="unknown grid 'N48'"):
        run_mpdata(None, "N48", steps=1)
    local = LocalMesh.serial(MedianDualMesh(2))
    flux, wind = np.zeros(local.n_edges), np.zeros((local.n_edges, 3))
    with pytest.raises(ValueError, match="iterations"):
        Mpdata(local, flux, wind, 1.0, iterations=2)
    with pytest.raises(ValueError, match="one per local edge"):
        Mpdata(local, flux[:-1], wind, 1.0)
    mesh = MedianDualMesh(4)
    thin = LocalMesh.build(mesh, equal_regions(mesh, 2), 0, layers=1)
    with pytest.raises(ValueError, match="2 halo layers"):
        Mpdata(thin, np.zeros(thin.n_edges), np.zeros((thin.n_edges, 3)), 1.0)


# Faults of the solver's own arguments, built directly (setup_mpdata checks the same through solver_options).
SOLVER_FAULTS = [
    ("levels", 2.5, "ArgumentTypeError", "levels=2.5"), ("levels", 0, "ArgumentError", "levels=0"),
    ("levels", np.float64(2), "ArgumentTypeError", "levels"), ("fct", "no", "ArgumentTypeError", "fct"),
    ("iterations", 2, "ArgumentError", "iterations=2"), ("iterations", 0.0, "ArgumentTypeError", "iterations"),
    ("graphs", 1, "ArgumentTypeError", "graphs"), ("levels_per_thread", 3, "ArgumentError", "levels_per_thread"),
    ("dt", 0.0, "ArgumentError", "dt"), ("dt", "60", "ArgumentTypeError", "dt"),
]  # fmt: skip


@pytest.mark.parametrize(("argument", "value", "error", "word"), SOLVER_FAULTS)
def test_solver_refuses_bad_arguments(argument, value, error, word):
    """Mpdata(levels=2.5) once ran 2 levels: every argument of the solver is checked where it is built."""
    from gridcomm import errors

    local = LocalMesh.serial(MedianDualMesh(2))
    options = {"dt": 1.0, "levels": 2, argument: value}
    with pytest.raises(getattr(errors, error), match=word):
        Mpdata(local, np.zeros(local.n_edges), np.zeros((local.n_edges, 3)), **options)


# Faults of run_mpdata's own arguments, refused before the mesh is built.
RUN_FAULTS = [
    ("revolutions", 0, "ArgumentError", "revolutions"), ("revolutions", "1", "ArgumentTypeError", "revolutions"),
    ("revolutions", float("nan"), "ArgumentError", "revolutions"), ("steps", -1, "ArgumentError", "steps=-1"),
    ("steps", 2.0, "ArgumentTypeError", "steps"), ("alpha", None, "ArgumentTypeError", "alpha"),
    ("progress", "bar", "ArgumentTypeError", "progress"),
    ("return_fields", "yes", "ArgumentTypeError", "return_fields"),
    ("levels", 1.5, "ArgumentTypeError", "levels"), ("dt", "60", "ArgumentTypeError", "dt"),
]  # fmt: skip


@pytest.mark.parametrize(("argument", "value", "error", "word"), RUN_FAULTS)
def test_run_refuses_bad_arguments(argument, value, error, word, monkeypatch):
    from gridcomm import errors
    from gridcomm.lab.apps.mpdata import driver

    def no_mesh(*args, **kwargs):
        raise AssertionError("the mesh was built before the arguments were checked")

    monkeypatch.setattr(driver, "MedianDualMesh", no_mesh)
    with pytest.raises(getattr(errors, error), match=word):
        run_mpdata(None, "O4", **{"steps": 1, argument: value})


# Faults of setup_mpdata's arguments: (argument, bad value, error class name, word its message must hold).
SETUP_FAULTS = [
    ("levels", 0, "ArgumentError", "levels"), ("levels", 2.5, "ArgumentTypeError", "levels"),
    ("levels", "2", "ArgumentTypeError", "levels"), ("levels", True, "ArgumentTypeError", "levels"),
    ("alpha", "x", "ArgumentTypeError", "alpha"), ("alpha", float("nan"), "ArgumentError", "alpha"),
    ("courant", -1.0, "ArgumentError", "courant"), ("courant", 1.5, "ArgumentError", "courant"),
    ("courant", "0.5", "ArgumentTypeError", "courant"), ("courant", float("inf"), "ArgumentError", "courant"),
    ("dt", 0.0, "ArgumentError", "dt"), ("dt", -3, "ArgumentError", "dt"), ("dt", [1.0], "ArgumentTypeError", "dt"),
    ("dt", 1e9, "ArgumentError", "CFL"), ("period_s", -5.0, "ArgumentError", "period_s"),
    ("period_s", "1d", "ArgumentTypeError", "period_s"), ("fct", "yes", "ArgumentTypeError", "fct"),
    ("fct", 1, "ArgumentTypeError", "fct"), ("iterations", 2, "ArgumentError", "iterations"),
    ("iterations", 1.0, "ArgumentTypeError", "iterations"), ("iterations", True, "ArgumentTypeError", "iterations"),
    ("owner", "abc", "ArgumentError", "owner"), ("owner", np.zeros(5, int), "ArgumentError", "owner"),
    ("owner", np.full(MESH4.grid.size, 0.5), "ArgumentError", "owner"),
    ("xp", "torch", "ArgumentError", "xp"), ("transport", "carrier-pigeon", "TransportError", "transport"),
    ("transport", 7, "ArgumentTypeError", "transport"), ("graphs", "yes", "ArgumentTypeError", "graphs"),
    ("levels_per_thread", 3, "ArgumentError", "levels_per_thread"),
    ("levels_per_thread", 2.0, "ArgumentTypeError", "levels_per_thread"), ("grid", "O0", "ArgumentError", "grid"),
    ("grid", 4.5, "ArgumentError", "grid"),
]  # fmt: skip


@settings(max_examples=examples(60))
@given(st.data())
def test_setup_arguments_fuzzed(data):
    """setup_mpdata with each argument in every form it takes (NumPy scalars for Python ones) runs the same steps
    bit for bit as with plain ones; any one argument wrong raises the gridcomm error that names it."""
    from gridcomm import errors

    levels = data.draw(st.sampled_from([1, 2, 4]))
    plain = {"grid": MESH4, "levels": levels, "alpha": 0.3, "courant": 0.4, "fct": True, "iterations": 1}
    if data.draw(st.booleans()):
        fault = data.draw(st.sampled_from(SETUP_FAULTS))
        argument, value, error, word = fault
        with pytest.raises(getattr(errors, error), match=word):
            setup_mpdata(None, **{**plain, argument: value})
        return
    forms = {
        "levels": np.int16(levels), "alpha": np.float64(0.3), "courant": np.float64(0.4),
        "fct": np.bool_(True), "iterations": np.int64(1), "grid": data.draw(st.sampled_from([MESH4, 4, "O4"])),
        "levels_per_thread": data.draw(st.sampled_from([None, 1, levels])), "transport": "auto", "graphs": False,
    }  # fmt: skip
    chosen = {k: v for k, v in forms.items() if data.draw(st.booleans(), label=k)}
    first, second = setup_mpdata(None, **plain), setup_mpdata(None, **{**plain, **chosen})
    first.solver.run(3)
    second.solver.run(3)
    assert np.array_equal(first.solver.owned, second.solver.owned)


def test_progress_and_benchmark():
    seen = []
    r = run_mpdata(None, "O4", steps=3, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)] and r["steps"] == 3 and r["exchanges_per_step"] == 0
    b = benchmark_mpdata(None, "O4", levels=2, steps=3, warmup=1)
    assert b["ranks"] == 1 and b["owned_per_rank"] == [b["nodes"]] and b["median_s"] > 0


def test_plot_tracer(tmp_path):
    r = run_mpdata(None, "O8", alpha=math.pi / 4, steps=5, return_fields=True)
    path = plot_tracer("O8", r["initial"], r["final"], tmp_path / "bell.png", exact=r["exact"], title="O8")
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- several parts in one process: threads and an in-memory halo exchange ---------------------------------


class ThreadExchange:
    """Fills a part's halo rows from the owners' arrays; parts run in threads and meet at barriers, so no
    owner writes its rows while others read them. Independent of gridcomm's exchange code."""

    def __init__(self, world: dict, part: int, index: int, fields: list[np.ndarray]) -> None:
        self.world, self.part, self.index, self.fields = world, part, index, fields
        world["fields"][(part, index)] = fields
        local, owner = world["locals"][part], world["owner"]
        self.sources = []
        for q in range(len(world["locals"])):
            rows = np.flatnonzero(owner[local.halo_ids] == q)
            if rows.size:
                position = np.full(len(owner), -1)  # of each global id among q's owned rows
                position[world["locals"][q].owned_ids] = np.arange(world["locals"][q].n_owned)
                src = position[local.halo_ids[rows]]
                self.sources.append((q, local.n_owned + rows, src))

    def start(self, stream: object = None) -> ThreadExchange:
        return self

    def wait(self) -> None:
        self.world["barrier"].wait()
        for k, field in enumerate(self.fields):
            for q, rows, src in self.sources:
                field[rows] = self.world["fields"][(q, self.index)][k][src]
        self.world["barrier"].wait()


def run_parts(mesh: MedianDualMesh, nparts: int, steps: int, alpha: float, fct: bool, levels: int) -> np.ndarray:
    owner = equal_regions(mesh, nparts)
    case = CosineBell(alpha=alpha, radius=mesh.radius)
    fluxes, wind = case.edge_fluxes(mesh), case.edge_velocities(mesh)
    dt = dt_for_courant(mesh.edges, fluxes, mesh.dual_volumes, 0.5)
    world = {
        "owner": owner,
        "locals": [LocalMesh.build(mesh, owner, p, layers=2) for p in range(nparts)],
        "fields": {},
        "barrier": threading.Barrier(nparts, timeout=60),
    }
    solvers = []
    for p, local in enumerate(world["locals"]):
        count = iter(range(2))
        solver = Mpdata(
            local, fluxes[local.edge_ids], wind[local.edge_ids], dt, levels=levels, fct=fct,
            make_exchanger=lambda f, p=p, c=count: ThreadExchange(world, p, next(c), f),
        )  # fmt: skip
        solver.psi[:] = case.height(mesh.xyz)[local.global_ids, None]
        solvers.append(solver)
    errors: list[BaseException] = []

    def work(solver: Mpdata) -> None:
        try:
            solver.run(steps)
        except BaseException as error:
            errors.append(error)
            world["barrier"].abort()

    threads = [threading.Thread(target=work, args=(s,)) for s in solvers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    out = np.full((mesh.n_nodes, levels), np.nan)
    for s in solvers:
        out[s.local.owned_ids] = s.owned
    return out


@pytest.mark.parametrize("fct", [True, False], ids=["fct", "no-fct"])
def test_parts_match_serial_bitwise(fct):
    mesh = MedianDualMesh(16)
    serial = run_parts(mesh, 1, 15, math.pi / 4, fct, 2)
    single = setup_mpdata(None, mesh, alpha=math.pi / 4, fct=fct, levels=2)
    single.solver.run(15)
    plain = np.empty_like(serial)
    plain[single.local.owned_ids] = single.solver.owned  # the part's own node order back to global ids
    assert np.array_equal(serial, plain)  # one part with 2 halo layers = the plain serial run
    for nparts in (2, 3, 4, 7):
        assert np.array_equal(run_parts(mesh, nparts, 15, math.pi / 4, fct, 2), serial), nparts


# -- MPI ranks ----------------------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_mpi_ranks_match_serial_bitwise(nranks):
    rc, out = run_mpi(nranks, [str(PROGRAM), "O16", "12", "2"], timeout=120)
    assert rc == 0 and f"MPDATA-RANKS OK {nranks}" in out, out[-6000:]
