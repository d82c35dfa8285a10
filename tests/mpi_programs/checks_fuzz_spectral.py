"""Fuzzing of the spherical-harmonic transform's constructors with checks_fuzz's property: SpectralTransform
(one rank's transform, any subset of wavenumbers and rows) and DistributedTransform (collective, on 1 to 4
ranks). Each example draws arguments in a form that works and, most of the time, one fault: a wrong type (a
float, a string or a bool where a whole number belongs, a nested list), a value out of range, a repeated
wavenumber or row, an unknown grid, transport or array module. Then:

* without a fault, the object works and gives what the whole serial transform gives: a SpectralTransform's
  Legendre half on its wavenumbers and its Fourier half on its rows equal the whole transform's on those (to
  1e-12, the products' order of summation may differ with the padding), and a whole one returns coefficients
  through inverse and direct (round trip to 1e-12); a DistributedTransform's inverse on each rank equals the
  serial transform's values on that rank's rows, and its direct brings back that rank's coefficients;
* with a fault, it raises the gridcomm error named by the fault, its message naming the argument, never a
  NumPy error from deep inside.

A DistributedTransform's faults go to every rank: each rank checks its arguments before anything collective,
so a rank alone with a bad argument would leave the others waiting for it until their timeout.

Registered into checks_fuzz.CONSTRUCTORS on import (tests/test_fuzz.py draws the same cases in process).
"""

from __future__ import annotations

from typing import Any

import checks_fuzz
import numpy as np
from checks_fuzz import BAD_COMMS, Case, Constructor, Fault, communicator, fuzz, maybe_fault, release
from hypothesis import strategies as st

from gridcomm.grids.octahedral import OctahedralGrid
from gridcomm.lab.apps.spectral import SpectralTransform
from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients
from gridcomm.lab.apps.spectral.transform import coefficient_index

TOLERANCE = 1e-12  # relative, against the largest value: the transforms' round-off at these sizes is ~1e-14

# Values that are no grid: ArgumentError naming "grid".
BAD_GRIDS = (0, -3, "O0", "N16", "O", 3.5, True, None, [16], np.float64(8.0))
BAD_WHOLE_NUMBERS = (2.5, "3", True, None, [1], np.float32(2.0))  # ArgumentTypeError, unless None is allowed
BAD_INDEX_LISTS: dict[str, Any] = {  # a fault of a list of wavenumbers or rows -> (value, error)
    "a float": ([1.5], "ArgumentTypeError"),
    "a string": ("01", "ArgumentTypeError"),
    "nested": ([[0]], "ArgumentTypeError"),
    "a bool": ([True], "ArgumentTypeError"),
    "a 2-D array": (np.zeros((1, 1), dtype=np.int64), "ArgumentTypeError"),
    "a set": ({0, 1}, "ArgumentTypeError"),
    "negative": ([-1], "ArgumentError"),
    "repeated": ([0, 0], "ArgumentError"),
    "past the end": (None, "ArgumentError"),  # made from the case: one past the largest
}


def grid_form(draw: Any, n: int) -> Any:
    """Grid O-n as the constructors take it: an int, a NumPy int, or a name."""
    return draw(st.sampled_from([n, np.int32(n), f"O{n}", f" O{n} "]))


def subset(draw: Any, n: int, least: int = 0) -> Any:
    """A subset of 0..n-1 in some order (at least ``least`` of them), as a list, a tuple or an int array; or None."""
    if draw(st.booleans()):
        return None
    chosen = draw(st.lists(st.integers(0, n - 1), min_size=min(least, n), max_size=n, unique=True))
    form = draw(st.sampled_from(["list", "tuple", "array"]))
    return tuple(chosen) if form == "tuple" else np.array(chosen, dtype=np.int64) if form == "array" else chosen


def index_fault(draw: Any, argument: str, n: int) -> tuple[Any, str, tuple[str, ...]]:
    name = draw(st.sampled_from(sorted(BAD_INDEX_LISTS)))
    value, error = BAD_INDEX_LISTS[name]
    return ([n] if value is None else value), error, (argument,)


# -- SpectralTransform ------------------------------------------------------------------------------------------


