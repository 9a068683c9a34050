"""The analytics report as one self-contained HTML page: inline CSS, inline SVG charts drawn
in Python (:mod:`._charts`), the report's tables; no script, no link, nothing fetched. Every text
from the ledger is escaped."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Literal

from . import _charts
from ._format import compact, cost_text, count, money_axis, ms_text, percent, plural, time_text
from ._report import (
    BucketUnit,
    Column,
    Report,
    ReportTable,
    RunCost,
    ToolStat,
    Totals,
    UsagePoint,
)

TREE_RUNS = 5
"""How many of the most expensive runs the cost tree draws."""
TREE_ROWS = 15
"""The most rows one run's tree takes in the cost tree; the rest are counted."""
CHART_TOOLS = 20
"""The most tools the latency and error charts draw (those called most)."""

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
        _figure("Tokens over time", _usage_chart(report, "tokens")),
        _figure("Cost over time", _usage_chart(report, "cost")),
        _figure("Cost tree of the most expensive runs", _tree_chart(report.runs[:TREE_RUNS])),
        _figure("Tool latency", _latency_chart(report.tools)),
        _figure("Tool error rates", _error_chart(report.tools)),
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


def _figure(title: str, content: tuple[str, str]) -> str:
    chart, note = content
    caption = f"<figcaption>{escape(note)}</figcaption>" if note else ""
    return f"<h2>{escape(title)}</h2>\n<figure>{chart}{caption}</figure>"


# -- charts ------------------------------------------------------------------------------------

Chart = tuple[str, str]
"""An SVG chart (or "" when there is nothing to draw) and a note under it."""


def _usage_chart(report: Report, metric: Literal["tokens", "cost"]) -> Chart:
    if not report.usage:
        return "", "No steps recorded yet."
    priced = [p for p in report.usage if p.cost_usd is not None]
    if metric == "cost" and not priced:
        models = ", ".join(report.completeness.unpriced_models) or "none"
        return "", (
            f"No priced steps: the cost of every step is unknown (models without a price: "
            f"{models}), so there is no cost to draw; see the tokens above. Record runs with "
            "a price table (PriceTable) to see costs here."
        )
    labels = [_bucket_label(b, report.unit) for b in report.buckets]
    panels = (
        _charts.Panel("by agent", _series(report, lambda p: p.agent_name, metric)),
        _charts.Panel("by model", _series(report, lambda p: p.model, metric)),
    )
    title = f"{'Tokens (input + output)' if metric == 'tokens' else 'Cost (USD)'} per {report.unit}"
    chart = _charts.stacked_bars(
        title,
        labels,
        panels,
        x_label=f"{report.unit} (UTC)",
        y_label="tokens" if metric == "tokens" else "US dollars",
        fmt=compact if metric == "tokens" else money_axis,
    )
    unpriced = sum(p.unpriced_steps for p in report.usage)
    note = (
        f"{unpriced:,} steps without a price are not in these bars."
        if metric == "cost" and unpriced
        else ""
    )
    return chart, note


def _series(
    report: Report, key: Callable[[UsagePoint], str], metric: Literal["tokens", "cost"]
) -> tuple[_charts.Series, ...]:
    index = {bucket: i for i, bucket in enumerate(report.buckets)}
    values: dict[str, list[float]] = {}
    for point in report.usage:
        row = values.setdefault(key(point), [0.0] * len(report.buckets))
        amount = point.tokens if metric == "tokens" else (point.cost_usd or 0.0)
        row[index[point.bucket]] += amount
    return tuple(_charts.Series(name, tuple(v)) for name, v in sorted(values.items()))


def _bucket_label(bucket: datetime, unit: BucketUnit) -> str:
    return bucket.strftime("%m-%d %H:00" if unit == "hour" else "%Y-%m-%d")


def _tree_chart(runs: Sequence[RunCost]) -> Chart:
    if not runs:
        return "", "No runs recorded yet."
    by_cost = all(r.inclusive.cost_usd is not None and not r.inclusive.unpriced_steps for r in runs)
    rows = [row for run in runs for row in _tree_rows(run, by_cost)]
    what = "cost" if by_cost else "tokens (input + output)"
    chart = _charts.horizontal_bars(
        f"The {len(runs)} most expensive runs and their subagent runs, by {what}",
        rows,
        legend=(("incl. (with subagent runs)", 0), ("excl. (own steps)", 1)),
        x_label="US dollars" if by_cost else "tokens",
        fmt=money_axis if by_cost else compact,
        overlay=True,
    )
    note = (
        ""
        if by_cost
        else "Drawn by tokens: some of these runs have steps without a price, so their cost "
        "is not known in full."
    )
    return chart, note


