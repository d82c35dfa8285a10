"""Fuzzing of the public constructors with hypothesis, collectively on 1 to 4 ranks.

Each example draws the arguments of one constructor (Communicator, CartesianDecomposition,
UnstructuredDecomposition, HaloExchanger, Transposer, Transposer.from_counts) in a form that works, and
most of the time one fault: a wrong type, a negative or out-of-range value, ids owned twice or by nobody,
a field of the wrong shape, dtype, order or memory, an unknown transport, counts that disagree between
ranks. A fault is given to every rank or to one rank only (the others pass the good argument). Then:

* without a fault, construction works on every rank, and an exchange (with a per-rank timeout) is bit for
  bit what a serial reference says;
* with a fault, every rank raises a gridcomm error, never a bare TypeError/ValueError/IndexError or an
  error from deep inside NumPy, and never hangs: a rank given the bad argument the documented class
  (a TypeError subclass for a wrong type, ...) with a message naming the argument, the others any
  GridcommError (they name the rank that rejected its arguments).

harness.run_property runs each constructor's property: rank 0 draws (from GRIDCOMM_PROPERTY_SEED: the same
examples every run unless it is changed) and broadcasts, the first case.nranks ranks run the example on a
communicator of their own, and rank 0 asserts, so that hypothesis shrinks a failure. Arrays are never
broadcast: each rank builds its own from the case's small parameters (a pickled strided or read-only view
would arrive contiguous and writable). Communicators cannot be pickled either: cases name them (COMMS).

tests/test_fuzz.py launches this on 4 ranks and draws the same cases on one rank in process.
Environment: GRIDCOMM_PROPERTY_SCALE multiplies every constructor's number of examples, GRIDCOMM_PROPERTY_SEED
picks the examples (tests/mpi_programs/harness.py).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
from checks_property import predicted_grid
from checks_transpose import counts_plan, filled, gathered_problems, sentinel
from harness import (
    DTYPES,
    SENTINEL_BYTE,
    TRANSPORT_CHOICES,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    local_with_sentinel,
    random_global,
    run_property,
)
from hypothesis import strategies as st
from mpi4py import MPI

import gridcomm
from gridcomm import (
    Box,
    CartesianDecomposition,
    Communicator,
    GridcommError,
    HaloExchanger,
    Transposer,
    UnstructuredDecomposition,
)
from gridcomm.decomp.procgrid import factorisations

EXCHANGE_TIMEOUT_S = 20.0  # per rank, on every exchanger built here: a hang becomes GridcommTimeout
# dtypes no exchanger takes: object, structured, strings, non-native byte order, datetimes, long double.
BAD_DTYPES = ("object", "f8,i4", "U3", "S4", ">f8" if np.little_endian else "<f8", "datetime64[s]", "longdouble")
HOST_TRANSPORTS = ("cma", "cma/threads, mpi signals", "shm", "mpi")
seeds = st.integers(0, 2**32 - 1)


# -- the property: a fault raises a gridcomm error on every rank, no fault works ------------------------------


@dataclass(frozen=True)
class Fault:
    """What a bad argument must raise: one of ``errors`` (gridcomm error class names) with each of ``words`` in
    its message (case-insensitive; a tuple of words: any one of them). ``bad_rank``: the one rank given the bad
    argument, None: every rank. With ``named_everywhere`` every rank (not only the bad one) must raise that
    class and name those words: faults that only the ranks together can see (an id owned twice)."""

    what: str
    errors: tuple[str, ...]
    words: tuple[str | tuple[str, ...], ...] = ()
    bad_rank: int | None = None
    named_everywhere: bool = False


@dataclass(frozen=True)
class Case:
    """One example: which constructor, on how many ranks, its good arguments (small, picklable parameters) and
    the ones a fault replaces on the bad rank(s)."""

    constructor: str
    nranks: int
    args: dict[str, Any]
    fault: Fault | None = None
    bad: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def args_on(self, rank: int) -> dict[str, Any]:
        if self.fault is not None and self.fault.bad_rank in (None, rank):
            return {**self.args, **self.bad}
        return self.args


@dataclass(frozen=True)
class Constructor:
    """How to fuzz one constructor: its cases, how a rank builds it from its arguments, how the ranks verify
    what they built (collective, only when every rank built it) and release it."""

    cases: Callable[[int], Any]  # world size -> hypothesis strategy of Case
    build: Callable[[Any, Case, dict[str, Any]], Any]  # (sub, case, this rank's args) -> the object
    verify: Callable[[Any, Case, Any], list[str]]  # (sub, case, object) -> problems
    close: Callable[[Any], None]
    examples: int


def error_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


def fault_problems(fault: Fault, rank: int, error: BaseException | None) -> list[str]:
    """What is wrong with how this rank reacted to ``fault`` (raised ``error``, or None)."""
    if error is None:
        return [f"{fault.what}: nothing raised"]
    if not isinstance(error, GridcommError):
        return [f"{fault.what}: raised {type(error).__name__}, not a gridcomm error:\n{error_text(error)}"]
    if not (fault.named_everywhere or fault.bad_rank in (None, rank)):
        return []
    if not isinstance(error, tuple(getattr(gridcomm.errors, name) for name in fault.errors)):
        return [f"{fault.what}: raised {type(error).__name__} ({error}), expected one of {fault.errors}"]
    message = str(error).lower()
    missing = [w for w in fault.words if not any(x.lower() in message for x in (w if isinstance(w, tuple) else (w,)))]
    return [f"{fault.what}: the message lacks {missing}: {error}"] if missing else []


def run_case(sub: Any, case: Case) -> list[str]:
    """This rank's problems with one example (empty if none). Collective over ``sub``, the example's ranks."""
    constructor, rank = CONSTRUCTORS[case.constructor], sub.Get_rank()
    made, error = None, None
    try:
        made = constructor.build(sub, case, case.args_on(rank))
    except Exception as exc:
        error = exc
    try:
        if case.fault is not None:
            return fault_problems(case.fault, rank, error)
        problems = [] if error is None else [f"good arguments {case.args} raised:\n{error_text(error)}"]
        # Every rank learns whether every rank built it before anything collective follows.
        if sub.allreduce(error is None, op=MPI.LAND):
            problems += constructor.verify(sub, case, made)
        return problems
    finally:
        if made is not None:
            constructor.close(made)


def maybe_fault(draw: Any, nranks: int, faults: Any, chance_of_none: int = 4) -> tuple[str | None, int | None]:
    """None (one example in ``chance_of_none``) or the name of one of ``faults``, and the rank that gets it
    (None: every rank), for faults that may sit on one rank."""
    if draw(st.integers(1, chance_of_none)) == 1:
        return None, None
    return draw(st.sampled_from(sorted(faults))), draw(st.sampled_from([None, *range(nranks)])) if nranks > 1 else None


# -- communicators, named (mpi4py communicators cannot be pickled) ---------------------------------------------

COMMS: dict[str, Callable[[Any], Any]] = {
    "sub": lambda sub: sub,
    "Communicator": lambda sub: Communicator(sub),
    "COMM_SELF": lambda sub: MPI.COMM_SELF,
}
BAD_COMMS: dict[str, tuple[Callable[[Any], Any], str]] = {  # name -> (value, error it must raise)
    "COMM_NULL": (lambda sub: MPI.COMM_NULL, "ArgumentError"),
    "a Group": (lambda sub: sub.Get_group(), "ArgumentTypeError"),
    "an int": (lambda sub: 3, "ArgumentTypeError"),
    "a string": (lambda sub: "COMM_WORLD", "ArgumentTypeError"),
    "a list": (lambda sub: [sub], "ArgumentTypeError"),
}


def communicator(sub: Any, name: str) -> Any:
    return COMMS[name](sub) if name in COMMS else BAD_COMMS[name][0](sub)


def release(comm: Any) -> None:
    """Close what ``communicator`` made (Communicators close; mpi4py communicators stay)."""
    if isinstance(comm, Communicator):
        comm.close()


# -- Communicator ------------------------------------------------------------------------------------------------

GOOD_TIMEOUTS = (None, 0.25, 7, 30.0, 1e9, np.float32(2.5), np.int64(5))
BAD_TIMEOUTS = {  # value -> errors it may raise
    0: ("ArgumentError",),
    -1.5: ("ArgumentError",),
    float("nan"): ("ArgumentError",),
    float("-inf"): ("ArgumentError",),
    float("inf"): ("ArgumentError",),  # an endless wait is a hang
    "soon": ("ArgumentError", "ArgumentTypeError"),
    (1.0,): ("ArgumentError", "ArgumentTypeError"),
    1j: ("ArgumentError", "ArgumentTypeError"),
    True: ("ArgumentError", "ArgumentTypeError"),
}


@st.composite
def communicator_cases(draw: Any, world: int) -> Case:
    n = draw(st.integers(1, world))
    args = {"mpi_comm": draw(st.sampled_from(sorted(COMMS))), "timeout": draw(st.sampled_from(GOOD_TIMEOUTS))}
    kind, bad_rank = maybe_fault(draw, n, {"mpi_comm": None, "timeout": None})
    if kind is None:
        return Case("Communicator", n, args)
    if kind == "mpi_comm":  # raised before anything collective: every rank gets it, or the others would wait
        name = draw(st.sampled_from(sorted(BAD_COMMS)))
        fault = Fault(f"mpi_comm = {name}", (BAD_COMMS[name][1],), ("mpi_comm",))
        return Case("Communicator", n, args, fault, {"mpi_comm": name})
    timeout = draw(st.sampled_from(list(BAD_TIMEOUTS)))
    if bad_rank is not None and args["mpi_comm"] == "COMM_SELF":
        args["mpi_comm"] = "sub"  # over COMM_SELF the other ranks' Communicators do not hear of it, rightly
    fault = Fault(f"timeout={timeout!r}", BAD_TIMEOUTS[timeout], ("timeout",), bad_rank)
    return Case("Communicator", n, args, fault, {"timeout": timeout})


def build_communicator(sub: Any, case: Case, args: dict[str, Any]) -> Communicator:
    inner = communicator(sub, args["mpi_comm"])
    try:
        return Communicator(inner, timeout=args["timeout"])
    finally:
        release(inner)


def verify_communicator(sub: Any, case: Case, comm: Communicator) -> list[str]:
    alone = case.args["mpi_comm"] == "COMM_SELF"
    want = (0, 1) if alone else (sub.Get_rank(), sub.Get_size())
    timeout = case.args["timeout"]
    problems = [] if (comm.rank, comm.size) == want else [f"(rank, size) = {(comm.rank, comm.size)}, expected {want}"]
    if timeout is not None and comm.timeout != float(timeout):
        problems.append(f"timeout {comm.timeout}, expected {float(timeout)}")
    if comm.mpi.allgather(comm.rank) != list(range(comm.size)):
        problems.append("its duplicate does not reach the same ranks")
    return problems


# -- CartesianDecomposition ---------------------------------------------------------------------------------------


@st.composite
def cartesian_args(draw: Any, n: int, least: int = 1) -> dict[str, Any]:
    """Good arguments (in every accepted form) for a decomposition over ``n`` ranks; shapes at least ``least``
    points per dimension. Whether they fit together (grid, halo, shape) is predicted by cartesian_fits."""
    ndim = draw(st.integers(1, 3))
    halo = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(ndim))
    form = draw(st.sampled_from(["int", "numpy int", "per-dim", "pairs", "array pairs"]))
    if form in ("int", "numpy int"):
        halo = ((halo[0][0], halo[0][0]),) * ndim
        halo_arg: Any = halo[0][0] if form == "int" else np.int16(halo[0][0])
    elif form == "per-dim":
        halo = tuple((lo, lo) for lo, _ in halo)
        halo_arg = [np.int64(lo) for lo, _ in halo]
    else:
        halo_arg = [list(p) for p in halo] if form == "pairs" else np.array(halo)
    periodic = tuple(draw(st.booleans()) for _ in range(ndim))
    periodic_arg: Any = periodic
    if len(set(periodic)) == 1 and draw(st.booleans()):
        periodic_arg = np.bool_(periodic[0])
    grid_mode = draw(st.sampled_from(["none", "given", "partial"]))
    grid = None if grid_mode == "none" else draw(st.sampled_from(list(factorisations(n, ndim))))
    if grid_mode == "partial":
        grid = tuple(0 if draw(st.booleans()) else p for p in grid)
    shape = tuple(draw(st.integers(least, 10)) for _ in range(ndim))
    return {
        "comm": draw(st.sampled_from(["sub", "Communicator"])),
        "global_shape": shape if draw(st.booleans()) else np.array(shape),
        "shape": shape,
        "halo": halo_arg,
        "halo_pairs": halo,
        "periodic": periodic_arg,
        "periodic_flags": periodic,
        "proc_grid": grid if grid is None or draw(st.booleans()) else list(grid),
        "stencil": draw(st.sampled_from(["box", "star"])),
        "fields": draw(field_specs()),
        "transport": draw(st.sampled_from(sorted(TRANSPORT_CHOICES))),
    }


@st.composite
def field_specs(draw: Any, levels: bool = False) -> tuple[tuple[str, str, int], ...]:
    """1 or 2 fields: (dtype, order, levels); levels (trailing axis of an unstructured field) only if asked."""
    count = draw(st.integers(1, 2))
    return tuple(
        (draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF")), draw(st.integers(0, 3)) if levels else 0)
        for _ in range(count)
    )


def cartesian_fits(args: dict[str, Any], n: int) -> tuple[int, ...] | None:
    """The process grid the decomposition must use, or None when it must raise DecompositionError (the grid,
    halo and shape do not fit together): checks_property.predicted_grid."""
    grid = args["proc_grid"]
    case = SimpleNamespace(
        nranks=n,
        shape=args["shape"],
        halo=args["halo_pairs"],
        periodic=args["periodic_flags"],
        proc_grid=None if grid is None else tuple(grid),
    )
    return predicted_grid(case)


CartesianFault = tuple[str, Callable[[dict], Any], str, tuple[str, ...]]  # argument, bad value, error, words


def wrong_type(argument: str, make: Callable[[dict], Any]) -> CartesianFault:
    """``argument`` replaced by ``make(good arguments)``, a wrong type: ArgumentTypeError naming it."""
    return argument, make, "ArgumentTypeError", (argument,)


def wrong_value(argument: str, make: Callable[[dict], Any], *words: str) -> CartesianFault:
    """``argument`` replaced by ``make(good arguments)``, a bad value: DecompositionError naming it (and ``words``)."""
    return argument, make, "DecompositionError", (argument, *words)


# Faults of the decomposition's arguments: name -> (argument, value from the good arguments, errors, words).
CARTESIAN_FAULTS: dict[str, CartesianFault] = {
    "shape an int": wrong_type("global_shape", lambda a: 8),
    "shape a string": wrong_type("global_shape", lambda a: "88"),
    "shape None": wrong_type("global_shape", lambda a: None),
    "shape of floats": wrong_type("global_shape", lambda a: [n + 0.5 for n in a["shape"]]),
    "shape of bools": wrong_type("global_shape", lambda a: [True] * len(a["shape"])),
    "shape nested": wrong_type("global_shape", lambda a: [list(a["shape"])]),
    "shape 0-d array": wrong_type("global_shape", lambda a: np.array(8)),
    "shape zero": wrong_value("global_shape", lambda a: (*a["shape"][:-1], 0)),
    "shape negative": wrong_value("global_shape", lambda a: (-3, *a["shape"][1:])),
    "shape 4-D": wrong_value("global_shape", lambda a: (4, 4, 4, 4)),
    "shape empty": wrong_value("global_shape", lambda a: ()),
    "halo a float": wrong_type("halo", lambda a: 1.5),
    "halo a string": wrong_type("halo", lambda a: "1"),
    "halo None": wrong_type("halo", lambda a: None),
    "halo a bool": wrong_type("halo", lambda a: True),
    "halo of Nones": wrong_type("halo", lambda a: [None] * len(a["shape"])),
    "halo 0-d array": wrong_type("halo", lambda a: np.array(1)),
    "halo negative": wrong_value("halo", lambda a: -1, ">= 0"),
    "halo triples": wrong_value("halo", lambda a: [(1, 1, 1)] * len(a["shape"])),
    "halo per-dim, one too many": wrong_value("halo", lambda a: [1] * (len(a["shape"]) + 1)),
    "periodic None": wrong_type("periodic", lambda a: None),
    "periodic a string": wrong_type("periodic", lambda a: "yes"),
    "periodic an int": wrong_type("periodic", lambda a: 1),
    "periodic of ints": wrong_type("periodic", lambda a: [1] * len(a["shape"])),
    "periodic of Nones": wrong_type("periodic", lambda a: [None] * len(a["shape"])),
    "periodic one too many": wrong_value("periodic", lambda a: [True] * (len(a["shape"]) + 1)),
    "proc_grid an int": wrong_type("proc_grid", lambda a: 5),
    "proc_grid a string": wrong_type("proc_grid", lambda a: "1"),
    "proc_grid of floats": wrong_type("proc_grid", lambda a: [1.0] * len(a["shape"])),
    "proc_grid of Nones": wrong_type("proc_grid", lambda a: [None] * len(a["shape"])),
    "proc_grid negative": wrong_value("proc_grid", lambda a: [-1] * len(a["shape"])),
    "proc_grid one too many": wrong_value("proc_grid", lambda a: [0] * (len(a["shape"]) + 1)),
    "proc_grid of 5 ranks": wrong_value("proc_grid", lambda a: [5, *[1] * (len(a["shape"]) - 1)], "communicator"),
    "stencil unknown": wrong_value("stencil", lambda a: "cross", "'cross'"),
    "stencil empty": wrong_value("stencil", lambda a: ""),
    "stencil None": wrong_type("stencil", lambda a: None),
    "stencil a list": wrong_type("stencil", lambda a: ["box"]),
    **{f"comm {name}": ("comm", lambda a, name=name: name, error, ("mpi_comm",))
       for name, (_, error) in BAD_COMMS.items()},
}  # fmt: skip


@st.composite
def cartesian_cases(draw: Any, world: int) -> Case:
    """The decomposition is built without communication (and stand-in communicators build any rank's in one
    process), so every rank must be given the same arguments: faults go to every rank."""
    n = draw(st.integers(1, world))
    args = draw(cartesian_args(n))
    kind, _ = maybe_fault(draw, n, CARTESIAN_FAULTS, chance_of_none=3)
    if kind is None:
        if cartesian_fits(args, n) is None:  # grid, halo and shape do not fit: must raise, naming nothing more
            return Case("CartesianDecomposition", n, args, Fault("misfit", ("DecompositionError",)), seed=draw(seeds))
        return Case("CartesianDecomposition", n, args, seed=draw(seeds))
    name, value, error, words = CARTESIAN_FAULTS[kind]
    return Case("CartesianDecomposition", n, args, Fault(kind, (error,), words), {name: value(args)})


def build_cartesian(sub: Any, case: Case, args: dict[str, Any]) -> CartesianDecomposition:
    comm = communicator(sub, args["comm"])
    try:
        return CartesianDecomposition(
            comm, args["global_shape"], halo=args["halo"], periodic=args["periodic"], proc_grid=args["proc_grid"],
            stencil=args["stencil"],
        )  # fmt: skip
    except Exception:
        release(comm)
        raise


def close_decomposition(d: Any) -> None:
    """Close the decomposition's Communicator (the one it was given, or the one gridcomm keeps for ``sub``)."""
    d.comm.close()