@st.composite
def spectral_cases(draw: Any, world: int) -> Case:
    n = draw(st.integers(1, 12))
    t = draw(st.integers(0, n - 1))
    args = {
        "n": n,
        "grid": grid_form(draw, n),
        "truncation": draw(st.sampled_from([None, t, np.int64(t)])),
        "fft_streams": draw(st.sampled_from([None, 1, 3])),
        "xp": draw(st.sampled_from(["numpy", "numpy module"])),
    }
    t = n - 1 if args["truncation"] is None else t
    args |= {
        "t": t,
        "wavenumbers": subset(draw, t + 1),
        "rows": subset(draw, 2 * n, least=1),
        "fourier_order": subset(draw, t + 1),
    }
    kind, _ = maybe_fault(draw, 1, {"grid", "truncation", "wavenumbers", "rows", "fourier_order", "fft_streams", "xp"})
    if kind is None:
        return Case("SpectralTransform", 1, args, seed=draw(st.integers(0, 2**31)))
    if kind == "grid":
        value, error, words = draw(st.sampled_from(BAD_GRIDS)), "ArgumentError", ("grid",)
    elif kind == "truncation":
        value = draw(st.sampled_from([n, n + 5, -1, *[v for v in BAD_WHOLE_NUMBERS if v is not None]]))
        error = "ArgumentError" if isinstance(value, int) and not isinstance(value, bool) else "ArgumentTypeError"
        words = ("truncation",)
    elif kind == "fft_streams":
        value = draw(st.sampled_from([0, -2, *[v for v in BAD_WHOLE_NUMBERS if v is not None]]))
        error = "ArgumentError" if isinstance(value, int) and not isinstance(value, bool) else "ArgumentTypeError"
        words = ("fft_streams",)
    elif kind == "xp":
        value, error, words = draw(st.sampled_from(["torch", "np", 3])), "ArgumentError", ("xp",)
    elif kind == "rows" and draw(st.integers(1, 4)) == 1:
        value, error, words = [], "ArgumentError", ("rows",)
    else:
        value, error, words = index_fault(draw, kind, 2 * n if kind == "rows" else t + 1)
    fault = Fault(f"{kind}={value!r}", (error,), words)
    return Case("SpectralTransform", 1, args, fault, {kind: value})


def build_spectral(sub: Any, case: Case, args: dict[str, Any]) -> SpectralTransform:
    options = {k: args[k] for k in ("truncation", "wavenumbers", "rows", "fourier_order", "fft_streams")}
    xp = np if args["xp"] == "numpy module" else args["xp"]
    return SpectralTransform(args["grid"], xp=xp, **options)


def verify_spectral(sub: Any, case: Case, transform: SpectralTransform) -> list[str]:
    """Its halves against the whole transform's on its wavenumbers and rows; a whole one's round trip."""
    args = case.args
    n, t = args["n"], args["t"]
    whole, grid = SpectralTransform(n, t), OctahedralGrid(n)
    a = random_coefficients(t, np.arange(t + 1), 2, seed=case.seed)
    # Legendre: this transform's wavenumbers, in its order, against the whole transform's.
    ms = transform.wavenumbers
    at = np.concatenate([coefficient_index(np.arange(m, t + 1), m, t) for m in ms] or [[]]).astype(np.int64)
    fourier = whole.legendre_inverse(a)
    got = transform.legendre_inverse(a[:, at])
    problems = close_problems("legendre_inverse", got, fourier[:, ms, :])
    problems += close_problems("legendre_direct", transform.legendre_direct(got), whole.legendre_direct(fourier)[:, at])
    # Fourier: this transform's rows, in its order, with the wavenumbers in fourier_order's order.
    values = np.random.default_rng(case.seed).standard_normal((2, grid.size))
    rows, order = transform.rows, np.arange(t + 1) if args["fourier_order"] is None else args["fourier_order"]
    points = np.concatenate([np.arange(grid.offsets[r], grid.offsets[r + 1]) for r in rows])
    spectra = whole.fourier_direct(values, order)
    got = transform.fourier_direct(values[:, points], order)
    problems += close_problems("fourier_direct", got, spectra[:, :, rows])
    problems += close_problems("fourier_inverse", transform.fourier_inverse(got, order),
                               whole.fourier_inverse(spectra, order)[:, points])  # fmt: skip
    if args["wavenumbers"] is None and args["rows"] is None:
        problems += close_problems("direct(inverse(a))", transform.direct(transform.inverse(a)), a)
    return problems


def close_problems(what: str, got: np.ndarray, want: np.ndarray) -> list[str]:
    if got.shape != want.shape:
        return [f"{what}: shape {got.shape}, expected {want.shape}"]
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-300)
    error = float(np.max(np.abs(got - want), initial=0.0)) / scale
    return [] if error <= TOLERANCE else [f"{what}: differs from the whole transform's by {error:.1e} (relative)"]


