"""What Python users expect of a library, in process on one rank: the buffer protocol taken where arrays are,
the ``gridcomm`` logger, optional dependencies named by their extra, the oversubscription warning's rule.

The warning's wiring over several ranks (rank 0 only, once, the node's CPUs) and the log's rank prefix run
under MPI: tests/mpi_programs/checks_conventions.py."""

from __future__ import annotations

import array
import ctypes
import io
import logging
import sys
import warnings

import numpy as np
import pytest

import gridcomm
import gridcomm.comm
import gridcomm.log
import gridcomm.timeouts
from gridcomm import FieldError, GridcommTimeout, HaloExchanger, MissingDependencyError, OversubscriptionWarning
from gridcomm.transports import choose

# -- the buffer protocol --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda n: bytearray(n),
        lambda n: array.array("d", [0.0] * n),
        lambda n: array.array("h", [0] * n),
        lambda n: (ctypes.c_float * n)(),
        lambda n: memoryview(bytearray(8 * n)).cast("q"),
    ],
    ids=["bytearray", "array-d", "array-h", "ctypes-float", "memoryview-q"],
)
def test_buffers_are_exchanged_in_place(decompose, make):
    """A 1-D periodic grid on one rank: the halo exchange writes the wrapped interior into the buffer itself
    (a NumPy view of it, no copy), and gather and interior() read it."""
    d = decompose((6,), halo=1, periodic=True)
    buffer = make(d.local_shape[0])
    view = np.asarray(memoryview(buffer))
    view[1:-1] = np.arange(1, 7)
    with HaloExchanger(d, buffer) as ex:
        ex.exchange()
    assert view.tolist() == [6, 1, 2, 3, 4, 5, 6, 1], view
    assert np.array_equal(d.gather(buffer), np.arange(1, 7))
    assert np.shares_memory(d.interior(buffer), view)


def test_a_memoryview_of_a_2d_array_is_exchanged_in_place(decompose):
    d = decompose((4, 3), halo=1, periodic=True)
    a = d.zeros()
    d.interior(a)[...] = np.arange(12.0).reshape(4, 3)
    with HaloExchanger(d, memoryview(a)) as ex:
        ex.exchange()
    assert np.array_equal(a[0, 1:-1], a[-2, 1:-1]) and a[0, 1] == 9.0


@pytest.mark.parametrize(
    ("buffer", "words"),
    [
        (bytes(8), r"field 0 is read-only \(a read-only bytes\).*bytearray"),
        (memoryview(bytearray(16))[::2], r"field 0 is not contiguous"),
        (array.array("u", "abcdefgh"), r"field 0 has dtype <U1, which gridcomm cannot exchange"),
        ((ctypes.c_void_p * 8)(), r"field 0 is a c_void_p_Array_8 whose buffer format '<P' NumPy cannot read"),
    ],
    ids=["read-only", "strided", "characters", "pointers"],
)
def test_buffers_that_cannot_be_fields_are_refused(decompose, buffer, words):
    d = decompose((6,), halo=1, periodic=True)
    with pytest.raises(FieldError, match=words):
        HaloExchanger(d, buffer)


def test_a_transposer_reads_bytes_and_writes_a_bytearray():
    """Sources may be read-only (bytes); destinations are written (a bytearray), both without a copy."""
    source, destination = bytes(range(8)), bytearray(8)
    with gridcomm.Transposer.from_counts(None, [8], None, [8], None, source, destination) as t:
        t.exchange()
    assert destination == bytearray(range(8))


def test_scatter_takes_a_buffer_on_root(decompose):
    d = decompose((5,), halo=1)
    local = d.scatter(array.array("i", range(5)))
    assert local.dtype == np.int32 and local.tolist() == [0, 0, 1, 2, 3, 4, 0]


# -- the logger -----------------------------------------------------------------------------------------------


def test_the_logger_is_silent_by_default(decompose, capfd):
    assert all(isinstance(h, logging.NullHandler) for h in logging.getLogger("gridcomm").handlers)
    d = decompose((6,), halo=1, periodic=True)
    HaloExchanger(d, d.zeros()).close()
    assert capfd.readouterr().err == ""


