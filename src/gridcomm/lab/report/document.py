"""The document model both renderers share: a flat list of blocks, so report.md and report.html say the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2  # 1: the title; 2: a section; 3: a part of a section


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Items:
    """A bulleted list."""

    items: Sequence[str]


@dataclass(frozen=True)
class Table:
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    caption: str = ""
    #: The leading columns that hold labels (left-aligned); the others hold figures (right-aligned).
    label_columns: int = 1


@dataclass(frozen=True)
class Image:
    """A picture in the report's folder: ``path`` relative to it."""

    path: str
    alt: str


@dataclass(frozen=True)
class Code:
    """Text shown as it is (a command's output)."""

    text: str


Block = Heading | Paragraph | Items | Table | Image | Code


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)
