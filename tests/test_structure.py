"""The house keeps its shape: the library apart from the lab built on it, the lab's layers in order, no circle.

Read from the source with ``ast`` (every import, those inside functions too): a new module that imports against
these rules fails here, where the reason is stated, rather than as a tangle found later.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "gridcomm"
#: The lab's layers, lowest first: each may import the library and the layers before it, never one after it.
LAB_LAYERS = ("measure", "console", "demo", "apps", "bench", "report", "cli")


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every gridcomm module and the gridcomm modules (or packages) it imports."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    found: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gridcomm"):
                target = node.module or ""
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("gridcomm"):
                        found[name].add(alias.name)
                continue
            else:
                continue
            for alias in node.names:  # "from . import x" names modules; "from .m import f" names m
                sub = f"{target}.{alias.name}"
                found[name].add(sub if sub in modules else target)
    return found


def _unit(module: str) -> str:
    """What the rules speak of: a top-level module or package of the library, or a layer of the lab."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "lab" else ".".join(parts[:2])


def test_the_library_never_imports_the_lab():
    wrong = sorted(
        f"{a} imports {t}"
        for a, targets in _imports().items()
        for t in targets
        if not a.startswith("gridcomm.lab") and a != "gridcomm.__main__" and t.startswith("gridcomm.lab")
    )
    assert not wrong, (
        "the library (decompositions, patterns, packing, transports, exchange) must not depend on "
        "the lab built on it (apps, bench, report, cli):\n" + "\n".join(wrong)
    )


def test_the_lab_layers_import_only_those_below():
    rank = {f"gridcomm.lab.{layer}": k for k, layer in enumerate(LAB_LAYERS)}
    wrong = sorted(
        f"{a} imports {t}"
        for a, targets in _imports().items()
        for t in targets
        if _unit(a) in rank and _unit(t) in rank and rank[_unit(t)] > rank[_unit(a)]
    )
    assert not wrong, f"an import runs back up the lab's layers {LAB_LAYERS}:\n" + "\n".join(wrong)


def test_no_circle_between_the_library_modules():
    graph: dict[str, set[str]] = defaultdict(set)
    for a, targets in _imports().items():
        for t in targets:
            if _unit(a) != _unit(t) and not _unit(a).startswith("gridcomm.lab") and _unit(a) != "gridcomm":
                graph[_unit(a)].add(_unit(t))
    circles = []
    for start in list(graph):  # a depth-first search from each unit back to itself
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, "modules of the library import each other in a circle:\n" + "\n".join(sorted(set(circles)))


def test_the_device_floor_imports_nothing_of_gridcomm():
    imported = _imports()["gridcomm.device"]
    assert not imported, f"gridcomm.device is the floor of the GPU paths, yet it imports {sorted(imported)}"


def test_the_rules_see_the_imports():
    """The reader itself: it finds the lab's imports of the library and the layers, or the rules above test nothing."""
    imports = _imports()
    assert "gridcomm.exchange" in imports["gridcomm.transpose"]
    assert any(t.startswith("gridcomm.lab.apps") for t in imports["gridcomm.lab.bench.spectral"])
    everything = set(itertools.chain.from_iterable(imports.values()))
    assert "gridcomm.transports" in everything and any(t.startswith("gridcomm.lab.measure.") for t in everything)