def verify_cartesian(sub: Any, case: Case, d: CartesianDecomposition) -> list[str]:
    """The normalised arguments, then an exchange of the case's fields against the serial reference."""
    args = case.args
    got = (d.global_shape, d.halo, d.periodic, d.proc_grid)
    want = (args["shape"], args["halo_pairs"], args["periodic_flags"], cartesian_fits(args, case.nranks))
    problems = [] if got == want else [f"(global_shape, halo, periodic, proc_grid) = {got}, expected {want}"]
    if not sub.allreduce(not problems, op=MPI.LAND):
        return problems or ["another rank's decomposition is wrong"]
    fields, expected = cartesian_fields(d, args["fields"], case.seed)
    transport = TRANSPORT_CHOICES[args["transport"]]
    with HaloExchanger(d, fields, transport, timeout=EXCHANGE_TIMEOUT_S) as exchanger:
        return exchange_problems(exchanger, fields, expected, f"{args['fields']} over {args['transport']}")


Reference = tuple[list[np.ndarray], list[np.ndarray]]  # fields, and the cell bytes each must hold after an exchange


def cartesian_fields(d: CartesianDecomposition, specs: Any, seed: int) -> Reference:
    """Fields whose interior comes from random global arrays and whose halo holds sentinel bytes, and what
    harness.expected_cells says they must hold after an exchange."""
    globals_ = [random_global(d.global_shape, dtype, seed + i) for i, (dtype, _, _) in enumerate(specs)]
    fields = [local_with_sentinel(d, g, order) for g, (_, order, _) in zip(globals_, specs, strict=True)]
    return fields, [expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil) for g in globals_]


