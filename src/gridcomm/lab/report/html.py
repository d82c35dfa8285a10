"""A Document as one self-contained HTML page (report.html, compare.html): inline CSS, the PNGs beside it."""

from __future__ import annotations

from html import escape

from .document import Block, Code, Document, Heading, Image, Items, Paragraph, Table

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
h1, h2, h3 { line-height: 1.2; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: 13px; }
caption { caption-side: top; text-align: left; font-style: italic; padding: .3em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; } th { background: #f3f3f3; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } td.l { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: 12px; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    kinds = ["l" if k < t.label_columns else "n" for k in range(len(t.columns))]
    body = "".join(
        "<tr>" + "".join(f'<td class="{kind}">{escape(c)}</td>' for kind, c in zip(kinds, row, strict=True)) + "</tr>"
        for row in t.rows
    )
    caption = f"<caption>{escape(t.caption)}</caption>" if t.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{escape(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{escape(block.text)}</p>"
    if isinstance(block, Items):
        return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return f'<p><img src="{escape(block.path)}" alt="{escape(block.alt)}"></p>'
    if isinstance(block, Code):
        return f"<pre>{escape(block.text)}</pre>"
    raise TypeError(f"no HTML for {type(block).__name__}")


def to_html(doc: Document) -> str:
    """The whole page: head with the title and the style, the title as <h1>, then each block."""
    body = "\n".join(_block(b) for b in doc.blocks)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(doc.title)}</title>\n'
        f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{escape(doc.title)}</h1>\n{body}\n</body>\n</html>\n"
    )
