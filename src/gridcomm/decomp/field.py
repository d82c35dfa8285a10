"""One kind of field on a Cartesian decomposition: its own halo widths and staggering.

A field is cell-centred, or face-centred along some axes (Arakawa C- and D-grid velocities, B-grid corners).
Faces are numbered so that **face i is the low face of cell i** (the face between cells i - 1 and i), and a
face belongs to the rank that owns the cell it is the low face of. Along a staggered axis the global grid
therefore has one more point than the cells where the axis is not periodic (faces 0..N, the high boundary
face N belonging to the last block of ranks) and as many as the cells where it is periodic (face N is face 0).
A rank owning cells a..b-1 owns faces a..b-1 (a..b on the last block of a non-periodic axis); face b, the high
face of its last cell, is the next rank's and arrives in its high halo.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..arguments import entries, is_whole_number
from ..arrays import check_dtype, check_order, resolve_array_module, to_host, view_buffer
from ..errors import ArgumentTypeError, DecompositionError, FieldError
from ..pattern import Box, Pattern, PeerPlan

if TYPE_CHECKING:
    from .cartesian import CartesianDecomposition

#: Axis letters a stagger may be named by: x, y, z are axes 0, 1, 2 (the order of global_shape).
AXIS_NAMES = "xyz"

StaggerSpec = str | int | Sequence[str | int] | None

_STAGGER_FORMS = (
    'give None (cell centres), axis letters ("x", "y", "xy": x, y, z are axes 0, 1, 2) or axis numbers (0, or (0, 1))'
)


def normalise_stagger(stagger: Any, ndim: int) -> tuple[int, ...]:
    """The axes a field is staggered along (face-centred), ascending; ``stagger`` as described by _STAGGER_FORMS."""
    if stagger is None or stagger == "":
        return ()
    given = list(stagger) if isinstance(stagger, str) else [stagger] if is_whole_number(stagger) else None
    if given is None:
        given = list(entries(stagger, "stagger", _STAGGER_FORMS))
    axes = []
    for axis in given:
        if isinstance(axis, str) and len(axis) == 1 and axis in AXIS_NAMES:
            axes.append(AXIS_NAMES.index(axis))
        elif is_whole_number(axis) and not isinstance(axis, bool):
            axes.append(int(axis))
        else:
            raise ArgumentTypeError(f"stagger={stagger!r} holds {axis!r}; {_STAGGER_FORMS}")
    if any(not 0 <= a < ndim for a in axes) or len(set(axes)) != len(axes):
        raise DecompositionError(
            f"stagger={stagger!r} names axes {axes}, but the grid has {ndim} (0 to {ndim - 1}: "
            f"{', '.join(AXIS_NAMES[:ndim])}), each at most once; {_STAGGER_FORMS}"
        )
    return tuple(sorted(axes))


def check_field_halo(halo: tuple[tuple[int, int], ...], widest: tuple[tuple[int, int], ...]) -> None:
    """DecompositionError unless every side of ``halo`` is at most that side of the decomposition's ``widest``."""
    for k, (pair, limits) in enumerate(zip(halo, widest, strict=True)):
        for side, mine, limit in zip(("low", "high"), pair, limits, strict=True):
            if mine > limit:
                raise DecompositionError(
                    f"field halo {halo} is wider than the decomposition's halo {widest} on the {side} side of "
                    f"dimension {k} ({mine} > {limit}); a field's halo is at most its decomposition's: build the "
                    "decomposition with the widest halo of its fields"
                )


def axis_names(axes: Sequence[int]) -> str:
    """e.g. "x", "xy"."""
    return "".join(AXIS_NAMES[a] for a in axes)