def exchange_problems(exchanger: Any, fields: list[np.ndarray], expected: list[np.ndarray], label: str) -> list[str]:
    """Collective: one exchange; every field must then hold its expected cell bytes."""
    exchanger.exchange()
    return [
        f"field {i} of {label}: {p}"
        for i, (f, want) in enumerate(zip(fields, expected, strict=True))
        if (p := describe_mismatch(f, want))
    ]


# -- UnstructuredDecomposition ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mesh:
    """Every rank's ids, as every rank knows them: node v has id stride * v + offset and belongs to owner[v];
    ``owned[r]`` and ``halo[r]`` are rank r's nodes in the order it hands them over."""

    stride: int
    offset: int
    owned: tuple[tuple[int, ...], ...]
    halo: tuple[tuple[int, ...], ...]

    def ids(self, nodes: Any) -> np.ndarray:
        return self.stride * np.asarray(nodes, dtype=np.int64) + self.offset

    @property
    def n_nodes(self) -> int:
        return sum(map(len, self.owned))


@st.composite
def meshes(draw: Any, n: int) -> Mesh:
    """Up to 24 nodes spread over ``n`` ranks (some may own none); each rank's halo a random subset of the
    others' nodes; ids dense or sparse (past int32)."""
    n_nodes = draw(st.integers(0, 24))
    rng = np.random.default_rng(draw(seeds))
    owner = rng.integers(0, n, n_nodes)
    owned = tuple(tuple(int(v) for v in rng.permutation(np.flatnonzero(owner == r))) for r in range(n))
    halo = tuple(
        tuple(int(v) for v in rng.permutation(np.flatnonzero((owner != r) & (rng.random(n_nodes) < 0.4))))
        for r in range(n)
    )
    stride, offset = draw(st.sampled_from([(1, 0), (3, 5), (7, 2**33)]))
    return Mesh(stride, offset, owned, halo)