def test_the_transport_chosen_and_why_are_logged(decompose, caplog):
    """Standard logging configuration (here pytest's caplog) sees which transport each exchanger took and why,
    and a fallback names the transport left out."""
    d = decompose((6,), halo=1, periodic=True)
    with caplog.at_level(logging.INFO, logger="gridcomm"):
        HaloExchanger(d, d.zeros()).close()
        HaloExchanger(d, d.zeros(), "mpi").close()
        choose("auto", d.comm, False, exclude=("cma",))
    lines = [(r.name, r.getMessage()) for r in caplog.records]
    assert ("gridcomm.transports", "transport mpi for host arrays: as asked") in lines, lines
    picked = [m for name, m in lines if name == "gridcomm.transports" and "auto picks" in m]
    # Where cma, shm and mpi can move host arrays here, auto measures them (cma on threads too, and mpi with MPI's
    # datatypes) on the plan and says what it found; with cma left out it measures the others and says why not cma.
    measured = "the fastest of cma, cma/threads, shm, mpi, mpi/packing=datatype" in picked[0]
    assert picked and (measured or "the fastest of shm, mpi, mpi/packing=datatype" in picked[0]), lines
    if measured:
        assert any(name == "gridcomm.exchange" and "fastest measured for this plan" in m for name, m in lines), lines
    assert "not cma: cannot move these arrays (fell back from it)" in picked[-1], lines
    assert any(name == "gridcomm.exchange" and m.startswith("ready: HaloExchanger(1 field(s)") for name, m in lines)


def test_a_timeout_is_logged(caplog):
    timeout = GridcommTimeout("halo exchange #3", 0, (1,), 2.0)
    with caplog.at_level(logging.WARNING, logger="gridcomm"), pytest.raises(GridcommTimeout):
        gridcomm.timeouts.give_up(timeout, None, "raise")
    assert [r.getMessage() for r in caplog.records] == [f"{timeout} (on_timeout='raise')"]


@pytest.fixture
def log_handler():
    """gridcomm.log.configure's handler, removed afterwards (and the logger's level restored)."""
    made = []

    def configure(setting):
        handler = gridcomm.log.configure(setting)
        if handler is not None:
            handler.setStream(io.StringIO())
            made.append(handler)
        return handler

    yield configure
    for handler in made:
        gridcomm.log.logger.removeHandler(handler)
    gridcomm.log.logger.setLevel(logging.NOTSET)


def test_gridcomm_log_prints_at_the_level_it_names(decompose, log_handler, monkeypatch):
    monkeypatch.setenv("GRIDCOMM_LOG", "Debug")
    handler = log_handler(None)
    assert gridcomm.log.logger.level == logging.DEBUG
    d = decompose((6,), halo=1, periodic=True)
    HaloExchanger(d, d.zeros(), "mpi").close()
    assert "gridcomm: INFO gridcomm.transports: transport mpi for host arrays: as asked\n" in handler.stream.getvalue()


def test_an_unknown_gridcomm_log_level_warns_and_changes_nothing(log_handler):
    with pytest.warns(UserWarning, match="GRIDCOMM_LOG='loud' is not a level; use one of debug, info"):
        assert log_handler("loud") is None
    assert log_handler("") is None


# -- optional dependencies ------------------------------------------------------------------------------------


def test_a_missing_plot_extra_is_named(monkeypatch, tmp_path):
    """Without matplotlib a plot raises MissingDependencyError (an ImportError too) naming gridcomm[plot]."""
    from gridcomm.lab.bench.stencil2d import plot_stencil2d

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"plots: matplotlib is not installed .*gridcomm\[plot\]"):
        plot_stencil2d({"results": []}, tmp_path / "plot.png")
    assert issubclass(MissingDependencyError, ImportError)


def test_a_missing_energy_extra_is_named(monkeypatch):
    from gridcomm.extras import require

    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(MissingDependencyError, match=r"nvidia-ml-py is not installed .*gridcomm\[energy\]"):
        require("pynvml", "energy", "the GPU energy counter")


# -- the oversubscription warning -----------------------------------------------------------------------------


@pytest.fixture
def unwarned(monkeypatch):
    """The warning not silenced by the environment."""
    monkeypatch.delenv("GRIDCOMM_OVERSUBSCRIBE_OK", raising=False)
    return monkeypatch


def test_more_ranks_than_cpus_warns(unwarned):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gridcomm.comm.warn_if_oversubscribed(2, 2)  # as many ranks as CPUs: fine
        gridcomm.comm.warn_if_oversubscribed(6, 2)
    assert [w.category for w in caught] == [OversubscriptionWarning]
    message = str(caught[0].message)
    assert "6 ranks run on a node where they may use 2 CPU(s)" in message and "GRIDCOMM_OVERSUBSCRIBE_OK=1" in message
    assert caught[0].filename == __file__  # it points at the caller, not into gridcomm


def test_the_warning_can_be_silenced(unwarned):
    unwarned.setenv("GRIDCOMM_OVERSUBSCRIBE_OK", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gridcomm.comm.warn_if_oversubscribed(6, 2)
    unwarned.delenv("GRIDCOMM_OVERSUBSCRIBE_OK")
    with warnings.catch_warnings(record=True) as filtered:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=OversubscriptionWarning)
        gridcomm.comm.warn_if_oversubscribed(6, 2)
    assert caught == [] and filtered == []
