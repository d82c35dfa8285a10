"""The user guide keeps up with the code: every CLI command and option is documented in docs/cli.md, every page
of mkdocs.yml's nav exists, and the API reference lists the whole public API. No network, no site build (CI
builds the site with ``make docs``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import gridcomm
from gridcomm.lab.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CLI_PAGE = DOCS / "cli.md"


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (command path, command) under the click group ``group``, depth first: ("bench",), ("bench", "halo"),
    ... A group is anything with ``.commands`` (Typer may bring its own copy of click, so no isinstance)."""
    for name, command in sorted(group.commands.items()):
        if getattr(command, "hidden", False):
            continue
        yield (*path, name), command
        if isinstance(getattr(command, "commands", None), dict):
            yield from _commands(command, (*path, name))


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _named(text: str, path: tuple[str, ...]) -> bool:
    """Whether ``text`` names ``gridcomm <path>`` as a whole command (not as the start of a longer one)."""
    return re.search(rf"gridcomm {re.escape(' '.join(path))}(?![\w-])", text) is not None


def _section(text: str, path: tuple[str, ...]) -> str | None:
    """The part of the page under the heading "`gridcomm <path>`", up to the next heading of its level or
    above (so a group's section holds its sub-commands' sections); None without such a heading."""
    lines = text.splitlines()
    wanted = f"`gridcomm {' '.join(path)}`"
    for i, line in enumerate(lines):
        heading = re.match(r"(#+)\s+(.*?)\s*$", line)
        if heading and heading.group(2) == wanted:
            level = len(heading.group(1))
            end = next(
                (j for j in range(i + 1, len(lines)) if re.match(rf"#{{1,{level}}}\s", lines[j])),
                len(lines),
            )
            return "\n".join(lines[i:end])
    return None


def _long_options(command: Any) -> list[str]:
    """The long option names of ``command`` (both sides of a --flag/--no-flag pair), without --help."""
    names = []
    for param in command.params:
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            names += [n for n in (*param.opts, *param.secondary_opts) if n.startswith("--") and n != "--help"]
    return names


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_is_documented(path: tuple[str, ...]) -> None:
    text = CLI_PAGE.read_text()
    assert _named(text, path), f"docs/cli.md never names `gridcomm {' '.join(path)}`"
    assert _section(text, path) is not None, f"docs/cli.md has no heading `gridcomm {' '.join(path)}`"


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_option_is_documented(path: tuple[str, ...]) -> None:
    section = _section(CLI_PAGE.read_text(), path) or ""
    missing = [
        option
        for option in _long_options(COMMANDS[path])
        if re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section) is None
    ]
    assert not missing, f"the section `gridcomm {' '.join(path)}` of docs/cli.md does not mention {missing}"


def test_report_command_is_documented() -> None:
    if ("report",) not in COMMANDS:
        pytest.skip("gridcomm report does not exist yet")
    assert _section(CLI_PAGE.read_text(), ("report",)) is not None


def _nav_pages(config: str) -> list[str]:
    """The .md files named in mkdocs.yml's nav (read without a YAML parser: the test environment may have none)."""
    pages, in_nav = [], False
    for line in config.splitlines():
        if re.match(r"nav\s*:", line):
            in_nav = True
        elif in_nav and line.strip() and not line[0].isspace() and not line.startswith("-"):
            break  # the next top-level key
        elif in_nav:
            pages += re.findall(r"([\w./-]+\.md)\s*$", line)
    return pages


def test_the_command_tree_is_walked() -> None:
    assert {("info",), ("demo",), ("run",), ("bench", "halo"), ("app", "mpdata")} <= set(COMMANDS)
    assert "--np" in _long_options(COMMANDS[("bench", "halo")])


def test_nav_pages_exist() -> None:
    pages = _nav_pages((ROOT / "mkdocs.yml").read_text())
    assert len(pages) >= 10, f"found only {pages} in mkdocs.yml's nav"
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml's nav lists pages that do not exist: {missing}"


def test_nav_keeps_the_pages_readme_links() -> None:
    pages = _nav_pages((ROOT / "mkdocs.yml").read_text())
    for page in ("design.md", "mpdata.md", "spectral.md", "reliability.md", "cli.md", "api/gridcomm.md"):
        assert page in pages, f"{page} is not in mkdocs.yml's nav"