ID_FORMS: dict[str, Callable[[np.ndarray], Any]] = {
    "list": lambda ids: ids.tolist(),
    "tuple": lambda ids: tuple(int(i) for i in ids),
    "int64": lambda ids: ids,
    "uint64": lambda ids: ids.astype(np.uint64),
    "big-endian": lambda ids: ids.astype(">i8"),
    "numpy ints": lambda ids: [np.int64(i) for i in ids],
}


def hand_over(ids: np.ndarray, form: str) -> Any:
    return ID_FORMS[form](ids)


IdFault = tuple[str, Callable[[np.ndarray, np.ndarray], Any], str, tuple[str, ...]]  # which, bad value, error, words


def bad_ids(which: str, make: Callable[[np.ndarray, np.ndarray], Any], error: str, *words: str) -> IdFault:
    """The ``which`` ("owned" or "halo") ids replaced by ``make(owned, halo)``: ``error`` naming the argument."""
    return which, make, error, (f"{which}_global_ids", *words)


def unstructured_faults(mesh: Mesh, rank: int | None, n: int) -> dict[str, IdFault]:
    """Faults of one rank's ids that fit this mesh, given to ``rank`` (None: every rank). Faults that only the
    ranks together can see are in GLOBAL_ID_FAULTS."""
    faults = {
        "owned None": bad_ids("owned", lambda o, h: None, "ArgumentTypeError"),
        "owned an int": bad_ids("owned", lambda o, h: 5, "ArgumentTypeError"),
        "owned a string": bad_ids("owned", lambda o, h: "0 1 2", "ArgumentTypeError"),
        "owned a set": bad_ids("owned", lambda o, h: set(o.tolist()), "ArgumentTypeError"),
        "owned a dict": bad_ids("owned", lambda o, h: dict.fromkeys(o.tolist()), "ArgumentTypeError"),
        "owned ragged": bad_ids("owned", lambda o, h: [[0], [1, 2]], "ArgumentTypeError"),
        "owned floats": bad_ids("owned", lambda o, h: np.append(o, 1).astype(float), "DecompositionError", "integer"),
        "owned bools": bad_ids("owned", lambda o, h: [True, False], "DecompositionError", "integer"),
        "owned 2-D": bad_ids("owned", lambda o, h: np.append(o, [0, 1]).reshape(-1, 1), "DecompositionError", "1-D"),
        "owned negative": bad_ids("owned", lambda o, h: np.append(o, -7), "DecompositionError", "negative"),
        "owned beyond int64": bad_ids(
            "owned", lambda o, h: np.append(o.astype(np.uint64), np.uint64(2**63 + 1)), "DecompositionError", "int64"
        ),
        "halo None": bad_ids("halo", lambda o, h: None, "ArgumentTypeError"),
        "halo floats": bad_ids("halo", lambda o, h: [0.5], "DecompositionError", "integer"),
        "halo negative": bad_ids("halo", lambda o, h: np.append(h, -1), "DecompositionError", "negative"),
    }
    bad_ranks = range(n) if rank is None else [rank]
    if all(mesh.owned[r] for r in bad_ranks):
        faults["owned twice"] = bad_ids(
            "owned", lambda o, h: np.append(o, o[-1]), "DecompositionError", "more than once"
        )
        faults["halo of its own id"] = (
            "halo",
            lambda o, h: np.append(h, o[0]),
            "DecompositionError",
            ("both owned and in the halo",),
        )
    if all(mesh.halo[r] for r in bad_ranks):
        faults["halo twice"] = bad_ids("halo", lambda o, h: np.append(h, h[0]), "DecompositionError", "more than once")
    return faults


GLOBAL_ID_FAULTS = ("owned by two ranks", "halo owned by nobody")


@st.composite
def unstructured_cases(draw: Any, world: int) -> Case:
    n = draw(st.integers(1, world))
    mesh = draw(meshes(n))
    args = {
        "comm": draw(st.sampled_from(["sub", "Communicator"])),
        "mesh": mesh,
        "form": draw(st.sampled_from(sorted(ID_FORMS))),
        "fields": draw(field_specs(levels=True)),
        "transport": draw(st.sampled_from(sorted(TRANSPORT_CHOICES))),
    }
    rank = draw(st.sampled_from([None, *range(n)])) if n > 1 else None
    local = unstructured_faults(mesh, rank, n)
    kind, _ = maybe_fault(draw, n, [*local, *GLOBAL_ID_FAULTS])
    if kind is None:
        return Case("UnstructuredDecomposition", n, args, seed=draw(seeds))
    if kind in GLOBAL_ID_FAULTS:
        return global_id_fault_case(draw, n, args, kind)
    what, _value, error, words = local[kind]
    return Case("UnstructuredDecomposition", n, args, Fault(kind, (error,), words, rank), {"fault": what})


def global_id_fault_case(draw: Any, n: int, args: dict[str, Any], kind: str) -> Case:
    """An id two ranks own (rank r also takes one of rank q's), or a halo id beyond every owned one: every rank
    must raise DecompositionError naming the id."""
    mesh: Mesh = args["mesh"]
    rank = draw(st.sampled_from(range(n)))
    # Another rank's node that is not in this rank's halo: owning a node of its own halo is a second fault
    # there, which that rank reports first (as it should).
    in_halo = {int(node) for node in mesh.halo[rank]}
    others = [int(node) for r in range(n) if r != rank for node in mesh.owned[r] if int(node) not in in_halo]
    if kind == "owned by two ranks" and others:
        node = draw(st.sampled_from(others))
        fault = Fault(kind, ("DecompositionError",), (str(int(mesh.ids([node])[0])), "owner"), rank, True)
        return Case("UnstructuredDecomposition", n, args, fault, {"extra owned node": node})
    node = mesh.n_nodes + draw(st.integers(0, 3))  # no rank owns it
    fault = Fault("halo owned by nobody", ("DecompositionError",), (str(int(mesh.ids([node])[0])), "no rank owns"),
                  rank, True)  # fmt: skip
    return Case("UnstructuredDecomposition", n, args, fault, {"extra halo node": node})


def unstructured_ids(case: Case, args: dict[str, Any], rank: int) -> tuple[Any, Any]:
    """This rank's (owned, halo) arguments: the mesh's ids in the case's form, with the fault's changes."""
    mesh: Mesh = args["mesh"]
    owned_nodes = list(mesh.owned[rank]) + ([args["extra owned node"]] if "extra owned node" in args else [])
    halo_nodes = list(mesh.halo[rank]) + ([args["extra halo node"]] if "extra halo node" in args else [])
    owned, halo = mesh.ids(owned_nodes), mesh.ids(halo_nodes)
    if "fault" in args:
        what, value, _, _ = unstructured_faults(mesh, case.fault.bad_rank, case.nranks)[case.fault.what]
        bad = value(owned, halo)
        return (bad, hand_over(halo, args["form"])) if what == "owned" else (hand_over(owned, args["form"]), bad)
    return hand_over(owned, args["form"]), hand_over(halo, args["form"])


def build_unstructured(sub: Any, case: Case, args: dict[str, Any]) -> UnstructuredDecomposition:
    comm = communicator(sub, args["comm"])
    try:
        return UnstructuredDecomposition(comm, *unstructured_ids(case, args, sub.Get_rank()))
    except Exception:
        release(comm)
        raise