class CartesianField:
    """Where one kind of field lives on a ``CartesianDecomposition``: its halo and its staggering.

    Made by ``decomposition.field(halo=..., stagger=...)``. It has the decomposition's process grid and
    blocks, and shapes of its own: ``global_shape`` (one more point along each staggered axis that is not
    periodic), ``interior_shape``, ``local_shape`` (interior plus its halo), ``global_slices``. It allocates
    (``empty``, ``zeros``), views (``interior``), gathers and scatters such fields, and hands
    ``HaloExchanger`` its pattern: ``HaloExchanger([xfaces, yfaces, cells], [u, v, h])`` moves fields of
    different halos and staggering in one message per peer. See the module docstring for which rank owns
    a face.
    """

    def __init__(
        self, decomposition: CartesianDecomposition, halo: tuple[tuple[int, int], ...], stagger: tuple[int, ...]
    ) -> None:
        """Use ``decomposition.field(...)``, which checks the arguments on every rank together."""
        self.decomposition = decomposition
        self.comm = decomposition.comm
        self.halo = halo
        self.stagger = stagger
        self.ndim = decomposition.ndim
        self.stencil = decomposition.stencil
        # Points a staggered axis adds to the grid: the high boundary face, where the axis does not wrap.
        self._extra = tuple(int(k in stagger and not wraps) for k, wraps in enumerate(decomposition.periodic))
        self.global_shape = tuple(n + e for n, e in zip(decomposition.global_shape, self._extra, strict=True))
        self.global_slices = self.global_slices_of(self.comm.rank)
        self.interior_shape = _extent(self.global_slices)
        self.local_shape = tuple(n + lo + hi for n, (lo, hi) in zip(self.interior_shape, halo, strict=True))

    @property
    def placement(self) -> str:
        """Where the field's points lie and its halo, in words, e.g. "faces along x, halo ((1, 1), (1, 1))"."""
        return f"{self._kind}, halo {self.halo}"

    @property
    def _kind(self) -> str:
        return f"faces along {axis_names(self.stagger)}" if self.stagger else "cell centres"

    @property
    def parameters(self) -> dict[str, Any]:
        """What every rank's field must share: the decomposition's parameters, and the field's halo and
        staggering where they are not the decomposition's own (its cell-centred fields)."""
        own: dict[str, Any] = {}
        if self.halo != self.decomposition.halo:
            own["field halo"] = self.halo
        if self.stagger:
            own["stagger"] = axis_names(self.stagger)
        return {**self.decomposition.parameters, **own}

    @property
    def signature(self) -> str:
        """``parameters`` in one line (HaloExchanger compares it between ranks)."""
        return ", ".join(f"{name}={value!r}" for name, value in self.parameters.items())

    def global_slices_of(self, rank: int) -> tuple[slice, ...]:
        """The points of the global (staggered) grid that ``rank`` owns: its cells' low faces along a staggered
        axis, and the high boundary face too on the last block of one that is not periodic."""
        coords = self.decomposition.coords_of(rank)
        slices = self.decomposition.global_slices_of(rank)
        return tuple(
            slice(s.start, s.stop + (e if c == p - 1 else 0))
            for s, e, c, p in zip(slices, self._extra, coords, self.decomposition.proc_grid, strict=True)
        )

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
                f"{what} has shape {tuple(a.shape)}, expected {self.local_shape} (interior {self.interior_shape} "
                f"plus halo {self.halo}; {self._kind}); allocate it with {self._maker}.empty(dtype)"
            )

    @property
    def _maker(self) -> str:
        """How the message that rejects an array names this field's allocator."""
        own = self.halo == self.decomposition.halo and not self.stagger  # the decomposition's own fields
        return "decomposition" if own else "this field"

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
                f"scatter: the global array on root has shape {tuple(g.shape)}, expected {self.global_shape} "
                f"({self._kind})"
            )
        dtype = check_dtype(g.dtype, "the global array")
        blocks = [np.ascontiguousarray(g[self.global_slices_of(r)]).ravel() for r in range(self.comm.size)]
        return np.concatenate(blocks).view(np.uint8), dtype.str

    def _interior_shape_of(self, rank: int) -> tuple[int, ...]:
        return _extent(self.global_slices_of(rank))

    # -- exchange pattern -------------------------------------------------------------------------------

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
        """This rank's halo-exchange pattern for this field: one message per peer rank, holding every box for
        that peer.

        Boxes in a message are ordered by the sender's direction, so that the receiver (which sees direction
        -d) unpacks them in the order they were packed.
        """
        coords = self.decomposition.coords
        sends: dict[int, list[tuple[tuple[int, ...], Box]]] = {}
        recvs: dict[int, list[tuple[tuple[int, ...], Box]]] = {}
        for d in self.decomposition.neighbour_offsets():
            peer = self.decomposition.rank_of([c + dk for c, dk in zip(coords, d, strict=True)])
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
            f"CartesianField({self.placement}, global_shape={self.global_shape}, rank={self.comm.rank}, "
            f"interior_shape={self.interior_shape}, local_shape={self.local_shape})"
        )


def _extent(slices: Sequence[slice]) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in slices)
