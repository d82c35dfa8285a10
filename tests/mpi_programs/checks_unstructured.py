"""Unstructured halo exchanges (gridcomm.UnstructuredDecomposition) against a serial reference, and bad input.

tests/test_mpi.py launches the property and the known case on 6 ranks and the bad-input checks on 1, 2 and 3;
tests/test_gpu.py runs the whole module with GRIDCOMM_CHECK_DEVICE=gpu (harness.HaloExchanger then exchanges
GPU copies of the fields), so every check here works on any world size.

Property (harness.run_property): each example draws a rank count (harness.rank_counts), a mesh, either a small
octahedral median-dual mesh (O1..O6, its edges as the graph) or random nodes with a random graph; global ids
0..V-1, a permutation of them, or sparse ones (an affine map of 0..V-1, up to beyond 2**40); an owner per node
(random with no empty part, or equal_regions); each part's halo (1 or 2 layers of graph neighbours, or a random
subset of other parts' ids); both id lists in a random order and form; 1-3 fields (1-D or with 1-4 levels, C or
Fortran order, any dtype), on one row set or, with several fields, on two (a second decomposition of the same
owned ids keeping a random part of the halo, as a mesh's edges beside its nodes: one exchanger over fields of
different rows); a transport; 1-2 rounds. After every exchange each local row must hold, bit for bit,
the global array's row of its id: owned rows untouched, halo rows overwritten (they start as sentinel bytes).
With ids 0..V-1, gather and scatter must round-trip as well.

Environment: GRIDCOMM_UNSTRUCTURED_EXAMPLES (default 1000) sets max_examples; GRIDCOMM_PROPERTY_SCALE and
GRIDCOMM_PROPERTY_SEED (harness.py) scale it and pick the examples.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from harness import (
    DTYPES,
    SENTINEL_BYTE,
    TRANSPORT_CHOICES,
    TRANSPORTS,
    HaloExchanger,
    assert_everywhere,
    assert_raises_everywhere,
    cell_bytes,
    describe_mismatch,
    gather_problems,
    random_global,
    rank_counts,
    ranks,
    run_property,
)
from hypothesis import strategies as st
from mpi4py import MPI

import gridcomm
from gridcomm import DecompositionError, FieldError, UnstructuredDecomposition
from gridcomm.grids import MedianDualMesh, equal_regions, halo_ids

MAX_EXAMPLES = int(os.environ.get("GRIDCOMM_UNSTRUCTURED_EXAMPLES", "1000"))

FieldSpec = tuple[str, str, int]  # (dtype, order, levels); levels 0 is a 1-D field

# Offsets of sparse ids: small, past the int32 range, and far past it (the directory is id % ranks).
OFFSETS = [0, 1, 17, 2**31 + 5, 2**40 + 3]


@dataclass(frozen=True)
class Case:
    """One example: small parameters only (every rank rebuilds the same arrays from them and ``seed``)."""

    nranks: int
    mesh: str  # "octahedral": MedianDualMesh(size); "random": size nodes joined by n_edges random edges
    size: int
    n_edges: int
    ids: str  # "dense": 0..V-1; "permuted": a permutation of 0..V-1; "affine": stride * node + offset
    stride: int
    offset: int
    owner: str  # "random" (no empty part) or "equal_regions" (octahedral meshes)
    halo: str  # "layers": nodes of other parts within `layers` edges; "subset": random ids of other parts
    layers: int
    id_form: str  # how the id lists are handed over: a NumPy integer dtype, or "list"
    fields: tuple[FieldSpec, ...]
    row_sets: int  # 2: odd-numbered fields live on a second decomposition (a random part of the same halo)
    as_list: bool
    transport: str
    comm_kind: str
    root: int
    rounds: int
    seed: int


@st.composite
def cases(draw: Any, world_size: int) -> Case:
    n = draw(rank_counts(world_size))
    mesh = draw(st.sampled_from(["octahedral", "random"]))
    size = draw(st.integers(1, 6)) if mesh == "octahedral" else draw(st.integers(n, max(n, 40)))
    ids = draw(st.sampled_from(["dense", "permuted", "affine"]))
    stride, offset = (1, 0) if ids != "affine" else (draw(st.integers(1, 7)), draw(st.sampled_from(OFFSETS)))
    nfields = draw(st.integers(1, 3))
    fields = tuple(
        (draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF")), draw(st.integers(0, 4))) for _ in range(nfields)
    )
    return Case(
        nranks=n,
        mesh=mesh,
        size=size,
        n_edges=draw(st.integers(0, 3 * size)) if mesh == "random" else 0,
        ids=ids,
        stride=stride,
        offset=offset,
        owner=draw(st.sampled_from(["random", "equal_regions"] if mesh == "octahedral" else ["random"])),
        halo=draw(st.sampled_from(["layers", "subset"])),
        layers=draw(st.integers(1, 2)),
        id_form=draw(st.sampled_from(["int64", "int32", "uint64", "list"])),
        fields=fields,
        row_sets=draw(st.integers(1, 2)) if nfields > 1 else 1,
        as_list=nfields > 1 or draw(st.booleans()),
        transport=draw(st.sampled_from(sorted(TRANSPORT_CHOICES))),
        comm_kind=draw(st.sampled_from(["mpi4py", "Communicator"])),
        root=draw(st.integers(0, n - 1)),
        rounds=draw(st.integers(1, 2)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


# -- a whole partition, the same on every rank --------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """Every part's ids, as every rank knows them: the reference that the decomposition must reproduce.

    Nodes are numbered 0..V-1; node v has global id ``gid[v]`` and belongs to part ``owner[v]``. ``owned[p]``
    and ``halo[p]`` are part p's nodes in the order they are handed over (so its local rows in that order).
    """

    gid: np.ndarray
    owner: np.ndarray
    owned: list[np.ndarray]
    halo: list[np.ndarray]

    @property
    def dense(self) -> bool:
        """Whether the global ids are 0..V-1 (gather and scatter need that)."""
        return bool(np.array_equal(np.sort(self.gid), np.arange(len(self.gid))))

    def local_nodes(self, part: int) -> np.ndarray:
        """Node of each local row of ``part``: owned rows first, then halo rows."""
        return np.concatenate([self.owned[part], self.halo[part]])

    def halo_counts(self) -> np.ndarray:
        """(parts, parts): [p, q] = halo nodes of part p owned by part q, i.e. rows q sends p per field."""
        n = len(self.owned)
        return np.stack([np.bincount(self.owner[h], minlength=n) for h in self.halo]).astype(np.int64)


@functools.cache
def octahedral_mesh(n: int) -> MedianDualMesh:
    """O-n's median-dual mesh, built once per rank (examples reuse a handful of them)."""
    return MedianDualMesh(n)