def verify_unstructured(sub: Any, case: Case, d: UnstructuredDecomposition) -> list[str]:
    """Sizes and ids, then an exchange: every halo row must hold its id's row of the global array, bit for bit,
    owned rows untouched."""
    mesh: Mesh = case.args["mesh"]
    rank = sub.Get_rank()
    owned, halo = mesh.owned[rank], mesh.halo[rank]
    problems = []
    if (d.n_owned, d.n_halo) != (len(owned), len(halo)) or not np.array_equal(d.halo_global_ids, mesh.ids(halo)):
        problems.append(
            f"(n_owned, n_halo) = {(d.n_owned, d.n_halo)} or halo ids differ; expected {len(owned), len(halo)}"
        )
    if not sub.allreduce(not problems, op=MPI.LAND):
        return problems or ["another rank's decomposition is wrong"]
    fields, expected = unstructured_fields(mesh, rank, case.args["fields"], case.seed)
    transport = TRANSPORT_CHOICES[case.args["transport"]]
    with HaloExchanger(d, fields, transport, timeout=EXCHANGE_TIMEOUT_S) as exchanger:
        return exchange_problems(exchanger, fields, expected, f"{case.args['fields']} over {case.args['transport']}")


def unstructured_fields(mesh: Mesh, rank: int, specs: Any, seed: int) -> Reference:
    """Fields whose owned rows come from random global arrays (by node) and whose halo rows hold sentinel bytes,
    and the rows they must hold after an exchange: every local row its node's row of the global array."""
    nodes = np.array(mesh.owned[rank] + mesh.halo[rank], dtype=np.int64)
    n_owned = len(mesh.owned[rank])
    fields, expected = [], []
    for i, (dtype, order, levels) in enumerate(specs):
        g = random_global((mesh.n_nodes, *((levels,) if levels else ())), dtype, seed + i)
        f = np.empty((len(nodes), *g.shape[1:]), dtype=g.dtype, order=order)
        cell_bytes(f)[...] = SENTINEL_BYTE
        cell_bytes(f)[:n_owned] = cell_bytes(g)[nodes[:n_owned]]
        fields.append(f)
        expected.append(cell_bytes(g)[nodes])
    return fields, expected


# -- HaloExchanger ------------------------------------------------------------------------------------------------

# Field faults: name -> (errors, words; "{i}" stands for the field's index). make_field makes the field.
FIELD_FAULTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    **{f"dtype {dt}": (("FieldError",), ("field {i}", "dtype")) for dt in BAD_DTYPES},
    "one row more": (("FieldError",), ("field {i}", "shape")),
    "an axis less": (("FieldError",), ("field {i}", "shape")),
    "0-d": (("FieldError",), ("field {i}", "shape")),
    "strided view": (("FieldError",), ("field {i}", "not contiguous")),
    "reversed view": (("FieldError",), ("field {i}", "not contiguous")),
    "read-only": (("FieldError",), ("field {i}", "read-only")),
    "None": (("FieldError",), ("field {i}", "not an array")),
    "an int": (("FieldError",), ("field {i}", "not an array")),
    "a string": (("FieldError",), ("field {i}", "not an array")),
    "nested lists": (("FieldError",), ("field {i}", "not an array")),
    "a dict": (("FieldError",), ("field {i}", "not an array")),
}
# Views that need two rows to be strided (a view of one row is contiguous whatever its strides).
STRIDED_FAULTS = ("strided view", "reversed view")
BAD_TRANSPORTS: dict[Any, tuple[tuple[str, ...], tuple[str, ...]]] = {  # value -> (errors, words)
    "carrier-pigeon": (("TransportError",), ("carrier-pigeon", "unknown")),
    "MPI": (("TransportError",), ("'MPI'", "unknown")),
    "": (("TransportError",), ("unknown",)),
    "nccl": (("TransportError",), ("nccl", "GPU")),
    "staged": (("TransportError",), ("staged", "GPU")),
    None: (("ArgumentTypeError",), ("transport",)),
    5: (("ArgumentTypeError",), ("transport",)),
    ("mpi",): (("ArgumentTypeError",), ("transport",)),
    b"mpi": (("ArgumentTypeError",), ("transport",)),
}


def bad_transport(value: Any, rank: int | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The errors and words a bad transport must raise: a transport's name given to one rank only (the others
    ask for another) makes the ranks disagree before it is found unusable here."""
    if rank is not None and value in gridcomm.transports.names():
        return ("PatternError",), ("transports",)
    return BAD_TRANSPORTS[value]


EXCHANGER_TIMEOUTS = (EXCHANGE_TIMEOUT_S, int(EXCHANGE_TIMEOUT_S), np.float64(EXCHANGE_TIMEOUT_S))


def with_halo(args: dict[str, Any], width: int) -> dict[str, Any]:
    return {**args, "halo": width, "halo_pairs": ((width, width),) * len(args["shape"])}


@st.composite
def exchanger_cases(draw: Any, world: int) -> Case:
    """A good decomposition (Cartesian with at least 2 interior points and a halo on every axis, or an
    unstructured mesh), fields in a list, a tuple or alone; one fault in a field, the field list, the
    transport, the timeout or the decomposition, on one rank or every rank; or ranks that disagree."""
    n = draw(st.integers(1, world))
    kind = draw(st.sampled_from(["cartesian", "unstructured"]))
    if kind == "cartesian":
        width = draw(st.integers(1, 2))
        good = cartesian_args(n, least=8).map(lambda a: with_halo(a, width))
        decomposition = draw(good.filter(lambda a: cartesian_fits(a, n) is not None))
    else:
        decomposition = {"comm": "sub", "mesh": draw(meshes(n)), "form": "int64"}
    args = {
        "kind": kind,
        "decomposition": decomposition,
        "fields": draw(field_specs(levels=kind == "unstructured")),
        "container": draw(st.sampled_from(["list", "tuple", "alone"])),
        "transport": draw(st.sampled_from(sorted(TRANSPORT_CHOICES))),
        "timeout": draw(st.sampled_from(EXCHANGER_TIMEOUTS)),
    }
    if args["container"] == "alone":
        args["fields"] = args["fields"][:1]
    fault, bad = draw(exchanger_fault(n, args))
    return Case("HaloExchanger", n, args, fault, bad, draw(seeds))


def local_rows(args: dict[str, Any], rank: int | None) -> int:
    """The fewest rows a local field has on ``rank`` (None: on any rank)."""
    if args["kind"] == "cartesian":
        return 3  # at least 2 interior points and a halo point
    mesh: Mesh = args["decomposition"]["mesh"]
    ranks = range(len(mesh.owned)) if rank is None else [rank]
    return min(len(mesh.owned[r]) + len(mesh.halo[r]) for r in ranks)


@st.composite
def exchanger_fault(draw: Any, n: int, args: dict[str, Any]) -> tuple[Fault | None, dict[str, Any]]:
    kinds = ["field", "empty", "transport", "timeout", "decomposition"] + ["disagree"] * (n > 1)
    kind, rank = maybe_fault(draw, n, kinds, chance_of_none=5)
    if kind is None:
        return None, {}
    if kind == "field":
        i = draw(st.integers(0, len(args["fields"]) - 1))
        name = draw(st.sampled_from(sorted(FIELD_FAULTS)))
        if name == "an axis less" and args["kind"] == "unstructured":
            name = "0-d"  # trailing axes are optional: an unstructured field may lose its levels
        if name in STRIDED_FAULTS and local_rows(args, rank) < 2:
            name = "one row more"
        errors, words = FIELD_FAULTS[name]
        return Fault(f"field {i}: {name}", errors, tuple(w.format(i=i) for w in words), rank), {"bad field": (i, name)}
    if kind == "empty":
        return Fault("no fields", ("FieldError",), ("empty",), rank), {"container": "empty"}
    if kind == "transport":
        value = draw(st.sampled_from(list(BAD_TRANSPORTS)))
        return Fault(f"transport={value!r}", *bad_transport(value, rank), rank), {"transport": ("raw", value)}
    if kind == "timeout":
        value = draw(st.sampled_from(list(BAD_TIMEOUTS)))
        return Fault(f"timeout={value!r}", BAD_TIMEOUTS[value], ("timeout",), rank), {"timeout": value}
    if kind == "decomposition":  # raised before anything collective: on every rank
        value = draw(st.sampled_from([None, 5, "decomposition"]))
        return Fault(f"decomposition={value!r}", ("ArgumentTypeError",), ("decomposition",)), {
            "bad decomposition": value
        }
    return draw(disagreement(n, args))


@st.composite
def disagreement(draw: Any, n: int, args: dict[str, Any]) -> tuple[Fault, dict[str, Any]]:
    """One rank passes good arguments that differ from the others': every rank must raise PatternError."""
    rank = draw(st.integers(0, n - 1))
    specs = args["fields"]
    i = draw(st.integers(0, len(specs) - 1))
    dtype, order, levels = specs[i]
    choices = ["dtype", "transport"] + ["count"] * (args["container"] != "alone")
    if args["kind"] == "cartesian":
        choices.append("decomposition")
        if len(args["decomposition"]["shape"]) > 1:
            choices.append("order")  # at least 3 points on every axis: C and Fortran order differ
    what = draw(st.sampled_from(choices))
    if what == "decomposition":
        other = draw(other_decomposition(n, args["decomposition"]))
        fault = Fault(
            f"decomposition {other} on rank {rank}",
            ("PatternError",),
            # the decomposition's constructor sees most differences, the exchanger those of sub-communicators
            (("different decompositions", "different arguments to CartesianDecomposition"),),
            rank,
            True,
        )
        return fault, {"decomposition": {**args["decomposition"], **other}}
    if what == "transport":
        other = draw(st.sampled_from([t for t in sorted(TRANSPORT_CHOICES) if t != args["transport"]]))
        return Fault(f"transport {other} on rank {rank}", ("PatternError",), ("transports",), rank, True), {
            "transport": other
        }
    if what == "count":
        fields, words = (specs + specs[:1] if len(specs) == 1 else specs[:1]), ("numbers of fields",)
    elif what == "order":
        fields, words = (*specs[:i], (dtype, "CF".replace(order, ""), levels), *specs[i + 1 :]), ("ordered",)
    else:
        other = draw(st.sampled_from([d for d in DTYPES if np.dtype(d) != np.dtype(dtype)]))
        fields, words = (*specs[:i], (other, order, levels), *specs[i + 1 :]), ("different dtypes",)
    return Fault(f"fields {fields} on rank {rank}", ("PatternError",), words, rank, True), {"fields": fields}


