"""Cartesian (block) decompositions of a structured 1-, 2- or 3-D grid, with halos."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..arguments import entries, is_whole_number
from ..comm import Communicator
from ..errors import ArgumentTypeError, DecompositionError
from ..pattern import Pattern
from .field import CartesianField, StaggerSpec, check_field_halo, normalise_stagger
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
        # The decomposition's own fields: cell-centred, with its halo (what every method below works on).
        self._cells = CartesianField(self, self.halo, ())
        self.interior_shape = self._cells.interior_shape
        self.local_shape = self._cells.local_shape
        self.global_slices = self._cells.global_slices

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

    def neighbour_offsets(self) -> list[tuple[int, ...]]:
        """Directions to exchange with: every non-zero offset in {-1, 0, 1}^ndim ("box"), or only those along
        one axis ("star"), in lexicographic order."""
        offsets = [d for d in itertools.product((-1, 0, 1), repeat=self.ndim) if any(d)]
        if self.stencil == "star":
            offsets = [d for d in offsets if sum(map(abs, d)) == 1]
        return offsets

    # -- fields -----------------------------------------------------------------------------------------

    def field(self, halo: HaloSpec | None = None, stagger: StaggerSpec = None) -> CartesianField:
        """Collective: a field descriptor of its own halo and staggering on this decomposition.

        Args:
            halo: the field's ghost points, in any form the decomposition takes, each side at most the
                decomposition's; None: the decomposition's.
            stagger: the axes along which the field sits on cell faces: None (cell centres), axis letters
                (``"x"``, ``"y"``, ``"xy"``; x, y, z are axes 0, 1, 2) or numbers (``0``, ``(0, 1)``). Face i is
                the low face of cell i; an axis that is not periodic has one more face than cells.

        Every rank must pass the same arguments; a halo wider than the decomposition's, an unknown axis, or
        ranks that disagree raise the same error on every rank. ``grid.field()`` is the decomposition's own
        cell-centred field.
        """
        try:
            widths = self.halo if halo is None else _normalise_halo(halo, self.ndim)
            check_field_halo(widths, self.halo)
            axes = normalise_stagger(stagger, self.ndim)
            problem, signature = None, {**self.parameters, "field halo": widths, "stagger": axes}
        except Exception as error:  # every rank must hear of it, or the others would go on to exchange
            problem, signature = error, None
        self.comm.agree("field()", signature, problem)
        return CartesianField(self, widths, axes)

    # -- local arrays: those of the decomposition's own field (cell centres, its halo) ---------------------

    @property
    def interior_slices(self) -> tuple[slice, ...]:
        """Index of the owned interior inside a local array."""
        return self._cells.interior_slices

    def empty(self, dtype: Any = np.float64, xp: Any = np, order: Literal["C", "F"] = "C") -> Any:
        """An uninitialised local array (interior plus halo) of ``dtype`` from array module ``xp``."""
        return self._cells.empty(dtype, xp, order)

    def zeros(self, dtype: Any = np.float64, xp: Any = np, order: Literal["C", "F"] = "C") -> Any:
        """A zero-filled local array (interior plus halo)."""
        return self._cells.zeros(dtype, xp, order)

    def interior(self, a: Any) -> Any:
        """View of the owned interior of local array ``a`` (a buffer such as a memoryview: of its NumPy view)."""
        return self._cells.interior(a)

    def gather(self, a: Any, root: int = 0) -> np.ndarray | None:
        """Collective: the global array assembled on ``root`` from every rank's interior (None elsewhere).

        Device arrays are copied to the host first; the result is always a NumPy array. Every rank raises
        the same error if some rank passes a bad array or root, or the ranks pass different dtypes or roots.
        """
        return self._cells.gather(a, root)

    def scatter(
        self, global_array: np.ndarray | None, root: int = 0, xp: Any = np, order: Literal["C", "F"] = "C"
    ) -> Any:
        """Collective: a local array (halo zeroed) holding this rank's part of ``global_array`` from ``root``.

        Only ``root`` needs ``global_array``; the others may pass None. Every rank raises the same error if
        root's array does not fit, some rank passes a bad root, ``xp`` or ``order``, or the ranks pass
        different roots.
        """
        return self._cells.scatter(global_array, root, xp, order)

    def pattern(self) -> Pattern:
        """This rank's halo-exchange pattern: one message per peer rank, holding every box for that peer.

        Boxes in a message are ordered by the sender's direction, so that the receiver (which sees direction
        -d) unpacks them in the order they were packed.
        """
        return self._cells.pattern()

    def __repr__(self) -> str:
        return (
            f"CartesianDecomposition(global_shape={self.global_shape}, proc_grid={self.proc_grid}, "
            f"halo={self.halo}, periodic={self.periodic}, stencil={self.stencil!r}, rank={self.comm.rank}, "
            f"coords={self.coords}, interior_shape={self.interior_shape})"
        )
