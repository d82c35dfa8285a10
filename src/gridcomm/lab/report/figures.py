"""Tables of figures: what the per-benchmark table modules make of a result file, what a report shows and what
``--compare`` matches between two runs. A figure keeps its number (for ratios) apart from its text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .document import Table


def number(x: float) -> str:
    """About three significant digits, no exponent between 0.001 and 10^15."""
    size = abs(x)
    if size >= 1000:
        return f"{x:.0f}"
    if size >= 1e-3 or x == 0:
        return f"{x:.3g}"
    return f"{x:.2e}"


@dataclass(frozen=True)
class Cell:
    """A figure (``value``, in its column's unit) or, where there is none, a text: a label or why not."""

    value: float | None = None
    text: str = ""

    def shown(self) -> str:
        if self.value is not None:
            return number(self.value)
        return self.text or "—"


def cell(value: float | None, scale: float = 1.0, why: str = "—") -> Cell:
    """``value`` times ``scale`` (e.g. 1e6: seconds shown in µs), or ``why`` where there is no value."""
    return Cell(value * scale) if value is not None else Cell(text=why)


def ratio(top: float | None, bottom: float | None, scale: float = 1.0) -> Cell:
    """``scale`` x top / bottom (e.g. 100: a share in %), or "—" where either is missing."""
    return Cell(scale * top / bottom) if top is not None and bottom else Cell()


@dataclass(frozen=True)
class Column:
    name: str
    unit: str = ""
    #: Set beside the same figure of another run by --compare; False for seeds' figures and labels.
    compared: bool = True

    @property
    def header(self) -> str:
        return f"{self.name} [{self.unit}]" if self.unit else self.name


@dataclass
class FigureTable:
    """Rows keyed by the case they measure (``keys`` name the key's parts), one Cell per column."""

    title: str
    keys: list[str]
    columns: list[Column]
    rows: list[tuple[tuple[str, ...], dict[str, Cell]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the columns mean, the problem beside the seed's
    kind: str = ""  # tells apart the tables of one result file (--compare matches them by it)

    def add(self, key: Iterable[Any], cells: dict[str, Cell]) -> None:
        self.rows.append((tuple(str(k) for k in key), cells))

    def block(self) -> Table:
        body = [[*key, *(cells.get(c.name, Cell()).shown() for c in self.columns)] for key, cells in self.rows]
        return Table([*self.keys, *(c.header for c in self.columns)], body, self.title, label_columns=len(self.keys))


def union(rows: Iterable[dict[str, Any]], field_name: str) -> list[str]:
    """The names under ``field_name`` of all rows, in order of first appearance (rows may lack some)."""
    return list(dict.fromkeys(name for r in rows for name in r.get(field_name, {})))