@st.composite
def other_decomposition(draw: Any, n: int, good: dict[str, Any]) -> dict[str, Any]:
    """Changes to good Cartesian arguments that still fit but make another decomposition: the other stencil,
    periodicity flipped in the first dimension, or another process grid (ranks that chose different grids
    would exchange messages of the same sizes into the wrong halos)."""
    grid = cartesian_fits(good, n)
    grids = [g for g in factorisations(n, len(grid)) if g != grid]
    what = draw(st.sampled_from(["stencil", "periodic"] + ["proc_grid"] * bool(grids)))
    if what == "stencil":
        return {"stencil": "star" if good["stencil"] == "box" else "box"}
    if what == "periodic":
        flags = (not good["periodic_flags"][0], *good["periodic_flags"][1:])
        return {"periodic": flags, "periodic_flags": flags}
    return {"proc_grid": draw(st.sampled_from(grids))}


def make_field(good: np.ndarray, fault: str) -> Any:
    """What ``fault`` (a FIELD_FAULTS name) makes of the good field ``good``."""
    order = "F" if good.flags.f_contiguous and not good.flags.c_contiguous else "C"
    shape, dtype = good.shape, good.dtype
    if fault.startswith("dtype "):
        return np.zeros(shape, dtype=fault.removeprefix("dtype "), order=order)
    makers: dict[str, Callable[[], Any]] = {
        "one row more": lambda: np.zeros((shape[0] + 1, *shape[1:]), dtype=dtype, order=order),
        "an axis less": lambda: np.zeros(shape[:-1], dtype=dtype, order=order),
        "0-d": lambda: np.zeros((), dtype=dtype),
        "strided view": lambda: np.zeros((2 * shape[0], *shape[1:]), dtype=dtype, order=order)[::2],
        "reversed view": lambda: good[::-1],
        "read-only": lambda: read_only(good),
        "None": lambda: None,
        "an int": lambda: 3,
        "a string": lambda: "field",
        "nested lists": lambda: good.tolist(),
        "a dict": lambda: {"field": good},
    }
    return makers[fault]()


def read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def transport_of(value: Any) -> Any:
    """A TRANSPORT_CHOICES key's transport, or a bad value as given (("raw", value))."""
    return value[1] if isinstance(value, tuple) and value[:1] == ("raw",) else TRANSPORT_CHOICES[value]


@dataclass
class Built:
    """What one HaloExchanger example built: the decomposition, the fields, what they must hold after an
    exchange, and the exchanger."""

    decomposition: Any
    fields: list[np.ndarray]
    expected: list[np.ndarray]
    exchanger: Any = None


def reference_fields(d: Any, case: Case, args: dict[str, Any], rank: int) -> Reference:
    if case.args["kind"] == "cartesian":
        return cartesian_fields(d, args["fields"], case.seed)
    return unstructured_fields(case.args["decomposition"]["mesh"], rank, args["fields"], case.seed)


def build_exchanger(sub: Any, case: Case, args: dict[str, Any]) -> Built:
    settings = args["decomposition"]
    if case.args["kind"] == "cartesian":
        d = build_cartesian(sub, replace(case, args=settings), settings)
    else:
        d = build_unstructured(sub, replace(case, args=settings, fault=None), settings)
    built = Built(d, *reference_fields(d, case, args, sub.Get_rank()))
    fields: list[Any] = list(built.fields)
    if "bad field" in args:
        i, name = args["bad field"]
        fields[i] = make_field(fields[i], name)
    given = {"list": fields, "tuple": tuple(fields), "alone": fields[0], "empty": []}[args["container"]]
    target = args.get("bad decomposition", d)
    try:
        built.exchanger = HaloExchanger(target, given, transport_of(args["transport"]), timeout=args["timeout"])
    except Exception:
        close_decomposition(d)
        raise
    return built


def close_exchanger(built: Built) -> None:
    built.exchanger.close()
    close_decomposition(built.decomposition)


def verify_exchanger(sub: Any, case: Case, built: Built) -> list[str]:
    """The exchanger as built (fields in the case's container, transport and timeout): one exchange, checked
    against the serial reference of the decomposition's kind."""
    label = f"{case.args['fields']} ({case.args['container']}) over {case.args['transport']}"
    return exchange_problems(built.exchanger, built.fields, built.expected, label)


# -- Transposer and Transposer.from_counts ------------------------------------------------------------------------

