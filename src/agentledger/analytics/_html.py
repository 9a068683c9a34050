"""The analytics report as one self-contained HTML page: inline CSS, the report's charts as
inline SVG (:mod:`._figures`), its tables; no script, no link, nothing fetched. Every text from
the ledger is escaped."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from ._figures import Figure, figures
from ._format import time_text
from ._report import Column, Report, ReportTable

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 1000px; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.meta, .note, figcaption { color: #555; font-size: .9rem; }
.banner { padding: .7rem 1rem; border-radius: 4px; margin: 1rem 0; }
.complete { background: #e8f4ea; border: 1px solid #59a14f; }
.incomplete { background: #fff5db; border: 1px solid #d4a017; font-weight: bold; }
figure { margin: 0 0 1.5rem; }
svg.chart { font-family: inherit; background: #fff; }
table { border-collapse: collapse; margin: .5rem 0 .3rem; font-size: .85rem; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .25rem .6rem; text-align: left; }
th { background: #f6f6f6; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: .3rem 0; }
.scroll { overflow-x: auto; }
"""


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page: inline CSS and SVG, no script, no links."""
    c = report.completeness
    sections = [
        "<header><h1>agentledger report</h1>",
        f'<p class="meta">{escape(report.source)} · generated '
        f"{escape(time_text(report.generated_at))} UTC · times are UTC</p></header>",
        f'<p class="banner {"complete" if c.complete else "incomplete"}">{escape(c.summary())}</p>',
        *(_figure(figure) for figure in figures(report).values()),
        "<h2>Tables</h2>",
        *(html_table(table) for table in report.tables),
    ]
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>agentledger report · {escape(report.source)}</title>\n"
        f"<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write :func:`render_html` to ``path``; the path written."""
    target = Path(path)
    target.write_text(render_html(report), encoding="utf-8")
    return target


def html_table(table: ReportTable) -> str:
    def cls(column: Column) -> str:
        return ' class="num"' if column.numeric else ""

    head = "".join(f"<th{cls(c)}>{escape(c.name)}</th>" for c in table.columns)
    rows = [
        "<tr>"
        + "".join(
            f"<td{cls(c)}>{escape(cell)}</td>" for c, cell in zip(table.columns, row, strict=True)
        )
        + "</tr>"
        for row in table.rows
    ]
    if not rows:
        rows = [f'<tr><td colspan="{len(table.columns)}">nothing recorded yet</td></tr>']
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (
        f'<div class="scroll"><table><caption>{escape(table.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


def _figure(figure: Figure) -> str:
    caption = f"<figcaption>{escape(figure.note)}</figcaption>" if figure.note else ""
    return f"<h2>{escape(figure.title)}</h2>\n<figure>{figure.svg}{caption}</figure>"