def random_owner(rng: np.random.Generator, n_nodes: int, nparts: int) -> np.ndarray:
    """A random part per node in which every part owns at least one node (needs n_nodes >= nparts)."""
    owner = rng.integers(0, nparts, n_nodes)
    owner[rng.permutation(n_nodes)[:nparts]] = np.arange(nparts)
    return owner


def bfs_halo(edges: np.ndarray, owner: np.ndarray, part: int, layers: int) -> np.ndarray:
    """Nodes of other parts within ``layers`` edges of ``part``: breadth first over an edge list (self-loops and
    repeated edges allowed), one frontier per layer. Independent of gridcomm.grids.halo_ids."""
    reached = owner == part
    found = []
    for _ in range(layers):
        frontier = np.zeros_like(reached)
        frontier[edges[reached[edges[:, 0]], 1]] = True
        frontier[edges[reached[edges[:, 1]], 0]] = True
        frontier &= ~reached
        found.append(np.flatnonzero(frontier))
        reached |= frontier
    return np.concatenate(found)


def partition(case: Case) -> Partition:
    """The example's partition, rebuilt identically on every rank from the case's parameters and seed."""
    rng = np.random.default_rng(case.seed)
    n = case.nranks
    if case.mesh == "octahedral":
        mesh = octahedral_mesh(case.size)
        V, edges = mesh.n_nodes, mesh.edges
    else:
        mesh, V = None, case.size
        edges = rng.integers(0, V, size=(case.n_edges, 2))
    if case.ids == "dense":
        gid = np.arange(V, dtype=np.int64)
    elif case.ids == "permuted":
        gid = rng.permutation(V).astype(np.int64)
    else:
        gid = case.stride * np.arange(V, dtype=np.int64) + case.offset
    owner = equal_regions(mesh, n).astype(np.int64) if case.owner == "equal_regions" else random_owner(rng, V, n)
    owned, halo = [], []
    for part in range(n):
        if case.halo == "subset":
            ring = np.flatnonzero((owner != part) & (rng.random(V) < rng.random()))
        elif mesh is not None:
            ring = halo_ids(mesh, owner, part, case.layers)
        else:
            ring = bfs_halo(edges, owner, part, case.layers)
        owned.append(rng.permutation(np.flatnonzero(owner == part)))
        halo.append(rng.permutation(ring))
    return Partition(gid, owner, owned, halo)