# name -> (errors, words) of the faults of a transposition's arguments; apply_transposer_fault makes them.
TRANSPOSER_FAULTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # the plan as counts
    "counts disagree": (("PatternError",), ("sends", "expects")),
    "negative count": (("PatternError",), ("negative",)),
    "counts one too many": (("PatternError",), ("entries",)),
    "counts of floats": (("PatternError", "ArgumentTypeError"), ("counts",)),
    "counts a dict": (("PatternError", "ArgumentTypeError"), ("counts",)),
    "counts None": (("PatternError", "ArgumentTypeError"), ("counts",)),
    "counts 2-D": (("PatternError", "ArgumentTypeError"), ("counts",)),
    "displacement beyond the array": (("PatternError",), ("outside",)),
    # the plan as boxes
    "peer out of range": (("PatternError",), ("names rank",)),
    "peer not an int": (("PatternError", "ArgumentTypeError"), ("key",)),
    "not a Box": (("PatternError", "ArgumentTypeError"), ("Box",)),
    "Box of ints": (("PatternError", "ArgumentTypeError"), ("corners",)),
    "Box reversed": (("PatternError",), ("start",)),
    "Box with 4 axes": (("PatternError",), ("axes",)),
    "Box outside": (("PatternError",), ("outside",)),
    "receive boxes overlap": (("PatternError",), ("overlap",)),
    "plan a list": (("PatternError", "ArgumentTypeError"), ("map",)),
    # the arrays
    "dtypes differ": (("FieldError",), ("dtype",)),
    "orders differ": (("FieldError",), ("order",)),
    "destination read-only": (("FieldError",), ("read-only",)),
    "destination shares memory": (("FieldError",), ("memory",)),
    "source 0-d": (("FieldError",), ("0-dimensional",)),
    "source not an array": (("FieldError",), ("not an array",)),
    "source strided": (("FieldError",), ("not contiguous",)),
    "source dtype object": (("FieldError",), ("dtype",)),
    "one destination less": (("FieldError",), ("destination",)),
    "no sources": (("FieldError",), ("empty",)),
    "dtypes differ between ranks": (("PatternError",), ("different dtypes",)),
    # the options
    "transport unknown": (("TransportError",), ("unknown",)),
    "transport None": (("ArgumentTypeError",), ("transport",)),
    "transport nccl": (("TransportError",), ("nccl",)),
    "transport differs between ranks": (("PatternError",), ("transports",)),
    "timeout nan": (("ArgumentError",), ("timeout",)),
    "timeout a string": (("ArgumentError", "ArgumentTypeError"), ("timeout",)),
}
COUNT_FAULTS = {k for k in TRANSPOSER_FAULTS if "count" in k or "displacement" in k}
BOX_FAULTS = {
    k for k in TRANSPOSER_FAULTS if "Box" in k or "peer" in k or k in ("receive boxes overlap", "plan a list")
}
# Good arguments on one rank that differ from the others': only the ranks together can tell (so not on 1 rank).
BETWEEN_RANKS_FAULTS = {"dtypes differ between ranks", "transport differs between ranks"}
TRANSPOSER_TRANSPORTS = ("auto", *HOST_TRANSPORTS, "p2p/datatype", "neighbor/copy")


