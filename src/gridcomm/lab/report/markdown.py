"""A Document as GitHub-flavoured Markdown (report.md, compare.md)."""

from __future__ import annotations

from .document import Block, Code, Document, Heading, Image, Items, Paragraph, Table


def _cell(text: str) -> str:
    """A table cell: pipes escaped, line breaks flattened."""
    return text.replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> list[str]:
    lines = [f"*{t.caption}*", ""] if t.caption else []
    align = [":---" if k < t.label_columns else "---:" for k in range(len(t.columns))]
    lines.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
    lines.append("| " + " | ".join(align) + " |")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    return lines


def _block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text]
    if isinstance(block, Paragraph):
        return [block.text]
    if isinstance(block, Items):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return [f"![{block.alt}]({block.path})"]
    if isinstance(block, Code):
        fence = "````" if "```" in block.text else "```"
        return [fence, block.text.rstrip("\n"), fence]
    raise TypeError(f"no Markdown for {type(block).__name__}")


def to_markdown(doc: Document) -> str:
    """The whole document: its title as the first heading, then each block, a blank line between blocks."""
    parts = [[f"# {doc.title}"], *(_block(b) for b in doc.blocks)]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"
