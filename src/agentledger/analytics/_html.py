"""The analytics report as one self-contained HTML page: inline CSS, the report's charts as
inline SVG (:mod:`._figures`), its tables, and the tree of each of the most expensive runs,
which the runs' ids in the tables and the cost tree lead to; no script, nothing fetched (the
only links are to the page's own anchors). Every text from the ledger is escaped."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from .._values import cost_text
from ._figures import Figure, Palette, figures
from ._format import plural, time_text
from ._report import Column, Report, ReportTable, RunCost, Totals, run_anchor

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
td { white-space: nowrap; }
td.prose { white-space: normal; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: .3rem 0; }
.scroll { overflow-x: auto; }
a { color: inherit; }
code { font-size: .85rem; }
ul.tree { list-style: none; padding-left: 1.4rem; margin: .2rem 0; font-size: .85rem; }
div.trees > ul.tree { padding-left: 0; }
ul.tree li { margin: .2rem 0; }
ul.tree li:target > span { background: #fff5db; }
.swatch { display: inline-block; width: .7rem; height: .7rem; margin-right: .3rem;
          vertical-align: baseline; }
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
        *_run_trees(report),
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
    """The table; each row's first cell a link to the anchor ``table.links`` gives it."""

    def cls(column: Column) -> str:
        names = [name for name, on in (("num", column.numeric), ("prose", column.prose)) if on]
        return f' class="{" ".join(names)}"' if names else ""

    def cells(row: tuple[str, ...], link: str) -> str:
        shown = [escape(cell) for cell in row]
        if link and shown:
            shown[0] = f'<a href="#{escape(link)}">{shown[0]}</a>'
        return "".join(
            f"<td{cls(c)}>{cell}</td>" for c, cell in zip(table.columns, shown, strict=True)
        )

    head = "".join(f"<th{cls(c)}>{escape(c.name)}</th>" for c in table.columns)
    links = table.links or ("",) * len(table.rows)
    rows = [f"<tr>{cells(row, link)}</tr>" for row, link in zip(table.rows, links, strict=True)]
    if not rows:
        rows = [f'<tr><td colspan="{len(table.columns)}">nothing recorded yet</td></tr>']
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (
        f'<div class="scroll"><table><caption>{escape(table.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


def _run_trees(report: Report) -> list[str]:
    """The most expensive runs, each with the subagent runs below it: what their ids in the
    tables and their rows in the cost tree lead to."""
    if not report.runs:
        return []
    palette = Palette.of(report)
    trees = "".join(_tree(run, palette) for run in report.runs)
    return [
        "<h2>Run trees</h2>",
        '<p class="note">The most expensive runs, each with its subagent runs; '
        "`agentledger trace RUN` prints one with its steps and tool calls.</p>",
        f'<div class="trees"><ul class="tree">{trees}</ul></div>',
    ]


def _tree(run: RunCost, palette: Palette) -> str:
    colour = palette.agents.get(run.agent_name, "#bab0ac")
    line = (
        f"<span><code>{escape(run.shown_id or run.run_id)}</code> · "
        f'<span class="swatch" style="background: {colour}"></span>{escape(run.agent_name)} · '
        f"{escape(run.status)} · {escape(time_text(run.started_at))} · "
        f"own: {_totals(run.exclusive)}"
    )
    if run.children:
        line += f" · with subagent runs: {_totals(run.inclusive)}"
    below = "".join(_tree(child, palette) for child in run.children)
    children = f'<ul class="tree">{below}</ul>' if below else ""
    return f'<li id="{escape(run_anchor(run.run_id))}">{line}</span>{children}</li>'


def _totals(totals: Totals) -> str:
    cost = cost_text(totals.cost_usd, fully_priced=not totals.unpriced_steps)
    return escape(f"{plural(totals.steps, 'step')}, {plural(totals.tokens, 'token')}, {cost}")


def _figure(figure: Figure) -> str:
    caption = f"<figcaption>{escape(figure.note)}</figcaption>" if figure.note else ""
    return f"<h2>{escape(figure.title)}</h2>\n<figure>{figure.svg}{caption}</figure>"
