"""The user guide keeps up with the code: every CLI command and option is documented in docs/cli.md, every page
of mkdocs.yml's nav exists, and the API reference lists the whole public API. No network, no site build (CI
builds the site with ``make docs``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import gridcomm
from gridcomm.cli.main import app

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
