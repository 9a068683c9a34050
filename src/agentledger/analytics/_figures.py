"""The report's charts, as SVG drawn in Python (:mod:`._charts`): tokens and cost over time by
agent and by model, the cost tree of the most expensive runs, tool latency and error rates.

The HTML page draws them (:func:`render_html`), and a notebook shows them inline
(``IPython.display.SVG(figure.svg)``): :func:`figures` gives each one by name. Each agent and
each model has one colour in every chart (:class:`Palette`), and each run of the cost tree
leads to its tree on the page (:func:`run_anchor`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .._values import cost_text
from . import _charts
from ._format import compact, count, money_axis, ms_text, percent, plural, time_text
from ._report import BucketUnit, Report, RunCost, ToolStat, Totals, UsagePoint, run_anchor

TREE_RUNS = 5
"""How many of the most expensive runs the cost tree draws."""
TREE_ROWS = 15
"""The most rows one run's tree takes in the cost tree; the rest are counted."""
CHART_TOOLS = 20
"""The most tools the latency and error charts draw (those called most)."""
PERCENTILE_COLOURS = ("#c3ccd6", "#7f8fa3", "#3d4a5c")
"""p50, p95, p99: shades of one grey-blue, apart from the colours of agents and models."""
ERROR_COLOUR = "#b8312f"
OWN_STEPS = "#555555"
"""The legend of the cost tree: each run is drawn in its agent's colour, full for its own
steps and a lighter shade for its subtree."""


Hue = Callable[[str, Literal["agent", "model"]], int]
"""Which colour of :data:`_charts.PALETTE` an agent or a model is drawn in, by its name."""


@dataclass(frozen=True)
class Palette:
    """The colour of each agent and of each model, the same in every chart: the busiest (most
    tokens) first, from :data:`_charts.PALETTE`."""

    agents: dict[str, str]
    models: dict[str, str]

    @classmethod
    def of(cls, report: Report, hue: Hue | None = None) -> Palette:
        if hue is not None:
            return cls._by_hue(report, hue)

        def busiest(key: Callable[[UsagePoint], str]) -> list[str]:
            tokens: dict[str, int] = {}
            for point in report.usage:
                tokens[key(point)] = tokens.get(key(point), 0) + point.tokens
            return sorted(tokens, key=lambda name: (-tokens[name], name))

        in_trees = (run.agent_name for root in report.runs for run in root.walk())
        agents = _charts.colours([*busiest(lambda p: p.agent_name), *sorted(in_trees)])
        return cls(agents, _charts.colours(busiest(lambda p: p.model)))

    @classmethod
    def _by_hue(cls, report: Report, hue: Hue) -> Palette:
        """Each name in the colour ``hue`` gives it (asked in the order of the names)."""

        def colour(name: str, kind: Literal["agent", "model"]) -> str:
            return _charts.PALETTE[hue(name, kind) % len(_charts.PALETTE)]

        agents = {p.agent_name for p in report.usage}
        agents |= {run.agent_name for root in report.runs for run in root.walk()}
        return cls(
            {a: colour(a, "agent") for a in sorted(agents)},
            {m: colour(m, "model") for m in sorted({p.model for p in report.usage})},
        )


@dataclass(frozen=True)
class Figure:
    """One chart of the report: its title, the chart as one standalone SVG element (``""``
    when there is nothing to draw yet) and the note under it (``""`` when there is none), which
    says what the chart leaves out or why it is empty."""

    title: str
    svg: str
    note: str = ""


def figures(report: Report, *, hue: Hue | None = None) -> dict[str, Figure]:
    """The report's charts by name, in the order the HTML page shows them: ``tokens`` and
    ``cost`` (per time bucket, stacked by agent and by model), ``cost_tree`` (the most
    expensive runs and their subagent runs, inclusive and exclusive), ``tool_latency`` (p50,
    p95 and p99 per tool) and ``tool_errors`` (the share of calls that returned an error).

    Each agent and model is drawn in the colour number ``hue(name, "agent")`` (or
    ``"model"``) of the palette when given (a viewer that colours names elsewhere the same
    way), else the busiest first, each in a colour of its own."""
    palette = Palette.of(report, hue)
    return {
        "tokens": Figure("Tokens over time", *_usage_chart(report, "tokens", palette)),
        "cost": Figure("Cost over time", *_usage_chart(report, "cost", palette)),
        "cost_tree": Figure(
            "Cost tree of the most expensive runs",
            *_tree_chart(report.runs[:TREE_RUNS], palette.agents),
        ),
        "tool_latency": Figure("Tool latency", *_latency_chart(report.tools)),
        "tool_errors": Figure("Tool error rates", *_error_chart(report.tools)),
    }


Chart = tuple[str, str]
"""An SVG chart (or "" when there is nothing to draw) and the note under it."""


