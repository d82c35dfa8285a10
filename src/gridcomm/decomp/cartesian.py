"""Cartesian (block) decompositions of a structured 1-, 2- or 3-D grid, with halos."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..arguments import entries, is_whole_number
from ..arrays import check_dtype, check_order, resolve_array_module, to_host, view_buffer
from ..comm import Communicator
from ..errors import ArgumentTypeError, DecompositionError, FieldError
from ..pattern import Box, Pattern, PeerPlan
from .procgrid import block_sizes, choose_proc_grid

HaloSpec = int | Sequence[int | tuple[int, int]]


_HALO_FORMS = "give one int, one int per dimension, or a (low, high) pair per dimension, e.g. halo=((1, 1), (2, 0))"


def _integer(value: Any, what: str, whole: Any) -> int:
    """``value`` (an entry of argument ``what``, which is ``whole``) as an int; ArgumentTypeError otherwise."""
    if not is_whole_number(value):
        raise ArgumentTypeError(
            f"{what}={whole!r} holds {value!r} ({type(value).__name__}); its entries are whole numbers (int)"
        )
    return int(value)


def _normalise_shape(global_shape: Any) -> tuple[int, ...]:
    given = entries(global_shape, "global_shape", "give points per dimension, e.g. global_shape=(400, 300)")
    shape = tuple(_integer(n, "global_shape", global_shape) for n in given)
    if not 1 <= len(shape) <= 3 or any(n < 1 for n in shape):
        raise DecompositionError(f"global_shape={shape!r} must have 1 to 3 dimensions, each at least 1 point")
    return shape


def _normalise_halo(halo: HaloSpec, ndim: int) -> tuple[tuple[int, int], ...]:
    widths = [halo] * ndim if is_whole_number(halo) else entries(halo, "halo", _HALO_FORMS)
    if len(widths) != ndim:
        raise DecompositionError(
            f"halo={halo!r} gives {len(widths)} dimension(s) but global_shape has {ndim}; {_HALO_FORMS}"
        )
    result = []
    for w in widths:
        if is_whole_number(w):
            pair = [w, w]
        elif isinstance(w, np.ndarray | Sequence) and not isinstance(w, str | bytes):
            pair = [_integer(x, "halo", halo) for x in entries(w, "halo", _HALO_FORMS)]
        else:
            raise ArgumentTypeError(f"halo={halo!r} holds {w!r} ({type(w).__name__}); {_HALO_FORMS}")
        if len(pair) != 2 or any(x < 0 for x in pair):
            raise DecompositionError(
                f"halo={halo!r}: each dimension needs a width >= 0 or a (low, high) pair of widths, got {w!r}"
            )
        result.append((int(pair[0]), int(pair[1])))
    return tuple(result)


def _normalise_periodic(periodic: Any, ndim: int) -> tuple[bool, ...]:
    hint = "give one bool or one per dimension, e.g. periodic=(True, False)"
    wraps = [periodic] * ndim if isinstance(periodic, bool | np.bool_) else entries(periodic, "periodic", hint)
    if len(wraps) != ndim:
        raise DecompositionError(f"periodic={periodic!r} needs one bool or {ndim} of them (one per dimension)")
    for p in wraps:
        if not isinstance(p, bool | np.bool_):
            raise ArgumentTypeError(f"periodic={periodic!r} holds {p!r} ({type(p).__name__}); {hint}")
    return tuple(bool(p) for p in wraps)


class CartesianDecomposition:
    """A structured grid split into blocks, one per rank, each with a halo of ghost points.

    Construction is collective. Rank r owns the block at ``coords`` of the process grid (C order, as
    MPI_Cart_create without reordering). Local arrays are the owned interior plus ``halo`` points on each side.

    Args:
        comm: a ``Communicator``, an mpi4py communicator or None (COMM_WORLD).
        global_shape: points of the whole grid per dimension (1 to 3 dimensions).
        halo: ghost-point width: one int, one int per dimension, or (low, high) per dimension,
            e.g. ``((2, 1), (1, 1), (0, 0))``.
        periodic: one bool, or one per dimension: whether the grid wraps around.
        proc_grid: ranks per dimension; None (or 0 entries) lets gridcomm choose the grid that moves the
            fewest halo points. Its product must be the number of ranks.
        stencil: ``"box"`` exchanges faces, edges and corners (the default); ``"star"`` only faces.
    """

    def __init__(
        self,
        comm: Any,
        global_shape: Sequence[int],
        halo: HaloSpec = 1,
        periodic: bool | Sequence[bool] = False,
        proc_grid: Sequence[int] | None = None,
        stencil: Literal["box", "star"] = "box",
    ) -> None:
        self.comm = Communicator.wrap(comm)
        try:  # every rank must hear of a bad argument on one, and ranks must not lay out different grids
            self._lay_out(global_shape, halo, periodic, proc_grid, stencil)
            problem = None
        except Exception as error:
            problem = error
        self.comm.agree("CartesianDecomposition()", None if problem else self.parameters, problem)
        self.coords = self.coords_of(self.comm.rank)
        self.interior_shape = tuple(s[c] for s, c in zip(self.sizes, self.coords, strict=True))
        self.local_shape = tuple(n + lo + hi for n, (lo, hi) in zip(self.interior_shape, self.halo, strict=True))
        self.global_slices = self.global_slices_of(self.comm.rank)

    def _lay_out(self, global_shape: Any, halo: HaloSpec, periodic: Any, proc_grid: Any, stencil: Any) -> None:
        """The arguments checked, and the process grid and block sizes they give (local)."""
        shape = _normalise_shape(global_shape)
        self.global_shape = shape
        self.ndim = len(shape)
        self.halo = _normalise_halo(halo, self.ndim)
        self.periodic = _normalise_periodic(periodic, self.ndim)
        if not isinstance(stencil, str):
            raise ArgumentTypeError(f"stencil={stencil!r} ({type(stencil).__name__}): use 'box' or 'star'")
        if stencil not in ("box", "star"):
            raise DecompositionError(f"stencil={stencil!r}: use 'box' (faces, edges, corners) or 'star' (faces)")
        self.stencil = stencil
        self.proc_grid = self._check_proc_grid(proc_grid)
        self.sizes = tuple(block_sizes(n, p) for n, p in zip(shape, self.proc_grid, strict=True))
        self._check_halo_fits()

    @property
    def parameters(self) -> dict[str, Any]:
        """What every rank's decomposition must share, by argument (compared between ranks by the constructor,
        gather and scatter: ranks that chose different process grids would otherwise exchange messages of equal
        sizes into the wrong halos)."""
        return {
            "global_shape": self.global_shape,
            "halo": self.halo,
            "periodic": self.periodic,
            "proc_grid": self.proc_grid,
            "stencil": self.stencil,
        }

    @property
    def signature(self) -> str:
        """``parameters`` in one line (HaloExchanger compares it between ranks)."""
        return ", ".join(f"{name}={value!r}" for name, value in self.parameters.items())

    # -- layout -----------------------------------------------------------------------------------------

    def _check_proc_grid(self, proc_grid: Sequence[int] | None) -> tuple[int, ...]:
        size = self.comm.size
        if proc_grid is not None:
            hint = "give ranks per dimension (0 = choose), e.g. proc_grid=(2, 0), or None"
            grid = tuple(_integer(p, "proc_grid", proc_grid) for p in entries(proc_grid, "proc_grid", hint))
            if len(grid) != self.ndim or any(p < 0 for p in grid):
                raise DecompositionError(f"proc_grid={grid!r} needs {self.ndim} non-negative entries (0 = choose)")
            if all(grid):
                if math.prod(grid) != size:
                    raise DecompositionError(
                        f"proc_grid={grid} has {math.prod(grid)} ranks but the communicator has {size}; "
                        f"give a grid whose product is {size}, or proc_grid=None to choose one"
                    )
                for k, (p, n) in enumerate(zip(grid, self.global_shape, strict=True)):
                    if p > n:
                        raise DecompositionError(
                            f"global_shape={self.global_shape} is smaller than proc_grid={grid} in dimension "
                            f"{k} ({n} points over {p} ranks would leave ranks empty); use fewer ranks there"
                        )
                return grid
        if math.prod(self.global_shape) < size:
            raise DecompositionError(
                f"global_shape={self.global_shape} has {math.prod(self.global_shape)} points, fewer than the "
                f"{size} ranks; use fewer ranks or a larger grid"
            )
        return choose_proc_grid(size, self.global_shape, self.halo, self.periodic, proc_grid)

    def _check_halo_fits(self) -> None:
        for k, ((lo, hi), sizes) in enumerate(zip(self.halo, self.sizes, strict=True)):
            exchanged = len(sizes) > 1 or self.periodic[k]
            if exchanged and max(lo, hi) > min(sizes):
                raise DecompositionError(
                    f"halo width {max(lo, hi)} in dimension {k} is wider than the smallest subdomain there "
                    f"({min(sizes)} points: {self.global_shape[k]} over {len(sizes)} ranks); use a narrower "
                    "halo, fewer ranks in that dimension (proc_grid=...), or a larger grid"
                )

    def coords_of(self, rank: int) -> tuple[int, ...]:
        """Process-grid coordinates of ``rank`` (C order)."""
        return tuple(int(c) for c in np.unravel_index(rank, self.proc_grid))

    def rank_of(self, coords: Sequence[int]) -> int | None:
        """Rank at ``coords``, wrapped in periodic dimensions; None outside a non-periodic boundary."""
        wrapped = []
        for c, p, wraps in zip(coords, self.proc_grid, self.periodic, strict=True):
            if not 0 <= c < p:
                if not wraps:
                    return None
                c %= p
            wrapped.append(c)
        return int(np.ravel_multi_index(wrapped, self.proc_grid))

    def global_slices_of(self, rank: int) -> tuple[slice, ...]:
        """The part of the global grid that ``rank`` owns."""
        slices = []
        for sizes, c in zip(self.sizes, self.coords_of(rank), strict=True):
            start = sum(sizes[:c])
            slices.append(slice(start, start + sizes[c]))
        return tuple(slices)

    # -- local arrays -----------------------------------------------------------------------------------

    def empty(self, dtype: Any = np.float64, xp: Any = np, order: Literal["C", "F"] = "C") -> Any:
        """An uninitialised local array (interior plus halo) of ``dtype`` from array module ``xp``."""
        return resolve_array_module(xp, ArgumentTypeError).empty(
            self.local_shape, dtype=check_dtype(dtype, "the array"), order=order
        )

    def zeros(self, dtype: Any = np.float64, xp: Any = np, order: Literal["C", "F"] = "C") -> Any:
        """A zero-filled local array (interior plus halo)."""
        return resolve_array_module(xp, ArgumentTypeError).zeros(
            self.local_shape, dtype=check_dtype(dtype, "the array"), order=order
        )

    @property
    def interior_slices(self) -> tuple[slice, ...]:
        """Index of the owned interior inside a local array."""
        return tuple(slice(lo, lo + n) for (lo, _), n in zip(self.halo, self.interior_shape, strict=True))

    def interior(self, a: Any) -> Any:
        """View of the owned interior of local array ``a`` (a buffer such as a memoryview: of its NumPy view)."""
        a = view_buffer(a, "the array")
        self._check_local(a, "the array")
        return a[self.interior_slices]

    def _check_local(self, a: Any, what: str) -> None:
        if tuple(a.shape) != self.local_shape:
            raise FieldError(
                f"{what} has shape {tuple(a.shape)}, expected {self.local_shape} (interior "
                f"{self.interior_shape} plus halo {self.halo}); allocate it with decomposition.empty(dtype)"
            )

    def gather(self, a: Any, root: int = 0) -> np.ndarray | None:
        """Collective: the global array assembled on ``root`` from every rank's interior (None elsewhere).

        Device arrays are copied to the host first; the result is always a NumPy array. Every rank raises
        the same error if some rank passes a bad array or root, or the ranks pass different dtypes or roots.
        """
        from mpi4py import MPI

        try:
            root = self.comm.check_root(root, "receives the array")
            block = np.ascontiguousarray(to_host(self.interior(a)))
            check_dtype(block.dtype, "the array to gather")
            problem, signature = None, {**self.parameters, "dtype": str(block.dtype), "root": root}
        except Exception as error:  # every rank must hear of it, or the others would wait in Gatherv
            problem, signature = error, None
        self.comm.agree("gather()", signature, problem)
        counts = [math.prod(self._interior_shape_of(r)) * block.itemsize for r in range(self.comm.size)]
        if self.comm.rank != root:
            self.comm.mpi.Gatherv([block, MPI.BYTE], None, root=root)
            return None
        flat = np.empty(sum(counts), dtype=np.uint8)
        self.comm.mpi.Gatherv([block, MPI.BYTE], [flat, counts, MPI.BYTE], root=root)
        result = np.empty(self.global_shape, dtype=block.dtype)
        for r, start in enumerate(itertools.accumulate([0, *counts[:-1]])):
            piece = flat[start : start + counts[r]].view(block.dtype)
            result[self.global_slices_of(r)] = piece.reshape(self._interior_shape_of(r))
        return result

    def scatter(
        self, global_array: np.ndarray | None, root: int = 0, xp: Any = np, order: Literal["C", "F"] = "C"
    ) -> Any:
        """Collective: a local array (halo zeroed) holding this rank's part of ``global_array`` from ``root``.

        Only ``root`` needs ``global_array``; the others may pass None. Every rank raises the same error if
        root's array does not fit, some rank passes a bad root, ``xp`` or ``order``, or the ranks pass
        different roots.
        """
        from mpi4py import MPI

        sendbuf, dtype = None, ""
        try:
            root = self.comm.check_root(root, "holds the array")
            xp = resolve_array_module(xp, ArgumentTypeError)
            check_order(order)
            if self.comm.rank == root:
                sendbuf, dtype = self._scatter_buffer(global_array)
            problem, signature = None, {**self.parameters, "root": root}
        except Exception as error:  # every rank must hear of it, or the others would wait in Scatterv
            problem, signature = error, None
        # Root tells everyone the dtype in the same step, so that no rank waits for data that never comes.
        dtype = np.dtype(self.comm.agree("scatter()", signature, problem, note=dtype)[root])
        counts = [math.prod(self._interior_shape_of(r)) * dtype.itemsize for r in range(self.comm.size)]
        block = np.empty(math.prod(self.interior_shape), dtype=dtype)
        send = [sendbuf, counts, MPI.BYTE] if self.comm.rank == root else None
        self.comm.mpi.Scatterv(send, [block.view(np.uint8), MPI.BYTE], root=root)
        local = self.zeros(dtype, xp=xp, order=order)
        local[self.interior_slices] = xp.asarray(block.reshape(self.interior_shape))
        return local

    def _scatter_buffer(self, global_array: Any) -> tuple[np.ndarray, str]:
        """Root's send buffer for ``scatter`` (every rank's block, in rank order, as bytes) and its dtype."""
        if global_array is None:
            raise FieldError(f"scatter: root passed None; pass the global array of shape {self.global_shape}")
        g = to_host(global_array, "the global array")
        if tuple(g.shape) != self.global_shape:
            raise FieldError(
                f"scatter: the global array on root has shape {tuple(g.shape)}, expected {self.global_shape}"
            )
        dtype = check_dtype(g.dtype, "the global array")
        blocks = [np.ascontiguousarray(g[self.global_slices_of(r)]).ravel() for r in range(self.comm.size)]
        return np.concatenate(blocks).view(np.uint8), dtype.str

    def _interior_shape_of(self, rank: int) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.global_slices_of(rank))

    # -- exchange pattern -------------------------------------------------------------------------------

    def neighbour_offsets(self) -> list[tuple[int, ...]]:
        """Directions to exchange with: every non-zero offset in {-1, 0, 1}^ndim ("box"), or only those along
        one axis ("star"), in lexicographic order."""
        offsets = [d for d in itertools.product((-1, 0, 1), repeat=self.ndim) if any(d)]
        if self.stencil == "star":
            offsets = [d for d in offsets if sum(map(abs, d)) == 1]
        return offsets

    def _send_box(self, d: tuple[int, ...]) -> Box:
        # Interior points next to side d, as wide as the receiving neighbour's halo on its opposite side.
        start, stop = [], []
        for dk, n, (lo, hi) in zip(d, self.interior_shape, self.halo, strict=True):
            a, b = {-1: (0, hi), 0: (0, n), 1: (n - lo, n)}[dk]
            start.append(a + lo)
            stop.append(b + lo)
        return Box(tuple(start), tuple(stop))

    def _recv_box(self, d: tuple[int, ...]) -> Box:
        # Halo points on side d.
        start, stop = [], []
        for dk, n, (lo, hi) in zip(d, self.interior_shape, self.halo, strict=True):
            a, b = {-1: (-lo, 0), 0: (0, n), 1: (n, n + hi)}[dk]
            start.append(a + lo)
            stop.append(b + lo)
        return Box(tuple(start), tuple(stop))

    def pattern(self) -> Pattern:
        """This rank's halo-exchange pattern: one message per peer rank, holding every box for that peer.

        Boxes in a message are ordered by the sender's direction, so that the receiver (which sees direction
        -d) unpacks them in the order they were packed.
        """
        sends: dict[int, list[tuple[tuple[int, ...], Box]]] = {}
        recvs: dict[int, list[tuple[tuple[int, ...], Box]]] = {}
        for d in self.neighbour_offsets():
            peer = self.rank_of([c + dk for c, dk in zip(self.coords, d, strict=True)])
            if peer is None:
                continue
            send, recv = self._send_box(d), self._recv_box(d)
            if send.size:
                sends.setdefault(peer, []).append((d, send))
            if recv.size:
                # The peer in direction d sent this to us as its direction -d.
                recvs.setdefault(peer, []).append((tuple(-x for x in d), recv))
        peers = tuple(
            PeerPlan(
                rank=r,
                send=tuple(box for _, box in sorted(sends.get(r, []))),
                recv=tuple(box for _, box in sorted(recvs.get(r, []))),
            )
            for r in sorted(set(sends) | set(recvs))
        )
        return Pattern(local_shape=self.local_shape, peers=peers)

    def __repr__(self) -> str:
        return (
            f"CartesianDecomposition(global_shape={self.global_shape}, proc_grid={self.proc_grid}, "
            f"halo={self.halo}, periodic={self.periodic}, stencil={self.stencil!r}, rank={self.comm.rank}, "
            f"coords={self.coords}, interior_shape={self.interior_shape})"
        )