# -- DistributedTransform ---------------------------------------------------------------------------------------


@st.composite
def distributed_cases(draw: Any, world: int) -> Case:
    nranks = draw(st.integers(1, world))
    n = draw(st.integers(max(1, -(-nranks // 2)), 8))  # 2N rows: at least one per rank
    t = draw(st.integers(0, n - 1))
    args = {
        "n": n,
        "grid": grid_form(draw, n),
        "truncation": draw(st.sampled_from([None, t])),
        "batch": draw(st.sampled_from([1, 3, np.int16(2)])),
        "transport": draw(st.sampled_from(["auto", "cma", "mpi"])),
        "comm": draw(st.sampled_from(["sub", "Communicator"])),
        "graphs": draw(st.sampled_from([False, np.bool_(False)])),
        "fft_streams": draw(st.sampled_from([None, 1])),
    }
    args["t"] = n - 1 if args["truncation"] is None else t
    kind, _ = maybe_fault(draw, 1, {"grid", "truncation", "batch", "transport", "comm", "graphs", "xp"})
    if kind is None:
        return Case("DistributedTransform", nranks, args, seed=draw(st.integers(0, 2**31)))
    if kind == "grid":
        value, error, words = draw(st.sampled_from(BAD_GRIDS)), ("ArgumentError",), ("grid",)
    elif kind == "truncation":
        value = draw(st.sampled_from([n, -1, 2.5, "3", True]))
        error = ("ArgumentError",) if isinstance(value, int) and not isinstance(value, bool) else ("ArgumentTypeError",)
        words = ("truncation",)
    elif kind == "batch":
        value = draw(st.sampled_from([0, -1, 1.5, "2", True, None]))
        error = ("ArgumentError",) if isinstance(value, int) and not isinstance(value, bool) else ("ArgumentTypeError",)
        words = ("batch",)
    elif kind == "transport":
        value, error, words = draw(st.sampled_from(["carrier-pigeon", ""])), ("TransportError", "ArgumentError"), ()
    elif kind == "comm":
        value = draw(st.sampled_from(sorted(BAD_COMMS)))
        error, words = (BAD_COMMS[value][1],), ("mpi_comm",)
    elif kind == "graphs":
        value = draw(st.sampled_from([True, "yes", 1]))
        error = ("ArgumentError",) if value is True else ("ArgumentTypeError",)
        words = ("graphs",)
    else:
        value, error, words = draw(st.sampled_from(["torch", 3])), ("ArgumentError",), ("xp",)
    fault = Fault(f"{kind}={value!r}", error, words)
    return Case("DistributedTransform", nranks, args, fault, {kind: value})


def build_distributed(sub: Any, case: Case, args: dict[str, Any]) -> tuple[DistributedTransform, Any]:
    comm = communicator(sub, args["comm"])
    try:
        options = {k: args[k] for k in ("batch", "transport", "graphs", "fft_streams")}
        made = DistributedTransform(comm, args["grid"], args["truncation"], xp=args.get("xp", np), **options)
    except Exception:
        release(comm)
        raise
    return made, comm


def verify_distributed(sub: Any, case: Case, made: tuple[DistributedTransform, Any]) -> list[str]:
    """Each rank's inverse against the serial transform's values on its rows; direct brings its coefficients back."""
    dist, args = made[0], case.args
    n, t, batch = args["n"], args["t"], int(args["batch"])
    whole = SpectralTransform(n, t)
    a = random_coefficients(t, np.arange(t + 1), batch, seed=case.seed)
    grid = OctahedralGrid(n)
    mine = dist.local_coefficients(a)
    values = dist.inverse(mine)
    points = np.concatenate([np.arange(grid.offsets[r], grid.offsets[r + 1]) for r in dist.rows])
    problems = close_problems("inverse", values, whole.inverse(a)[:, points])
    return problems + close_problems("direct(inverse(a))", dist.direct(values), mine)


def close_distributed(made: tuple[DistributedTransform, Any]) -> None:
    made[0].close()
    release(made[1])


checks_fuzz.CONSTRUCTORS |= {
    "SpectralTransform": Constructor(spectral_cases, build_spectral, verify_spectral, lambda t: None, 300),
    "DistributedTransform": Constructor(
        distributed_cases, build_distributed, verify_distributed, close_distributed, 200
    ),
}


def check_fuzz_spectral_transform(comm: Any) -> None:
    fuzz(comm, "SpectralTransform")


def check_fuzz_distributed_transform(comm: Any) -> None:
    fuzz(comm, "DistributedTransform")