def _usage_chart(report: Report, metric: Literal["tokens", "cost"], palette: Palette) -> Chart:
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
        _charts.Panel("by agent", _series(report, lambda p: p.agent_name, metric, palette.agents)),
        _charts.Panel("by model", _series(report, lambda p: p.model, metric, palette.models)),
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
    report: Report,
    key: Callable[[UsagePoint], str],
    metric: Literal["tokens", "cost"],
    colours: dict[str, str],
) -> tuple[_charts.Series, ...]:
    index = {bucket: i for i, bucket in enumerate(report.buckets)}
    values: dict[str, list[float]] = {}
    for point in report.usage:
        row = values.setdefault(key(point), [0.0] * len(report.buckets))
        amount = point.tokens if metric == "tokens" else (point.cost_usd or 0.0)
        row[index[point.bucket]] += amount
    return tuple(
        _charts.Series(name, tuple(v), colours[name]) for name, v in sorted(values.items())
    )


def _bucket_label(bucket: datetime, unit: BucketUnit) -> str:
    return bucket.strftime("%m-%d %H:00" if unit == "hour" else "%Y-%m-%d")


def _tree_chart(runs: Sequence[RunCost], colours: dict[str, str]) -> Chart:
    if not runs:
        return "", "No runs recorded yet."
    by_cost = all(r.inclusive.cost_usd is not None and not r.inclusive.unpriced_steps for r in runs)
    rows = [row for run in runs for row in _tree_rows(run, by_cost, colours)]
    what = "cost" if by_cost else "tokens (input + output)"
    chart = _charts.horizontal_bars(
        f"The {len(runs)} most expensive runs and their subagent runs, by {what}",
        rows,
        legend=(
            ("excl. (own steps), in the agent's colour", OWN_STEPS),
            ("incl. (with subagent runs), a lighter shade", _charts.tint(OWN_STEPS)),
        ),
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


def _tree_rows(root: RunCost, by_cost: bool, colours: dict[str, str]) -> list[_charts.Row]:
    rows: list[_charts.Row] = []

    def visit(run: RunCost, depth: int) -> None:
        if len(rows) >= TREE_ROWS:
            return
        rows.append(_tree_row(run, depth, by_cost, colours[run.agent_name]))
        for child in run.children:
            visit(child, depth + 1)

    visit(root, 0)
    hidden = sum(1 for _ in root.walk()) - len(rows)
    if hidden > 0:
        rows.append(_charts.Row(f"… {hidden:,} more subagent runs", (), depth=1))
    return rows


def _tree_row(run: RunCost, depth: int, by_cost: bool, colour: str) -> _charts.Row:
    def value(totals: Totals) -> float:
        return (totals.cost_usd or 0.0) if by_cost else float(totals.tokens)

    def shown(totals: Totals) -> str:
        if by_cost:
            return cost_text(totals.cost_usd, fully_priced=not totals.unpriced_steps)
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
        _charts.Bar(value(run.inclusive), _charts.tint(colour), tip),
        _charts.Bar(value(run.exclusive), colour, tip),
    )
    note = f"excl. {excl} · incl. {incl}"
    return _charts.Row(label, bars, note, depth, run_anchor(run.run_id))


def _latency_chart(tools: Sequence[ToolStat]) -> Chart:
    if not tools:
        return "", "No tool calls recorded yet."
    chart = _charts.horizontal_bars(
        "Tool call duration percentiles",
        [_latency_row(t) for t in tools[:CHART_TOOLS]],
        legend=tuple(zip(("p50", "p95", "p99"), PERCENTILE_COLOURS, strict=True)),
        x_label="milliseconds",
        fmt=compact,
    )
    return chart, _more_tools(tools)


def _latency_row(t: ToolStat) -> _charts.Row:
    percentiles = (("p50", t.p50_ms), ("p95", t.p95_ms), ("p99", t.p99_ms))
    bars = tuple(
        _charts.Bar(value, colour, f"{t.tool_name} · {name}: {ms_text(value)} ms")
        for colour, (name, value) in zip(PERCENTILE_COLOURS, percentiles, strict=True)
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
        legend=(("error rate", ERROR_COLOUR),),
        x_label="share of calls",
        fmt=lambda v: f"{v:.0%}",
        maximum=1.0,
    )
    return chart, _more_tools(tools)


def _error_row(t: ToolStat) -> _charts.Row:
    share = f"{t.errors:,} of {plural(t.calls, 'call')} ({percent(t.error_rate)})"
    bar = _charts.Bar(t.error_rate, ERROR_COLOUR, f"{t.tool_name}: errors in {share}")
    note = f"{percent(t.error_rate)} · {t.errors:,} of {plural(t.calls, 'call')}"
    return _charts.Row(t.tool_name, (bar,), note)


def _more_tools(tools: Sequence[ToolStat]) -> str:
    hidden = len(tools) - CHART_TOOLS
    return (
        f"The {CHART_TOOLS} tools called most; {hidden:,} more in the table." if hidden > 0 else ""
    )
