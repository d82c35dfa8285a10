"""``gridcomm report --compare A B``: the figures of two result folders side by side (before and after a change,
two machines): every figure that both measured for the same benchmark, ranks and case, as A, B and B / A."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .document import Block, Document, Heading, Items, Paragraph, Table
from .figures import FigureTable, number
from .folder import Folder, Result, load_folder
from .render import machine_rows, write_document
from .sections import ORDER, UNREADABLE, tables_of

Key = tuple[str, int, int, str]  # benchmark, ranks, GPUs, transport asked for (stencil2d: one file per transport)


def _key(result: Result) -> Key:
    return result.benchmark, result.ranks, result.gpus, str(result.config.get("transport", ""))


def latest(folder: Folder) -> tuple[dict[Key, Result], list[str]]:
    """The folder's results the report reads, the latest file per key; and the names of those left out."""
    chosen: dict[Key, Result] = {}
    for r in sorted(folder.results, key=lambda r: r.machine["date"]):
        if r.benchmark in ORDER:
            chosen[_key(r)] = r
    kept = {r.name for r in chosen.values()}
    return chosen, [r.name for r in folder.results if r.name not in kept]


def _pairs(a: FigureTable, b: FigureTable) -> list[list[str]]:
    """One row per figure both tables hold for the same case and column: case, figure, A, B, B / A."""
    theirs = dict(b.rows)
    rows = []
    for key, cells in a.rows:
        other = theirs.get(key)
        if other is None:
            continue
        for column in a.columns:
            x, y = cells.get(column.name), other.get(column.name)
            if column.compared and x is not None and y is not None and x.value is not None and y.value is not None:
                rows.append([*key, column.header, number(x.value), number(y.value),
                             number(y.value / x.value) if x.value else "—"])  # fmt: skip
    return rows


def _benchmark_tables(a: Result, b: Result) -> list[Block]:
    try:
        mine_all, theirs_all = tables_of(a) or [], tables_of(b) or []
    except UNREADABLE as error:
        return [Paragraph(f"Not compared: {error!r} in one of the two files (of another gridcomm version?).")]
    theirs = {t.kind: t for t in theirs_all}
    out: list[Block] = []
    for mine in mine_all:
        other = theirs.get(mine.kind)
        rows = _pairs(mine, other) if other is not None else []
        if rows:
            out.append(Table([*mine.keys, "figure", "A", "B", "B / A"], rows, mine.title, len(mine.keys) + 1))
    return out


def compare_document(a: Folder, b: Folder, names: Sequence[str] = ("A", "B")) -> Document:
    """The comparison of folders ``a`` and ``b`` (``names``: how to call them)."""
    doc = Document(f"gridcomm report: {names[0]} against {names[1]}")
    mine, old_a = latest(a)
    theirs, old_b = latest(b)
    pairs = machine_rows(a.results), machine_rows(b.results)
    doc.add(
        Paragraph(
            f"A is {names[0]}, B is {names[1]}. Each row is one figure that both measured for the same benchmark, "
            "rank count and case; B / A below 1 means B's figure is lower (shorter times, less energy, but fewer "
            "GB/s or GFLOP/s). Seeds' figures and labels are not compared."
        ),
        Heading("Machines"),
        Table(["", "A", "B"], [[label, x, y] for (label, x), (_, y) in zip(*pairs, strict=True)], label_columns=3),
    )
    for key in sorted(set(mine) & set(theirs), key=lambda k: (ORDER.index(k[0]), k[1:])):
        tables = _benchmark_tables(mine[key], theirs[key])
        benchmark, ranks, gpus, transport = key
        where = (
            f"{ranks} rank(s), "
            + (f"{gpus} GPU(s)" if gpus else "CPU")
            + (f", transport {transport}" if transport else "")
        )
        doc.add(Heading(f"{benchmark}: {where}"), Paragraph(f"A: {mine[key].name}; B: {theirs[key].name}."))
        doc.add(*(tables or [Paragraph("No figure measured for the same case in both.")]))
    unmatched = [f"only in A: {mine[k].name}" for k in sorted(set(mine) - set(theirs))]
    unmatched += [f"only in B: {theirs[k].name}" for k in sorted(set(theirs) - set(mine))]
    unmatched += [f"A, not compared (an older run of the same benchmark, or not read): {n}" for n in old_a]
    unmatched += [f"B, not compared (an older run of the same benchmark, or not read): {n}" for n in old_b]
    if unmatched:
        doc.add(Heading("Not compared"), Items(unmatched))
    return doc


def write_compare(a: Path, b: Path, out: Path) -> tuple[Path, Path]:
    """Compare the folders ``a`` and ``b``; write compare.md and compare.html into ``out``; their paths.
    ArgumentError (naming the folder) when either is missing or holds no benchmark result."""
    first, second = load_folder(a, "folder A"), load_folder(b, "folder B")
    doc = compare_document(first, second, (Path(a).name or str(a), Path(b).name or str(b)))
    out.mkdir(parents=True, exist_ok=True)
    return write_document(doc, out, "compare")