def _tree_rows(root: RunCost, by_cost: bool) -> list[_charts.Row]:
    rows: list[_charts.Row] = []

    def visit(run: RunCost, depth: int) -> None:
        if len(rows) >= TREE_ROWS:
            return
        rows.append(_tree_row(run, depth, by_cost))
        for child in run.children:
            visit(child, depth + 1)

    visit(root, 0)
    hidden = sum(1 for _ in root.walk()) - len(rows)
    if hidden > 0:
        rows.append(_charts.Row(f"… {hidden:,} more subagent runs", (), depth=1))
    return rows


def _tree_row(run: RunCost, depth: int, by_cost: bool) -> _charts.Row:
    def value(totals: Totals) -> float:
        return (totals.cost_usd or 0.0) if by_cost else float(totals.tokens)

    def shown(totals: Totals) -> str:
        if by_cost:
            return cost_text(totals.cost_usd, totals.unpriced_steps)
        return count(totals.tokens)

    excl, incl = shown(run.exclusive), shown(run.inclusive)
    what = "" if by_cost else " tokens"
    tip = (
        f"{run.agent_name} · run {run.run_id} · {run.status} · started "
        f"{time_text(run.started_at)} · excl. {excl}{what} · incl. {incl}{what}"
    )
    started = "" if run.started_at is None else run.started_at.strftime(" · %m-%d %H:%M")
    label = run.agent_name if depth else f"{run.agent_name}{started}"
    bars = (
        _charts.Bar(value(run.inclusive), 0, tip),
        _charts.Bar(value(run.exclusive), 1, tip),
    )
    return _charts.Row(label, bars, f"excl. {excl} · incl. {incl}", depth)


def _latency_chart(tools: Sequence[ToolStat]) -> Chart:
    if not tools:
        return "", "No tool calls recorded yet."
    chart = _charts.horizontal_bars(
        "Tool call duration percentiles",
        [_latency_row(t) for t in tools[:CHART_TOOLS]],
        legend=(("p50", 0), ("p95", 1), ("p99", 2)),
        x_label="milliseconds",
        fmt=compact,
    )
    return chart, _more_tools(tools)


def _latency_row(t: ToolStat) -> _charts.Row:
    percentiles = (("p50", t.p50_ms), ("p95", t.p95_ms), ("p99", t.p99_ms))
    bars = tuple(
        _charts.Bar(value, key, f"{t.tool_name} · {name}: {ms_text(value)} ms")
        for key, (name, value) in enumerate(percentiles)
        if value is not None
    )
    note = f"{plural(t.calls, 'call')} · p50 {ms_text(t.p50_ms)} · p99 {ms_text(t.p99_ms)} ms"
    return _charts.Row(t.tool_name, bars, note)


def _error_chart(tools: Sequence[ToolStat]) -> Chart:
    if not tools:
        return "", "No tool calls recorded yet."
    chart = _charts.horizontal_bars(
        "Tool calls that returned an error",
        [_error_row(t) for t in tools[:CHART_TOOLS]],
        legend=(("error rate", 3),),
        x_label="share of calls",
        fmt=lambda v: f"{v:.0%}",
        maximum=1.0,
    )
    return chart, _more_tools(tools)


def _error_row(t: ToolStat) -> _charts.Row:
    share = f"{t.errors:,} of {plural(t.calls, 'call')} ({percent(t.error_rate)})"
    bar = _charts.Bar(t.error_rate, 3, f"{t.tool_name}: errors in {share}")
    note = f"{percent(t.error_rate)} · {t.errors:,} of {plural(t.calls, 'call')}"
    return _charts.Row(t.tool_name, (bar,), note)


def _more_tools(tools: Sequence[ToolStat]) -> str:
    hidden = len(tools) - CHART_TOOLS
    return (
        f"The {CHART_TOOLS} tools called most; {hidden:,} more in the table." if hidden > 0 else ""
    )