def partial(part: Partition, seed: int) -> Partition:
    """The same owned nodes with a random part of each halo, in a new random order: another row set."""
    rng = np.random.default_rng(seed + 1)
    halo = [rng.permutation(h[rng.random(len(h)) < rng.random()]) for h in part.halo]
    return Partition(part.gid, part.owner, part.owned, halo)


def hand_over(ids: np.ndarray, form: str) -> Any:
    """``ids`` as a list or an array of dtype ``form`` (int64 where they do not fit it): any form must work."""
    if form == "list":
        return ids.tolist()
    fits = ids.size == 0 or int(ids.max()) <= np.iinfo(form).max
    return ids.astype(form) if fits else ids


# -- what a rank checks ---------------------------------------------------------------------------------------


def decomposition_problems(d: UnstructuredDecomposition, part: Partition, rank: int) -> list[str]:
    """Sizes, ids, halo owners and per-peer message sizes against counts from the whole partition."""
    problems = []
    owned, halo = part.gid[part.owned[rank]], part.gid[part.halo[rank]]
    sizes = (d.n_owned, d.n_halo, d.n_local)
    if sizes != (len(owned), len(halo), len(owned) + len(halo)):
        problems.append(f"(n_owned, n_halo, n_local) = {sizes}, expected {len(owned)}, {len(halo)}")
    if not (np.array_equal(d.owned_global_ids, owned) and np.array_equal(d.halo_global_ids, halo)):
        problems.append("owned_global_ids / halo_global_ids differ from the ids handed over (or their order)")
    if not np.array_equal(d.halo_owners, part.owner[part.halo[rank]]):
        problems.append(f"halo_owners {d.halo_owners[:12]}... differ from the owners of the halo ids")
    counts = part.halo_counts()
    expected = {
        int(q): (int(counts[q, rank]), int(counts[rank, q])) for q in np.flatnonzero(counts[:, rank] + counts[rank])
    }
    got = {peer.rank: (peer.send_size, peer.recv_size) for peer in d.pattern().peers}
    if got != expected:
        problems.append(f"peers {{rank: (rows sent, rows received)}} {got}, expected {expected}")
    return problems


def row_problems(actual: np.ndarray, expected: np.ndarray, n_owned: int, ids: np.ndarray) -> str | None:
    """None when ``actual`` holds exactly the cell bytes ``expected``; else which rows (owned or halo, which id)
    are wrong, and how."""
    wrong = np.flatnonzero((cell_bytes(actual) != expected).any(axis=tuple(range(1, expected.ndim))))
    if not wrong.size:
        return None
    rows = ", ".join(f"{'owned' if r < n_owned else 'halo'} row {r} (id {ids[r]})" for r in wrong[:6])
    return f"{len(wrong)} of {len(ids)} rows wrong: {rows}\n{describe_mismatch(actual, expected)}"


def global_arrays(n_nodes: int, specs: Sequence[FieldSpec], seed: int) -> list[np.ndarray]:
    """One random global array per field, indexed by node: (V,) or (V, levels)."""
    return [
        random_global((n_nodes,) if levels == 0 else (n_nodes, levels), dtype, seed + i)
        for i, (dtype, _, levels) in enumerate(specs)
    ]


