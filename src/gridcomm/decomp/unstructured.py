"""Unstructured decompositions: each rank owns a set of global ids (mesh nodes) and keeps copies of others.

The one-off setup is the one of ESCAPE's MPDATA dwarf: every rank asks for its halo ids, the owners answer
with their local indices, and from then on an exchange is an all-to-all(v) of rows between fixed peers.
Nobody needs to know the owners in advance: ids are looked up in a directory spread over the ranks
(id ``g`` is listed on rank ``g % size``), so the setup costs three all-to-alls whatever the mesh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..arrays import as_array, check_dtype, check_order, is_device_array, resolve_array_module, to_host, view_buffer
from ..comm import Communicator
from ..errors import ArgumentTypeError, DecompositionError, FieldError, GridcommError
from ..pattern import Pattern, PeerPlan, Rows


def _alltoallv(mpi_comm: Any, blocks: list[np.ndarray], dtype: Any) -> list[np.ndarray]:
    """Send ``blocks[r]`` to rank r; returns the block received from each rank."""
    size = mpi_comm.Get_size()
    dtype = np.dtype(dtype)
    send_counts = np.array([len(b) for b in blocks], dtype=np.int64)
    recv_counts = np.empty(size, dtype=np.int64)
    mpi_comm.Alltoall(send_counts, recv_counts)
    send = np.concatenate(blocks).astype(dtype) if blocks else np.zeros(0, dtype)
    received = np.empty(int(recv_counts.sum()), dtype=dtype)
    width = dtype.itemsize
    mpi_comm.Alltoallv(
        [send.view(np.uint8), send_counts * width, None, _byte()],
        [received.view(np.uint8), recv_counts * width, None, _byte()],
    )
    return np.split(received, np.cumsum(recv_counts)[:-1])


def _byte() -> Any:
    from mpi4py import MPI

    return MPI.BYTE


_AGREED_ERRORS = {cls.__name__: cls for cls in (ArgumentTypeError, DecompositionError)}


def _agree(comm: Communicator, problem: str | GridcommError | None) -> None:
    """Collective: if any rank found a problem (a message or an error), raise the first one on every rank, as an
    error of its class (a message: DecompositionError), saying which other ranks found problems too."""
    if isinstance(problem, GridcommError):
        problem = (type(problem).__name__, str(problem))
    elif problem is not None:
        problem = (DecompositionError.__name__, problem)
    # A message that names no rank (a bad argument) is about the rank that found it: say which.
    problems = [
        (rank, kind, message if "rank" in message else f"rank {rank}: {message}")
        for rank, p in enumerate(comm.mpi.allgather(problem))
        if p
        for kind, message in [p]
    ]
    if problems:
        _, kind, message = problems[0]
        if len(problems) > 1:
            others = ", ".join(str(r) for r, _, _ in problems[1:])
            message += f" (and {len(problems) - 1} more, found by rank(s) {others}; the next: {problems[1][2]})"
        raise _AGREED_ERRORS.get(kind, DecompositionError)(message)


def _ids(values: Any, what: str) -> np.ndarray:
    """``values`` as a 1-D int64 array of global ids; ArgumentTypeError or DecompositionError naming ``what``."""
    if is_device_array(values):
        values = to_host(as_array(values, what))
    if not isinstance(values, np.ndarray | Sequence) or isinstance(values, str | bytes):
        raise ArgumentTypeError(
            f"{what} is a {type(values).__name__}; pass the global ids as a list or a 1-D array of integers"
        )
    try:
        ids = np.asarray(values)
    except (TypeError, ValueError) as error:  # e.g. ragged nested lists
        raise ArgumentTypeError(f"{what} is not an array of integer global ids ({error})") from None
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise DecompositionError(
            f"{what} must be a 1-D array of integer global ids, got shape {ids.shape} dtype {ids.dtype}"
        )
    if ids.size and ids.min() < 0:
        raise DecompositionError(f"{what} holds a negative id ({int(ids.min())}); global ids are >= 0")
    if ids.size and int(ids.max()) > np.iinfo(np.int64).max:
        raise DecompositionError(f"{what} holds the id {int(ids.max())}, beyond int64; global ids are < 2**63")
    return ids.astype(np.int64)


class UnstructuredDecomposition:
    """A mesh whose nodes (global ids) are owned by ranks, each rank keeping copies of some others (its halo).

    Construction is collective. Local arrays have ``n_local = n_owned + n_halo`` rows: first the owned ids in
    the order given, then the halo ids in the order given; any trailing axes (levels) travel with each row.

    Args:
        comm: a ``Communicator``, an mpi4py communicator or None (COMM_WORLD).
        owned_global_ids: the ids this rank owns (unique over all ranks).
        halo_global_ids: the ids this rank keeps copies of (owned by other ranks, unique here).
    """

    def __init__(self, comm: Any, owned_global_ids: Any, halo_global_ids: Any) -> None:
        self.comm = Communicator.wrap(comm)
        self.comm.rendezvous("UnstructuredDecomposition()")
        problem = None
        try:
            owned = _ids(owned_global_ids, "owned_global_ids")
            halo = _ids(halo_global_ids, "halo_global_ids")
            problem = self._local_problem(owned, halo)
        except GridcommError as error:  # every rank must hear of it, or the others would wait for this one
            owned, halo, problem = np.zeros(0, np.int64), np.zeros(0, np.int64), error
        _agree(self.comm, problem)
        self.owned_global_ids, self.halo_global_ids = owned, halo
        self.n_owned, self.n_halo = len(owned), len(halo)
        self.n_local = self.n_owned + self.n_halo
        self._pattern = self._build_pattern()
        # gather and scatter index global arrays by id: how many ids there are, and the largest one.
        extents = self.comm.mpi.allgather((self.n_owned, int(owned.max()) if self.n_owned else -1))
        self._id_count, self._largest_id = sum(n for n, _ in extents), max(m for _, m in extents)

    def _local_problem(self, owned: np.ndarray, halo: np.ndarray) -> str | None:
        rank = self.comm.rank
        for ids, what in ((owned, "owned_global_ids"), (halo, "halo_global_ids")):
            unique, counts = np.unique(ids, return_counts=True)
            if (counts > 1).any():
                return f"rank {rank}: {what} lists id {int(unique[counts > 1][0])} more than once"
        both = np.intersect1d(owned, halo)
        if both.size:
            return f"rank {rank}: id {int(both[0])} is both owned and in the halo; a rank keeps no copy of its own ids"
        return None

    def _build_pattern(self) -> Pattern:
        comm, size, rank = self.comm, self.comm.size, self.comm.rank
        mpi = comm.mpi
        # 1. The directory: rank g % size learns (id, owner, owner's local index) of every owned id g.
        owned = self.owned_global_ids
        home = owned % size
        order = np.argsort(home, kind="stable")
        rows = np.stack([owned, np.full_like(owned, rank), np.arange(len(owned), dtype=np.int64)], 1)[order]
        listed = _alltoallv(mpi, [rows[home[order] == r].ravel() for r in range(size)], np.int64)
        directory = np.concatenate(listed).reshape(-1, 3) if listed else np.zeros((0, 3), np.int64)
        unique, first, counts = np.unique(directory[:, 0], return_index=True, return_counts=True)
        problem = None
        if (counts > 1).any():
            twice = int(unique[counts > 1][0])
            owners = sorted(directory[directory[:, 0] == twice, 1].tolist())
            problem = f"global id {twice} is owned by ranks {owners}; every id must have exactly one owner"
        _agree(comm, problem)
        # 2. Each rank asks the directory who owns its halo ids.
        halo = self.halo_global_ids
        home = halo % size
        order = np.argsort(home, kind="stable")
        asked = _alltoallv(mpi, [halo[order][home[order] == r] for r in range(size)], np.int64)
        answers, problem = [], None
        for requester, ids in enumerate(asked):
            at = np.clip(np.searchsorted(unique, ids), 0, max(len(unique) - 1, 0))
            found = unique[at] == ids if len(unique) else np.zeros(len(ids), dtype=bool)
            if not found.all():
                problem = problem or (
                    f"global id {int(ids[~found][0])} is in rank {requester}'s halo but no rank owns it; "
                    "every halo id must be owned by some rank"
                )
                answers.append(np.zeros(0, np.int64))
            else:
                answers.append(directory[first[at], 1:].ravel())
        _agree(comm, problem)
        replies = _alltoallv(mpi, answers, np.int64)
        owner = np.empty(len(halo), np.int64)
        remote_index = np.empty(len(halo), np.int64)
        for r, reply in enumerate(replies):
            positions = order[home[order] == r]
            pairs = reply.reshape(-1, 2)
            owner[positions], remote_index[positions] = pairs[:, 0], pairs[:, 1]
        # 3. Each rank tells each owner which of its local rows to send, in the order the halo lists them.
        requests = [remote_index[owner == r] for r in range(size)]
        to_send = _alltoallv(mpi, requests, np.int64)
        peers = []
        for r in range(size):
            recv_rows = self.n_owned + np.nonzero(owner == r)[0]
            if len(to_send[r]) or len(recv_rows):
                send = (Rows(to_send[r]),) if len(to_send[r]) else ()
                recv = (Rows(recv_rows),) if len(recv_rows) else ()
                peers.append(PeerPlan(r, send, recv))
        self.halo_owners = owner
        return Pattern((self.n_local,), tuple(peers), trailing_axes=True)

    def pattern(self) -> Pattern:
        """The halo-exchange pattern: to each peer the rows it asked for, from each peer the halo rows it owns."""
        return self._pattern

    # -- local arrays -----------------------------------------------------------------------------------

    def empty(
        self, dtype: Any = np.float64, levels: int | None = None, xp: Any = np, order: Literal["C", "F"] = "C"
    ) -> Any:
        """An uninitialised local array: ``(n_local,)``, or ``(n_local, levels)`` with ``levels``."""
        shape = (self.n_local,) if levels is None else (self.n_local, levels)
        return resolve_array_module(xp, ArgumentTypeError).empty(
            shape, dtype=check_dtype(dtype, "the array"), order=order
        )

    def zeros(
        self, dtype: Any = np.float64, levels: int | None = None, xp: Any = np, order: Literal["C", "F"] = "C"
    ) -> Any:
        """A zero-filled local array (see ``empty``)."""
        shape = (self.n_local,) if levels is None else (self.n_local, levels)
        return resolve_array_module(xp, ArgumentTypeError).zeros(
            shape, dtype=check_dtype(dtype, "the array"), order=order
        )

    def owned(self, a: Any) -> Any:
        """View of the owned rows of local array ``a`` (a buffer such as a memoryview: of its NumPy view)."""
        a = view_buffer(a, "the array")
        if a.shape[0] != self.n_local:
            raise FieldError(f"the array has {a.shape[0]} rows, expected n_local = {self.n_local}")
        return a[: self.n_owned]

    def gather(self, a: Any, root: int = 0) -> np.ndarray | None:
        """Collective: on ``root`` an array indexed by global id (ids must be 0..N-1 over all ranks) holding the
        owned rows of every rank; None elsewhere. Device arrays are copied to the host. Every rank raises the
        same error if some rank passes a bad array or root, or the ranks pass different dtypes, trailing
        shapes or roots."""
        try:
            root = self.comm.check_root(root, "receives the array")
            rows = np.ascontiguousarray(to_host(self.owned(a)))
            check_dtype(rows.dtype, "the array to gather")
            if self._largest_id >= self._id_count:  # the ids are unique: 0..N-1 iff none is >= N
                raise DecompositionError(
                    f"gather needs global ids 0..{self._id_count - 1}; id {self._largest_id} is larger"
                )
            problem, signature = None, {"dtype": str(rows.dtype), "trailing shape": rows.shape[1:], "root": root}
        except Exception as error:  # every rank must hear of it, or the others would wait in the gather
            problem, signature = error, None
        self.comm.agree("gather()", signature, problem)
        pieces = self.comm.mpi.gather((self.owned_global_ids, rows), root=root)
        if pieces is None:
            return None
        result = np.empty((self._id_count, *rows.shape[1:]), dtype=rows.dtype)
        for ids, values in pieces:
            result[ids] = values
        return result

    def scatter(
        self, global_array: np.ndarray | None, root: int = 0, xp: Any = np, order: Literal["C", "F"] = "C"
    ) -> Any:
        """Collective: a local array whose owned rows come from ``global_array`` (indexed by global id; 1-D, or
        2-D with levels) on ``root``; halo rows are zero until the first exchange. Only ``root`` needs
        ``global_array``. Every rank raises the same error if root's array does not fit, some rank passes a
        bad root, ``xp`` or ``order``, or the ranks pass different roots."""
        g = None
        try:
            root = self.comm.check_root(root, "holds the array")
            xp = resolve_array_module(xp, ArgumentTypeError)
            check_order(order)
            if self.comm.rank == root:
                g = self._scatter_source(global_array)
            problem, signature = None, {"root": root}
        except Exception as error:  # every rank must hear of it, or the others would wait in the scatter
            problem, signature = error, None
        self.comm.agree("scatter()", signature, problem)
        ids = self.comm.mpi.gather(self.owned_global_ids, root=root)
        parts = None if g is None else [g[rank_ids] for rank_ids in ids]
        mine = self.comm.mpi.scatter(parts, root=root)
        local = self.zeros(mine.dtype, None if mine.ndim == 1 else mine.shape[1], xp=xp, order=order)
        local[: self.n_owned] = xp.asarray(mine)
        return local

    def _scatter_source(self, global_array: Any) -> np.ndarray:
        """Root's ``global_array`` for ``scatter`` as a host array, checked: indexed by global id, 1-D or 2-D."""
        if global_array is None:
            raise FieldError("scatter: root passed None; pass the global array, indexed by global id")
        g = to_host(global_array, "the global array")
        check_dtype(g.dtype, "the global array")
        if g.ndim not in (1, 2) or len(g) <= self._largest_id:
            raise FieldError(
                f"scatter: the global array on root has shape {tuple(g.shape)}; it is indexed by global id, so it "
                f"needs {self._largest_id + 1} rows (ids up to {self._largest_id}), and at most one more axis (levels)"
            )
        return g

    def __repr__(self) -> str:
        peers = len(self._pattern.peers)
        return (
            f"UnstructuredDecomposition(rank={self.comm.rank}, n_owned={self.n_owned}, n_halo={self.n_halo}, "
            f"peers={peers})"
        )
