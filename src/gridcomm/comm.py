"""The communicator gridcomm works on: a private duplicate of the application's, its ranks' timeout settings, the
node it learns about (ranks per node, CPUs for them), and the tags of its exchangers."""

from __future__ import annotations

import functools
import logging
import operator
import os
import sys
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

from .agreement import agree, by_value, gather_or_raise
from .arguments import whole_number
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    DecompositionError,
    GridcommError,
    OversubscriptionWarning,
)
from .mpilib import check_launcher_matches, mpi_cuda_aware
from .timeouts import DEFAULT_TIMEOUT_S, check_on_timeout, check_timeout, default_timeout

log = logging.getLogger(__name__)


@functools.cache
def _kept_keyval() -> int:
    """The MPI attribute key under which an mpi4py communicator keeps its gridcomm Communicator."""
    from mpi4py import MPI

    def release(_base: Any, _keyval: int, kept: Communicator) -> None:
        if not MPI.Is_finalized():
            kept.close()

    return MPI.Comm.Create_keyval(delete_fn=release)


def _cpu_mask() -> int:
    """The CPUs this process may run on, as a bit mask (bit c: CPU c)."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        cpus = set(range(os.cpu_count() or 1))
    return sum(1 << c for c in cpus)


#: Declares ranks [0, k), [k, 2k), ... separate nodes, for choosing transports (``Communicator.nodes``).
RANKS_PER_NODE = "GRIDCOMM_RANKS_PER_NODE"
#: Set to 1 to silence the warning about more ranks on a node than CPUs for them.
OVERSUBSCRIBE_OK = "GRIDCOMM_OVERSUBSCRIBE_OK"
# Whether this process has built a Communicator of the whole job yet: the first one looks at the node.
_job_communicator_built = False
# The CPUs that this process's node has beyond one for each of the job's ranks there (negative: oversubscribed):
# found by the job's first communicator (None until then, or where the first communicator was not the whole job).
_node_spare_cpus: int | None = None


def node_spare_cpus() -> int | None:
    """The CPUs this process's node has beyond one per rank of the job there (negative where ranks share CPUs;
    None: not known; no collective call)."""
    return _node_spare_cpus


def warn_if_oversubscribed(ranks: int, cpus: int) -> None:
    """Warn (OversubscriptionWarning) when ``ranks`` ranks share a node's ``cpus`` CPUs, unless
    GRIDCOMM_OVERSUBSCRIBE_OK is set: ranks that wait for each other then take turns on the CPUs."""
    if ranks <= cpus or os.environ.get(OVERSUBSCRIBE_OK, "").strip().lower() in ("1", "true", "yes", "on"):
        return
    warnings.warn(
        f"{ranks} ranks run on a node where they may use {cpus} CPU(s): ranks then take turns on the CPUs, and "
        f"waiting for each other (exchanges) takes most of the run time. Start at most {cpus} ranks per node "
        f"(fewer --np, or more nodes); to run so on purpose, set {OVERSUBSCRIBE_OK}=1 or filter "
        "gridcomm.OversubscriptionWarning",
        OversubscriptionWarning,
        stacklevel=_outside_gridcomm(),
    )


# Modules a warning's location skips: gridcomm itself, and the libraries of its command line.
_NOT_THE_CALLER = ("gridcomm", "typer", "click")


def _outside_gridcomm() -> int:
    """The ``stacklevel`` that makes a warning issued by the caller name the first frame outside gridcomm (and
    its command line's libraries): where the user's code called gridcomm."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in _NOT_THE_CALLER:
        frame, level = frame.f_back, level + 1
    return level


class Communicator:
    """The ranks that take part in gridcomm's exchanges: a private duplicate of an mpi4py communicator.

    Construction is collective over ``mpi_comm``. The duplicate keeps gridcomm's messages apart from the
    application's own.

    Args:
        mpi_comm: an mpi4py communicator, or None for MPI.COMM_WORLD.
        timeout: seconds to wait for a peer before raising GridcommTimeout; None reads GRIDCOMM_TIMEOUT
            (default 60 s). Each exchanger may override it.
        on_timeout: what a rank does after GridcommTimeout: ``"abort"`` prints it and aborts every rank
            (MPI_Abort: no rank is left waiting), ``"raise"`` raises it for you to handle; None reads
            GRIDCOMM_ON_TIMEOUT (default ``"abort"``). Each exchanger may override it.

    The first Communicator of the whole job (every rank of MPI.COMM_WORLD) looks at the node: rank 0 warns
    (OversubscriptionWarning) when more ranks run on it than the CPUs they may use;
    ``GRIDCOMM_OVERSUBSCRIBE_OK=1`` silences it.
    """

    def __init__(self, mpi_comm: Any = None, *, timeout: float | None = None, on_timeout: str | None = None) -> None:
        from mpi4py import MPI

        base = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if isinstance(base, Communicator):
            base.check_open()
            base = base.mpi
        if not isinstance(base, MPI.Comm):
            raise ArgumentTypeError(
                f"mpi_comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD), got {type(base).__name__}"
            )
        if base == MPI.COMM_NULL:
            raise ArgumentError("mpi_comm is MPI.COMM_NULL; pass a communicator this rank belongs to")
        if base == MPI.COMM_WORLD:
            check_launcher_matches(base.Get_size())
        try:  # every rank must hear of a bad argument on one, or the others would wait in Dup forever
            self.timeout: float = check_timeout(timeout, default_timeout())
            self.on_timeout: str = check_on_timeout(on_timeout)
            problem, waits = None, (self.timeout, self.on_timeout)
        except (ArgumentError, ArgumentTypeError) as error:
            problem, waits = error, (DEFAULT_TIMEOUT_S, "abort")
        agree(base, "Communicator()", *waits, problem=problem)
        self.mpi = base.Dup()
        self.rank: int = self.mpi.Get_rank()
        self.size: int = self.mpi.Get_size()
        self._next_tag = 0
        #: Why each transport cannot move fields between these ranks (None: it can), found collectively once.
        self.reasons: dict[str, str | None] = {}
        #: The NCCL communicator over these ranks, made on first use (gridcomm.gpu.nccl_communicator).
        self.nccl: Any = None
        self.graphs: weakref.WeakSet[Any] = weakref.WeakSet()  # captured exchanges, released by close()
        if self.size == MPI.COMM_WORLD.Get_size() and not _job_communicator_built:
            self._look_at_the_node()

    def _look_at_the_node(self) -> None:
        """Collective, once per process: rank 0 warns if its node runs more ranks than CPUs for them. Done for
        the first Communicator of the whole job only (every process builds that one, at the same point of its
        collective calls, so all take this step together), not for every communicator of a few ranks."""
        global _job_communicator_built, _node_spare_cpus
        _job_communicator_built = True
        _, ranks, cpus = self._node
        _node_spare_cpus = cpus - ranks
        if self.rank == 0:
            warn_if_oversubscribed(ranks, cpus)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has freed this communicator."""
        from mpi4py import MPI

        return self.mpi == MPI.COMM_NULL

    def check_open(self) -> None:
        """GridcommError if this communicator was closed (local: a closed communicator cannot reach its peers;
        ``close()`` is collective, so every rank finds it closed alike)."""
        if self.closed:
            raise GridcommError(
                "this Communicator was closed (close(), or the end of its with block); make a new one, e.g. "
                "gridcomm.Communicator(comm), or pass the mpi4py communicator and let gridcomm keep one"
            )

    def agree(
        self,
        operation: str,
        signature: Mapping[str, Any] | None = None,
        problem: Exception | None = None,
        note: str = "",
    ) -> list[str]:
        """Collective: every rank has reached ``operation`` with the same ``signature`` and no rank found a
        ``problem``, or every rank raises (see ``agree``); at most the communicator's timeout, then act on
        ``on_timeout``. Returns every rank's ``note``."""
        self.check_open()
        return agree(self.mpi, operation, self.timeout, self.on_timeout, signature, problem, note)

    def check_root(self, root: Any, role: str) -> int:
        """``root`` (the rank that ``role``, e.g. "receives the array") as an int, one of this communicator's
        ranks; ArgumentTypeError or ArgumentError naming it (local)."""
        return whole_number(root, "root", 0, self.size - 1, meaning=f"the rank that {role}")

    def rendezvous(self, operation: str) -> None:
        """Collective: wait until every rank has reached ``operation`` (e.g. "HaloExchanger()"), at most the
        communicator's timeout, and check that they all did (``agree`` with nothing more to compare). Called
        first by a constructor whose own checks follow: a rank that never comes ends in a timeout instead of a
        hang in the blocking collectives after it, and ranks that make different calls raise together."""
        self.agree(operation)

    @classmethod
    def wrap(cls, comm: Any) -> Communicator:
        """``comm`` itself if it already is a Communicator, else the one gridcomm keeps for that mpi4py
        communicator (None: COMM_WORLD), made on first use (collective then).

        The kept Communicator is cached as an attribute of the mpi4py communicator, as MPI libraries cache
        their inner communicators: decompositions made again and again over the same communicator share one
        duplicate instead of using up MPI's communicator ids, and it is freed when that communicator is.
        """
        if isinstance(comm, Communicator):
            comm.check_open()
            return comm
        from mpi4py import MPI

        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(base, MPI.Comm) or base == MPI.COMM_NULL:
            return cls(base)  # raises the constructor's error
        kept = base.Get_attr(_kept_keyval())
        if kept is None or kept.mpi == MPI.COMM_NULL:  # none yet, or closed by its user
            kept = cls(base)
            base.Set_attr(_kept_keyval(), kept)
        return kept

    @functools.cached_property
    def cuda_aware(self) -> bool:
        """Whether device buffers may be handed to this MPI (see ``mpi_cuda_aware``)."""
        return mpi_cuda_aware()

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks on the same node (used to pick a GPU)."""
        return self._node[0]

    @property
    def local_size(self) -> int:
        """The number of this communicator's ranks on this rank's node (they share its CPUs and GPUs)."""
        return self._node[1]

    @property
    def local_cpus(self) -> int:
        """The CPUs this communicator's ranks on this rank's node may run on together (the union of their affinity
        masks); collective on first use."""
        return self._node[2]

    @functools.cached_property
    def _node(self) -> tuple[int, int, int]:
        """(rank, size) among the ranks on the same node, and how many CPUs those ranks may run on together
        (the union of their affinity masks: a batch system's share of the node, not the whole node);
        collective on first use."""
        from mpi4py import MPI

        node = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            cpus = functools.reduce(operator.or_, node.allgather(_cpu_mask()), 0)
            return node.Get_rank(), node.Get_size(), cpus.bit_count()
        finally:
            node.Free()

    @functools.cached_property
    def nodes(self) -> tuple[int, ...]:
        """The node of every rank (0, 1, ... in order of their lowest rank), as gridcomm treats them when it picks
        a transport per peer: the ranks that share memory (MPI's shared-memory split), cut further where
        ``GRIDCOMM_RANKS_PER_NODE=k`` declares ranks [0, k), [k, 2k), ... separate nodes (to test on one host what
        runs across nodes; by the ranks' places in MPI.COMM_WORLD). Collective on first use; every rank must declare
        the same k, else DecompositionError on every rank."""
        from mpi4py import MPI

        declared = os.environ.get(RANKS_PER_NODE, "").strip()
        problem = None
        try:
            k = whole_number(int(declared), RANKS_PER_NODE, least=1) if declared else 0
        except (ValueError, ArgumentError, ArgumentTypeError):
            k, problem = 0, ArgumentError(f"{RANKS_PER_NODE}={declared!r}: give a whole number of ranks >= 1")
        shared = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            leader = shared.allreduce(self.rank, op=MPI.MIN)
        finally:
            shared.Free()
        # Declared nodes cut the job's ranks (MPI.COMM_WORLD's), whatever communicator asks.
        mine = (leader, k, MPI.COMM_WORLD.Get_rank())
        everyone = gather_or_raise(self.mpi, mine, problem, f"{RANKS_PER_NODE} setting")
        if len({k for _, k, _ in everyone}) > 1:
            raise DecompositionError(
                f"the ranks declare different node sizes ({by_value([k or 'unset' for _, k, _ in everyone])} in "
                f"{RANKS_PER_NODE}); set it alike for the whole job"
            )
        keys = [(leader, world // k if k else 0) for leader, k, world in everyone]
        numbering = {key: n for n, key in enumerate(dict.fromkeys(keys))}
        return tuple(numbering[key] for key in keys)

    @functools.cached_property
    def node(self) -> Communicator:
        """A Communicator of the ranks on this rank's node (``nodes``); collective on first use."""
        node = self.mpi.Split(self.nodes[self.rank], self.rank)
        try:
            return Communicator(node, timeout=self.timeout, on_timeout=self.on_timeout)
        finally:
            node.Free()

    TAGS_PER_EXCHANGER = 8  # an exchanger's transports (one per group of peers) take 4 each; the validator one

    def new_tag(self) -> int:
        """The first of ``TAGS_PER_EXCHANGER`` message tags reserved for a new exchanger. Exchangers are built
        collectively in the same order on every rank, so every rank draws the same tags."""
        from mpi4py import MPI

        upper = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767
        blocks = (upper + 1) // self.TAGS_PER_EXCHANGER
        tag = (self._next_tag % blocks) * self.TAGS_PER_EXCHANGER
        self._next_tag += 1
        return tag

    def release_graphs(self) -> None:
        """Free every exchange captured over this communicator (their ``launch`` raises afterwards): NCCL frees
        or aborts a communicator only once no graph that used it lives."""
        for graph in list(self.graphs):
            graph.close()

    def close(self) -> None:
        """Free the duplicated communicator (collective)."""
        from mpi4py import MPI

        self.release_graphs()
        nccl, self.nccl = self.nccl, None
        if nccl is not None:
            nccl.destroy()
        node = self.__dict__.pop("node", None)
        if node is not None:
            node.close()
        if self.mpi != MPI.COMM_NULL:
            self.mpi.Free()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Communicator(rank={self.rank}, size={self.size}, timeout={self.timeout:g} s, "
            f"on_timeout={self.on_timeout!r})"
        )