def exchange_problems(
    ds: Sequence[UnstructuredDecomposition],
    parts: Sequence[Partition],
    rank: int,
    specs: Sequence[FieldSpec],
    transport: Any,
    rounds: int,
    seed: int,
    as_list: bool = True,
) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Collective: fields whose owned rows come from random global arrays and whose halo rows hold sentinel
    bytes, exchanged ``rounds`` times by one exchanger (new owned data before each later round); after each
    exchange every row must hold its id's row of the global array. Field i lives on row set i % len(ds)
    (decomposition ``ds[k]`` of partition ``parts[k]``). Returns (problems, fields, globals)."""
    globals_ = global_arrays(len(parts[0].gid), specs, seed)
    on = [i % len(ds) for i in range(len(specs))]  # each field's row set
    fields = []
    for g, (_, order, _), k in zip(globals_, specs, on, strict=True):
        f = np.empty((ds[k].n_local, *g.shape[1:]), dtype=g.dtype, order=order)
        cells = cell_bytes(f)
        cells[...] = SENTINEL_BYTE
        cells[: ds[k].n_owned] = cell_bytes(g)[parts[k].owned[rank]]
        fields.append(f)
    problems = []
    grids = ds[0] if len(ds) == 1 else [ds[k] for k in on]
    with HaloExchanger(grids, fields if as_list else fields[0], transport) as ex:
        for round_ in range(rounds):
            if round_:  # new data in the owned rows, same exchanger
                globals_ = global_arrays(len(parts[0].gid), specs, seed + 100 * round_)
                for f, g, k in zip(fields, globals_, on, strict=True):
                    cell_bytes(f)[: ds[k].n_owned] = cell_bytes(g)[parts[k].owned[rank]]
            ex.exchange()
            for i, (f, g, k) in enumerate(zip(fields, globals_, on, strict=True)):
                nodes = parts[k].local_nodes(rank)
                if p := row_problems(f, cell_bytes(g)[nodes], ds[k].n_owned, parts[k].gid[nodes]):
                    problems.append(f"round {round_}, field {i} {specs[i]} (row set {k}): {p}")
    return problems, fields, globals_


def round_trip_problems(
    d: UnstructuredDecomposition, part: Partition, rank: int, field: np.ndarray, g: np.ndarray, root: int, order: str
) -> list[str]:
    """Collective (ids 0..V-1): gather ``field`` to ``root`` (the global array by id), scatter it back."""
    problems = []
    by_id = np.empty_like(g)
    cell_bytes(by_id)[part.gid] = cell_bytes(g)
    problems += gather_problems(d.gather(field, root=root), by_id, root, rank)
    back = d.scatter(by_id if rank == root else None, root=root, order=order)
    want = np.zeros((d.n_local, *g.shape[1:]), dtype=g.dtype)
    cell_bytes(want)[: d.n_owned] = cell_bytes(g)[part.owned[rank]]
    if back.dtype != g.dtype or back.shape != want.shape or not np.array_equal(cell_bytes(back), cell_bytes(want)):
        problems.append(f"scatter from {root}: owned rows or zero halo wrong ({back.dtype}, {back.shape})")
    elif order == "F" and not back.flags.f_contiguous:
        problems.append(f"scatter from {root} with order='F' gave an array that is not Fortran-contiguous")
    return problems


def first(problems: list[str], limit: int = 3) -> list[str]:
    """The first ``limit`` problems and how many more (one broken exchange fails every field and round)."""
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])


def run_case(sub: Any, case: Case) -> list[str]:
    """Problems this rank saw in one example (empty if none). Collective over ``sub`` (the example's ranks)."""
    rank = sub.Get_rank()
    parts = [partition(case)]
    if case.row_sets == 2:
        parts.append(partial(parts[0], case.seed))
    own = gridcomm.Communicator(sub) if case.comm_kind == "Communicator" else None
    ds: list[UnstructuredDecomposition] = []
    try:
        try:
            for part in parts:
                owned, halo = part.gid[part.owned[rank]], part.gid[part.halo[rank]]
                ds.append(
                    UnstructuredDecomposition(
                        own if own is not None else sub, hand_over(owned, case.id_form), hand_over(halo, case.id_form)
                    )
                )
            problems = [p for d, part in zip(ds, parts, strict=True) for p in decomposition_problems(d, part, rank)]
        except Exception:  # raised on every rank (construction agrees), so nothing collective is left hanging
            problems = [f"building the decomposition:\n{traceback.format_exc()}"]
        # Agree before the collective part, so that a rank that found a problem does not leave others hanging.
        if not sub.allreduce(not problems, op=MPI.LAND):
            return problems or ["another rank's decomposition is wrong"]
        transport = TRANSPORT_CHOICES[case.transport]
        problems, fields, globals_ = exchange_problems(
            ds, parts, rank, case.fields, transport, case.rounds, case.seed, case.as_list
        )
        if parts[0].dense:
            problems += round_trip_problems(ds[0], parts[0], rank, fields[0], globals_[0], case.root, case.fields[0][1])
        return first(problems)
    finally:
        if own is None:
            for d in ds:
                d.comm.close()
        if own is not None:
            own.close()


def check_exchanges_match_serial_reference(comm: Any) -> None:
    """The property (see the module docstring), each example on 1..world size ranks."""
    run_property(
        comm,
        cases(comm.Get_size()),
        run_case,
        MAX_EXAMPLES,
        tally={
            "octahedral": lambda case: case.mesh == "octahedral",
            "sparse ids": lambda case: case.ids == "affine",
            "two row sets": lambda case: case.row_sets == 2,
        },
    )


# -- a known case over every transport --------------------------------------------------------------------


def check_o4_equal_regions_two_layers_every_transport(comm: Any) -> None:
    """O4 (208 nodes) in equal_regions parts, one per rank, 2 halo layers in ascending id (as LocalMesh hands
    them to the MPDATA driver): peers and message sizes, then 2 rounds of 3 fields over every transport of
    harness.TRANSPORTS, each row against the global arrays (the serial reference), and a gather/scatter."""
    rank, size = comm.Get_rank(), comm.Get_size()
    mesh = octahedral_mesh(4)
    owner = equal_regions(mesh, size).astype(np.int64)
    part = Partition(
        gid=np.arange(mesh.n_nodes, dtype=np.int64),
        owner=owner,
        owned=[np.flatnonzero(owner == p) for p in range(size)],
        halo=[halo_ids(mesh, owner, p, 2) for p in range(size)],
    )
    d = UnstructuredDecomposition(comm, part.gid[part.owned[rank]], part.gid[part.halo[rank]])
    problems = decomposition_problems(d, part, rank)
    if size > 1 and not len(part.halo[rank]):
        problems.append("an equal_regions part of O4 with no halo: the known case is not what it claims")
    assert_everywhere(comm, "\n".join(problems) or None)
    specs: list[FieldSpec] = [("float64", "F", 3), ("int16", "C", 0), ("complex64", "C", 2)]
    for k, (name, transport) in enumerate(TRANSPORTS.items()):
        problems, fields, globals_ = exchange_problems([d], [part], rank, specs, transport, rounds=2, seed=1000 * k)
        problems += round_trip_problems(d, part, rank, fields[0], globals_[0], root=size - 1, order="F")
        assert_everywhere(comm, "\n".join(f"transport {name}: {p}" for p in first(problems)) or None)
    d.comm.close()


# -- bad input (check_bad_*: tests/test_mpi.py runs them by that prefix): every rank raises, naming it ----------


def _blocks(rank: int, width: int = 10) -> np.ndarray:
    """Rank r's owned ids in the bad-input checks: r*width .. r*width + width-1, handed over in reverse."""
    return np.arange(rank * width, (rank + 1) * width, dtype=np.int64)[::-1].copy()


def _ring(comm: Any) -> UnstructuredDecomposition:
    """A valid decomposition: rank r owns _blocks(r); its halo is the next rank's first id and the previous
    rank's last one (none on one rank)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    halo = [] if size == 1 else sorted({((rank + 1) % size) * 10, ((rank - 1) % size) * 10 + 9})
    return UnstructuredDecomposition(comm, _blocks(rank), halo)


def _on_last(comm: Any, bad: Any, good: Any) -> Any:
    """``bad`` on the last rank, ``good`` elsewhere: one rank's mistake must still raise on every rank."""
    return bad if comm.Get_rank() == comm.Get_size() - 1 else good


@ranks(maximum=3)
def check_bad_id_listed_twice(comm: Any) -> None:
    last = comm.Get_size() - 1
    owned = _blocks(comm.Get_rank())
    twice = _on_last(comm, np.append(owned, owned[3]), owned)
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, twice, []),
        DecompositionError, f"rank {last}", "owned_global_ids", f"id {_blocks(last)[3]}", "more than once",
    )  # fmt: skip
    halo = _on_last(comm, [10_000, 10_001, 10_000], [])
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, owned, halo),
        DecompositionError, f"rank {last}", "halo_global_ids", "id 10000", "more than once",
    )  # fmt: skip