@pytest.mark.parametrize("name", sorted(gridcomm.__all__))
def test_public_api_is_in_the_reference(name: str) -> None:
    text = (DOCS / "api" / "gridcomm.md").read_text()
    assert re.search(rf"^::: gridcomm\.{re.escape(name)}\s*$", text, re.MULTILINE), (
        f"gridcomm.{name} is in gridcomm.__all__ but not in docs/api/gridcomm.md"
    )


README = ROOT / "README.md"

# Runs each python block of the README given on the command line as a program of its own, on every rank, and
# says on rank 0 which ran; blocks that import cupy run only where a GPU is.
_SNIPPETS = """
import json, sys
import gridcomm
from mpi4py import MPI

blocks = json.loads(open(sys.argv[1]).read())
for i, block in enumerate(blocks):
    if "import cupy" in block and not gridcomm.device.gpu_count():
        print(f"snippet {i}: skipped (no GPU)", flush=True)
        continue
    exec(compile(block, f"README.md, python block {i}", "exec"), {"__name__": "__main__"})
    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"snippet {i}: ran", flush=True)
"""


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


@pytest.mark.mpi
def test_the_readmes_python_snippets_run_as_written(tmp_path: Path) -> None:
    """Every python block of the README, as written (its own imports, no prelude), on 2 ranks: a snippet that
    names something it never defines (the unstructured one did) fails here."""
    import json

    from conftest import run_mpi

    blocks = _python_blocks(README.read_text())
    assert len(blocks) >= 4, f"found only {len(blocks)} python blocks in README.md"
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "snippets.py").write_text(_SNIPPETS)
    rc, out = run_mpi(2, [str(tmp_path / "snippets.py"), str(tmp_path / "blocks.json")], timeout=120)
    assert rc == 0, out[-6000:]
    for i, block in enumerate(blocks):
        assert re.search(rf"snippet {i}: (ran|skipped)", out), f"block {i} never finished:\n{block}\n{out[-3000:]}"


# What needs a GPU on a command line: these options and sub-commands.
_GPU_ONLY = re.compile(r"(?<!\[)--gpu\b|--mode (graph|nvshmem|persistent)\b|\bbench (p2p|alltoall)\b")


def test_the_readmes_gpu_only_command_lines_are_marked() -> None:
    """The README's command list says "GPU only" beside each line that cannot run on a CPU (`--mode graph` was
    a plain line, and failed on a CPU-only machine), and only beside those."""
    block = README.read_text().split("## The command line", 1)[1].split("```")[1]
    entries, current = [], ""
    for line in block.splitlines():
        if line.startswith("gridcomm "):
            entries.append(current)
            current = line
        else:
            current += " " + line.strip()
    entries = [e for e in [*entries, current] if e]
    assert len(entries) >= 10, entries
    for entry in entries:
        command, _, comment = entry.partition("#")
        assert bool(_GPU_ONLY.search(command)) == ("GPU only" in comment), entry


def _constants(path: Path) -> dict[str, Any]:
    """The module-level constants (NAME = literal) of a Python file, read without importing it."""
    import ast

    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def test_examples_readme_states_the_tolerances_the_example_checks() -> None:
    """examples/README.md said 1e-9 for the spectral example's round trip, which checks 1e-11."""
    tolerances = _constants(ROOT / "examples" / "spectral_transform.py")
    text = " ".join((ROOT / "examples" / "README.md").read_text().split())
    assert f"within {tolerances['SERIAL_TOLERANCE']:g}" in text
    assert f"round trip must come back within {tolerances['ROUND_TRIP_TOLERANCE']:g}" in text


def test_concepts_names_every_transport() -> None:
    """docs/concepts.md lists the names transport= takes; it left out nvshmem."""
    from gridcomm import transports

    text = " ".join((DOCS / "concepts.md").read_text().split())
    listed = re.search(r"`gridcomm\.transports\.names\(\)`: ([^)]*)\)", text)
    assert listed is not None, "docs/concepts.md no longer lists gridcomm.transports.names()"
    assert re.findall(r"`(\w+)`", listed.group(1)) == transports.names()