@st.composite
def transposer_cases(draw: Any, world: int) -> Case:
    """An all-to-all(v) with counts[s][d] first-axis entries from rank s to rank d (zeros included), blocks
    packed or with gaps, 1-2 fields with 0-2 trailing axes; handed over as counts (from_counts) or boxes."""
    n = draw(st.integers(1, world))
    counts = [[draw(st.integers(0, 3)) for _ in range(n)] for _ in range(n)]
    gap = draw(st.integers(0, 2))
    nfields = draw(st.integers(1, 2))
    args = {
        "form": draw(st.sampled_from(["counts", "boxes"])),
        "counts": counts,
        "send_displs": [[sum(counts[s][:d]) + gap * d for d in range(n)] for s in range(n)],
        "recv_displs": [[sum(counts[s][d] for s in range(q)) + gap * q for q in range(n)] for d in range(n)],
        "packed": gap == 0 and draw(st.booleans()),  # from_counts without displacements; arrays without slack
        "trailing": tuple(draw(st.lists(st.integers(1, 3), max_size=2))),
        "fields": tuple((draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF"))) for _ in range(nfields)),
        "alone": nfields == 1 and draw(st.booleans()),
        "transport": draw(st.sampled_from(TRANSPOSER_TRANSPORTS)),
        "timeout": draw(st.sampled_from(EXCHANGER_TIMEOUTS)),
        "comm": draw(st.sampled_from(["sub", "Communicator"])),
    }
    faults = [k for k in TRANSPOSER_FAULTS if n > 1 or k not in BETWEEN_RANKS_FAULTS]
    kind, rank = maybe_fault(draw, n, faults)
    if kind is None:
        return Case("Transposer", n, args, seed=draw(seeds))
    # Faults need non-empty arrays (slack rows) and the plan in the form they break.
    args["packed"] = False
    args["form"] = "counts" if kind in COUNT_FAULTS else "boxes" if kind in BOX_FAULTS else args["form"]
    everywhere = kind in BETWEEN_RANKS_FAULTS or kind == "counts disagree"
    if everywhere:
        rank = draw(st.integers(0, n - 1))
    errors, words = bad_transport("nccl", rank) if kind == "transport nccl" else TRANSPOSER_FAULTS[kind]
    fault = Fault(kind, errors, words, rank, everywhere)
    return Case("Transposer", n, args, fault, {"fault": kind}, draw(seeds))


def transposer_arrays(args: dict[str, Any], rank: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """This rank's sources (random bits) and destinations (sentinel bytes): room for every block, and a row of
    slack unless packed."""
    counts, n, trailing = args["counts"], len(args["counts"]), args["trailing"]
    if args["packed"]:
        send_len, recv_len = sum(counts[rank]), sum(counts[s][rank] for s in range(n))
    else:
        send_len = args["send_displs"][rank][-1] + counts[rank][-1] + 1
        recv_len = args["recv_displs"][rank][-1] + counts[-1][rank] + 1
    sources = [
        filled((send_len, *trailing), dt, order, seed + 7 * rank + i) for i, (dt, order) in enumerate(args["fields"])
    ]
    return sources, [sentinel((recv_len, *trailing), dt, order) for dt, order in args["fields"]]


def transposer_plan(args: dict[str, Any], rank: int) -> tuple[dict, dict]:
    """This rank's (send, recv) boxes of the counts plan (checks_transpose.counts_plan)."""
    return counts_plan(args["counts"], args["send_displs"], args["recv_displs"], rank, args["trailing"])


def retyped(a: np.ndarray) -> np.ndarray:
    """A zeroed array of ``a``'s shape and memory order but another dtype."""
    other = "int16" if a.dtype.itemsize != 2 else "float32"
    return np.zeros(a.shape, dtype=other, order="F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C")


def strided(a: np.ndarray) -> np.ndarray:
    """A strided view with one row more than ``a`` (two rows at least, so that it is not contiguous)."""
    return np.zeros((2 * (a.shape[0] + 1), *a.shape[1:]), dtype=a.dtype)[::2]


def apply_transposer_fault(fault: str, call: dict[str, Any]) -> None:
    """Change one rank's Transposer call (``call``: its arguments by name) as ``fault`` says."""
    sources, destinations = call["sources"], call["destinations"]
    last = destinations[0].ndim

    def rows_3x2(arrays: list[np.ndarray], order: str) -> list[np.ndarray]:
        return [np.zeros((a.shape[0], 3, 2), a.dtype, order=order) for a in arrays]

    edits: dict[str, Callable[[], Any]] = {
        "counts disagree": lambda: call.update(send_counts=[*call["send_counts"][:-1], call["send_counts"][-1] + 1]),
        "negative count": lambda: call.update(recv_counts=[-1, *call["recv_counts"][1:]]),
        "counts one too many": lambda: call.update(send_counts=[*call["send_counts"], 0]),
        "counts of floats": lambda: call.update(send_counts=[c + 0.5 for c in call["send_counts"]]),
        "counts a dict": lambda: call.update(send_counts=dict(enumerate(call["send_counts"]))),
        "counts None": lambda: call.update(recv_counts=None),
        "counts 2-D": lambda: call.update(send_counts=np.array([call["send_counts"]])),
        "displacement beyond the array": lambda: call.update(
            send_displs=[len(sources[0]) + 1] * len(call["send_counts"]), send_counts=[1] * len(call["send_counts"])
        ),
        "peer out of range": lambda: call["send"].update({10**6: Box((0,) * last, (1,) * last)}),
        "peer not an int": lambda: call["send"].update({"0": Box((0,) * last, (1,) * last)}),
        "not a Box": lambda: call["recv"].update({0: [((0,) * last, (1,) * last)]}),
        "Box of ints": lambda: call["send"].update({0: Box(0, 1)}),
        "Box reversed": lambda: call["recv"].update({0: Box((1,) * last, (0,) * last)}),
        "Box with 4 axes": lambda: call["send"].update({0: Box((0,) * 4, (1,) * 4)}),
        "Box outside": lambda: call["recv"].update({0: Box((0,) * last, (10**6,) * last)}),
        "receive boxes overlap": lambda: call["recv"].update({0: [whole(destinations[0])] * 2}),
        "plan a list": lambda: call.update(send=list(call["send"].values())),
        "dtypes differ": lambda: call.update(destinations=[retyped(d) for d in destinations]),
        "orders differ": lambda: call.update(sources=rows_3x2(sources, "C"), destinations=rows_3x2(destinations, "F")),
        "destination read-only": lambda: [read_only(d) for d in destinations],
        "destination shares memory": lambda: call.update(destinations=[s.view() for s in sources]),
        "source 0-d": lambda: call.update(sources=[np.zeros((), s.dtype) for s in sources]),
        "source not an array": lambda: call.update(sources=[s.tolist() for s in sources]),
        "source strided": lambda: call.update(sources=[strided(s) for s in sources]),
        "source dtype object": lambda: call.update(sources=[s.astype(object) for s in sources]),
        "one destination less": lambda: call.update(destinations=destinations[:-1]),
        "no sources": lambda: call.update(sources=[]),
        "dtypes differ between ranks": lambda: call.update(
            sources=[retyped(s) for s in sources], destinations=[retyped(d) for d in destinations]
        ),
        "transport unknown": lambda: call.update(transport="carrier-pigeon"),
        "transport None": lambda: call.update(transport=None),
        "transport nccl": lambda: call.update(transport="nccl"),
        "transport differs between ranks": lambda: call.update(transport=other_transport(call["transport"])),
        "timeout nan": lambda: call.update(timeout=float("nan")),
        "timeout a string": lambda: call.update(timeout="soon"),
    }  # fmt: skip
    edits[fault]()


def other_transport(transport: Any) -> str:
    return "cma" if transport == "mpi" else "mpi"


def whole(a: np.ndarray) -> Box:
    return Box((0,) * a.ndim, tuple(a.shape))


def transposer_call(sub: Any, case: Case, args: dict[str, Any]) -> dict[str, Any]:
    """This rank's arguments, by name, with its fault applied."""
    rank, n = sub.Get_rank(), case.nranks
    sources, destinations = transposer_arrays(args, rank, case.seed)
    call: dict[str, Any] = {
        "comm": communicator(sub, args["comm"]),
        "sources": sources,
        "destinations": destinations,
        "transport": transport_of(args["transport"]),
        "timeout": args["timeout"],
    }
    if args["form"] == "counts":
        call["send_counts"] = list(args["counts"][rank])
        call["recv_counts"] = [args["counts"][s][rank] for s in range(n)]
        call["send_displs"] = None if args["packed"] else list(args["send_displs"][rank])
        call["recv_displs"] = None if args["packed"] else list(args["recv_displs"][rank])
    else:
        call["send"], call["recv"] = transposer_plan(args, rank)
    if "fault" in args:
        apply_transposer_fault(args["fault"], call)
    return call


@dataclass
class Transposition:
    transposer: Any
    comm: Any
    sources: list[np.ndarray]
    destinations: list[np.ndarray]


def build_transposer(sub: Any, case: Case, args: dict[str, Any]) -> Transposition:
    call = transposer_call(sub, case, args)
    sources, destinations = call["sources"], call["destinations"]
    # One array is passed bare; not a Python list, which the API reads as the list of arrays (by design).
    if args["alone"] and len(sources) == 1 and len(destinations) == 1 and not isinstance(sources[0], list):
        sources, destinations = sources[0], destinations[0]
    options = {"transport": call["transport"], "timeout": call["timeout"]}
    try:
        if args["form"] == "counts":
            made = Transposer.from_counts(
                call["comm"], call["send_counts"], call["send_displs"], call["recv_counts"], call["recv_displs"],
                sources, destinations, **options,
            )  # fmt: skip
        else:
            made = Transposer(call["comm"], call["send"], call["recv"], sources, destinations, **options)
    except Exception:
        release(call["comm"])
        raise
    return Transposition(made, call["comm"], call["sources"], call["destinations"])


def verify_transposer(sub: Any, case: Case, t: Transposition) -> list[str]:
    """One exchange against checks_transpose's serial reference (every rank's sources gathered)."""
    args = case.args
    initials = [d.copy(order="A") for d in t.destinations]
    t.transposer.exchange()
    plans = [transposer_plan(args, r) for r in range(case.nranks)]
    orders = [order for _, order in args["fields"]]
    label = f"{args['form']} over {args['transport']}"
    return gathered_problems(sub, t.sources, t.destinations, initials, plans, orders, label)


def close_transposer(t: Transposition) -> None:
    t.transposer.close()
    release(t.comm)


# -- the checks ---------------------------------------------------------------------------------------------------

CONSTRUCTORS: dict[str, Constructor] = {
    "Communicator": Constructor(communicator_cases, build_communicator, verify_communicator, release, 120),
    "CartesianDecomposition": Constructor(cartesian_cases, build_cartesian, verify_cartesian, close_decomposition, 250),
    "UnstructuredDecomposition": Constructor(
        unstructured_cases, build_unstructured, verify_unstructured, close_decomposition, 250
    ),
    "HaloExchanger": Constructor(exchanger_cases, build_exchanger, verify_exchanger, close_exchanger, 300),
    "Transposer": Constructor(transposer_cases, build_transposer, verify_transposer, close_transposer, 300),
}


def fuzz(comm: Any, name: str) -> None:
    """Collective: the property for constructor ``name`` (harness.run_property)."""
    constructor = CONSTRUCTORS[name]
    run_property(
        comm,
        constructor.cases(comm.Get_size()),
        run_case,
        constructor.examples,
        tally={"with a fault": lambda case: case.fault is not None},
    )


def check_fuzz_communicator(comm: Any) -> None:
    fuzz(comm, "Communicator")


def check_fuzz_cartesian_decomposition(comm: Any) -> None:
    fuzz(comm, "CartesianDecomposition")


def check_fuzz_unstructured_decomposition(comm: Any) -> None:
    fuzz(comm, "UnstructuredDecomposition")


def check_fuzz_halo_exchanger(comm: Any) -> None:
    fuzz(comm, "HaloExchanger")


def check_fuzz_transposer(comm: Any) -> None:
    fuzz(comm, "Transposer")