@ranks(minimum=2, maximum=3)
def check_bad_id_owned_by_two_ranks(comm: Any) -> None:
    last = comm.Get_size() - 1
    owned = _on_last(comm, np.append(_blocks(last), 3), _blocks(comm.Get_rank()))  # rank 0 owns 3 as well
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, owned, []),
        DecompositionError, "global id 3", f"ranks [0, {last}]", "exactly one owner",
    )  # fmt: skip


@ranks(maximum=3)
def check_bad_halo_id_that_no_rank_owns(comm: Any) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    missing = 10 * size + 7
    halo = _on_last(comm, [0, missing] if last else [missing], [])
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, _blocks(rank), halo),
        DecompositionError, f"global id {missing}", f"rank {last}'s halo", "no rank owns",
    )  # fmt: skip
    # Owned ids all listed on rank 0 (multiples of size): the looked-up id's directory rank holds no entry at all.
    owned = size * _blocks(rank)
    halo = _on_last(comm, [size * 20 + 1], [])
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, owned, halo),
        DecompositionError, f"global id {size * 20 + 1}", f"rank {last}'s halo", "no rank owns",
    )  # fmt: skip


@ranks(maximum=3)
def check_bad_id_both_owned_and_in_halo(comm: Any) -> None:
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    halo = _on_last(comm, [10 * last + 4], [])
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, _blocks(rank), halo),
        DecompositionError, f"rank {last}", f"id {10 * last + 4}", "both owned and in the halo",
    )  # fmt: skip


