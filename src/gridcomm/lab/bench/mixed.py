"""``gridcomm bench halo --mixed``: one exchange of a C-grid's (u, v, p), each field with its own halo and
staggering, against the three separate exchanges (one exchanger per field) that the same fields take without
per-field halos, measured in the same run.

The problem: 3-D float64 fields of ``levels`` vertical levels (the contiguous dimension), a channel periodic in x
with walls in y, split over a 2-D horizontal process grid, box stencil; p at cell centres with a halo of ``halo``
points (a high-order stencil's), u on the x faces and v on the y faces with a halo of 1 (v has one more face than
cells across the channel). Every transport is timed three ways:

- ``one``: ``HaloExchanger([xfaces, yfaces, cells], [u, v, p])``, one message per peer;
- ``three``: an exchanger per field, exchanged one after the other;
- ``three overlapped``: the three exchangers started together and then waited for (their messages in flight at
  once, three per peer);
- ``same bytes, one halo``: what ``one`` costs without per-field halos: one exchanger of a single cell-centred
  field with p's halo on the same process grid, its levels chosen so that it moves the same bytes per rank as
  ``one`` (to within one level's worth; both counts are in the row).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...comm import Communicator
from ...decomp import CartesianDecomposition, CartesianField, choose_proc_grid
from ...exchange import HaloExchanger
from ...transports import MpiTransport, Transport
from ..measure.timing import Timing, time_collective

#: The ways each transport is timed, in table order.
WAYS = ("one", "three", "three overlapped", "same bytes, one halo")


@dataclass(frozen=True)
class MixedCase:
    """``n`` × ``n`` horizontal cells per rank of ``levels`` levels; p's halo ``halo`` points, u's and v's 1."""

    n: int
    levels: int
    halo: int


def c_grid(comm: Communicator, case: MixedCase) -> tuple[CartesianDecomposition, list[CartesianField]]:
    """The decomposition (periodic in x, walls in y; each rank n × n columns of all levels) and the descriptors
    of u (x faces), v (y faces) and p (cell centres)."""
    halo = ((case.halo, case.halo), (case.halo, case.halo), (0, 0))
    px, py = choose_proc_grid(comm.size, (case.n, case.n), halo[:2], (True, False))
    grid = CartesianDecomposition(
        comm, (case.n * px, case.n * py, case.levels), halo=halo, periodic=(True, False, False), proc_grid=(px, py, 1)
    )
    faces = ((1, 1), (1, 1), (0, 0))
    return grid, [grid.field(halo=faces, stagger="x"), grid.field(halo=faces, stagger="y"), grid.field()]


def same_bytes(comm: Communicator, case: MixedCase, nbytes: int) -> CartesianDecomposition:
    """A decomposition of cell-centred columns with p's halo on ``case``'s process grid whose exchange of one field
    moves about ``nbytes`` per rank (the most over ranks; collective)."""
    one_level, _ = c_grid(comm, MixedCase(case.n, 1, case.halo))
    # Any transport lays the messages out alike: mpi binds without auto's measurement.
    with HaloExchanger(one_level, one_level.zeros(), MpiTransport()) as probe:
        per_level = _most(comm, probe.bytes_per_exchange[0])
    grid, _ = c_grid(comm, MixedCase(case.n, max(1, round(nbytes / per_level)), case.halo))
    return grid


def _three_overlapped(exchangers: list[HaloExchanger]) -> Callable[[], None]:
    def run() -> None:
        handles = [e.start() for e in exchangers]
        for handle in handles:
            handle.wait()

    return run


def _three(exchangers: list[HaloExchanger]) -> Callable[[], None]:
    def run() -> None:
        for e in exchangers:
            e.exchange()

    return run


def run_mixed_case(
    comm: Communicator,
    case: MixedCase,
    samples: int,
    transports: Mapping[str, str | Transport],
    xp: Any,
    timer: Callable[[Callable[[], Any], int], Timing] | None = None,
) -> dict[str, Any]:
    """Time ``case`` every way (WAYS) over every transport (collective); one result row. ``xp``: NumPy or CuPy;
    ``timer(run, samples)``: seconds per run (default: ``time_collective``; on the GPU one that synchronises)."""
    timer = timer or (lambda run, n: time_collective(comm.mpi, run, samples=n))
    grid, kinds = c_grid(comm, case)
    rng = xp.random.RandomState(comm.rank)  # drawn where the fields live
    fields = [rng.random_sample(k.local_shape) for k in kinds]
    times: dict[str, dict[str, Timing]] = {}
    reference = None
    for name, transport in transports.items():
        with HaloExchanger(kinds, fields, transport) as one:
            if reference is None:
                reference = same_bytes(comm, case, _most(comm, one.bytes_per_exchange[0]))
                column = rng.random_sample(reference.local_shape)
            separate = [HaloExchanger(k, f, transport) for k, f in zip(kinds, fields, strict=True)]
            alike = HaloExchanger(reference, column, transport)
            bytes_reference = _most(comm, alike.bytes_per_exchange[0])  # what it moves, padding included
            try:
                ways = (one.exchange, _three(separate), _three_overlapped(separate), alike.exchange)
                times[name] = {way: timer(run, samples) for way, run in zip(WAYS, ways, strict=True)}
                if len(times) == 1:
                    row = _row(comm, case, grid, one, separate)
            finally:
                for e in [*separate, alike]:
                    e.close()
    return {
        **row,
        "same_bytes_per_rank": bytes_reference,
        "one_over_same_bytes": {
            name: by_way["one"].median / by_way["same bytes, one halo"].median for name, by_way in times.items()
        },
        "times": {name: {way: t.as_dict() for way, t in by_way.items()} for name, by_way in times.items()},
        "three_over_one": {name: by_way["three"].median / by_way["one"].median for name, by_way in times.items()},
        "overlapped_over_one": {
            name: by_way["three overlapped"].median / by_way["one"].median for name, by_way in times.items()
        },
    }


def _row(
    comm: Communicator, case: MixedCase, grid: CartesianDecomposition, one: HaloExchanger, separate: list[HaloExchanger]
) -> dict[str, Any]:
    """What a result row says about the case: the shapes, and messages and bytes per rank (the most over ranks)."""
    messages = _most(comm, len(one.layout.sends))
    separate_messages = _most(comm, sum(len(e.layout.sends) for e in separate))
    return {
        "n": case.n,
        "levels": case.levels,
        "halo": case.halo,
        "proc_grid": list(grid.proc_grid),
        "messages_per_rank": {"one": messages, "three": separate_messages},
        "bytes_per_rank": _most(comm, one.bytes_per_exchange[0]),
    }


def _most(comm: Communicator, value: int) -> int:
    """The largest ``value`` over the ranks (collective)."""
    from mpi4py import MPI

    return comm.mpi.allreduce(value, op=MPI.MAX)