@ranks(maximum=3)
def check_bad_negative_ids(comm: Any) -> None:
    owned = _blocks(comm.Get_rank())
    for what, args in (
        ("owned_global_ids", (_on_last(comm, np.append(owned, -5), owned), [])),
        ("halo_global_ids", (owned, _on_last(comm, [-1], []))),
    ):
        assert_raises_everywhere(
            comm, lambda a=args: UnstructuredDecomposition(comm, *a), DecompositionError, what, "negative"
        )


@ranks(maximum=3)
def check_bad_non_integer_ids(comm: Any) -> None:
    owned = _blocks(comm.Get_rank())
    for what, args in (
        ("owned_global_ids", (_on_last(comm, owned.astype(np.float64), owned), [])),
        ("halo_global_ids", (owned, _on_last(comm, [1.5], []))),
        ("owned_global_ids", (_on_last(comm, owned.astype(bool), owned), [])),
    ):
        assert_raises_everywhere(
            comm, lambda a=args: UnstructuredDecomposition(comm, *a), DecompositionError, what, "integer"
        )


@ranks(maximum=3)
def check_bad_two_dimensional_ids(comm: Any) -> None:
    owned = _blocks(comm.Get_rank())
    bad = _on_last(comm, owned.reshape(2, 5), owned)
    assert_raises_everywhere(
        comm, lambda: UnstructuredDecomposition(comm, bad, []), DecompositionError, "owned_global_ids", "1-D"
    )


@ranks(maximum=3)
def check_bad_gather_needs_ids_0_to_n_minus_1(comm: Any) -> None:
    """gather builds an array indexed by global id, so the owned ids over all ranks must be 0..N-1: with one
    missing, or sparse, every rank raises (not only the root, which alone sees the pieces)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    owned = _blocks(rank)
    gap = _on_last(comm, owned[owned != 10 * last + 4], owned)  # id 10 * last + 4 missing
    d = UnstructuredDecomposition(comm, gap, [])
    total = 10 * size - 1
    assert_raises_everywhere(comm, lambda: d.gather(d.zeros()), DecompositionError, "gather", f"0..{total - 1}")
    sparse = UnstructuredDecomposition(comm, 2 * owned + 1, [])
    assert_raises_everywhere(
        comm, lambda: sparse.gather(sparse.zeros(levels=2), root=last), DecompositionError, "gather", "0.."
    )
    d.comm.close()


@ranks(maximum=3)
def check_bad_field_with_wrong_number_of_rows(comm: Any) -> None:
    d = _ring(comm)
    wrong = np.zeros((d.n_local + 1, 2))
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm, lambda t=transport: HaloExchanger(d, [d.zeros(levels=2), wrong], t),
            FieldError, "field 1", "shape", str(wrong.shape), f"({d.n_local},)",
        )  # fmt: skip
    if comm.Get_size() > 1:  # wrong on one rank only: that rank names the shape, the others name that rank
        last = comm.Get_size() - 1
        field = _on_last(comm, np.zeros(d.n_local - 1), d.zeros())
        words = ("shape", f"rank {last} rejected") if comm.Get_rank() != last else ("shape", f"({d.n_local - 1},)")
        for transport in TRANSPORT_CHOICES.values():
            assert_raises_everywhere(comm, lambda t=transport: HaloExchanger(d, field, t), FieldError, *words)
    assert_raises_everywhere(comm, lambda: d.owned(wrong), FieldError, "rows", f"n_local = {d.n_local}")
    assert_raises_everywhere(comm, lambda: d.gather(wrong), FieldError, "rows", f"n_local = {d.n_local}")
    d.comm.close()
