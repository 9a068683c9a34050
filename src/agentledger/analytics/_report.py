"""The analytics report: the main breakdowns of a ledger, as terminal tables and as one HTML page.

:func:`build_report` reads everything from an :class:`Analytics` into a :class:`Report` of plain
values; :func:`render_terminal` draws it with rich (and ``_html.render_html`` as a page). Costs
nobody knows are shown as "unpriced", never as $0, and what the totals leave out (runs still
running, steps without a price) heads both, so nobody trusts a partial total.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.engine import make_url

from .._values import cost_text
from ._analytics import Analytics
from ._format import count, ms_text, number, percent, plural, time_text

if TYPE_CHECKING:
    import duckdb

BucketUnit = Literal["hour", "day"]
Record = dict[str, Any]
"""A row of a DuckDB view by column name (DuckDB rows are untyped)."""

_BY_COST = "cost_usd DESC NULLS LAST, input_tokens + output_tokens DESC"
_TOP_RUNS = """
SELECT * FROM run_rollup
WHERE parent_run_id IS NULL
ORDER BY inclusive_cost_usd DESC NULLS LAST,
         inclusive_input_tokens + inclusive_output_tokens DESC, started_at DESC, run_id
LIMIT ?
"""
_SUBTREES = """
SELECT * FROM run_rollup
WHERE list_contains(?, root_run_id) AND parent_run_id IS NOT NULL
ORDER BY depth, started_at, run_id
"""


# -- the report's values -----------------------------------------------------------------------


@dataclass(frozen=True)
class Completeness:
    """What the totals do not cover: runs still running and steps without a price."""

    runs: int
    running_runs: int
    failed_runs: int
    steps: int
    unpriced_steps: int
    unpriced_models: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return self.running_runs == 0 and self.unpriced_steps == 0

    def summary(self) -> str:
        """One line: whether the totals are whole, and if not, what they leave out."""
        counted = f"{plural(self.runs, 'run')}, {plural(self.steps, 'step')}"
        if self.complete:
            return f"Complete: {counted}; every step is priced and no run is still running."
        gaps = []
        if self.unpriced_steps:
            verb = "has" if self.unpriced_steps == 1 else "have"
            gaps.append(
                f"{self.unpriced_steps:,} of {plural(self.steps, 'step')} {verb} no price "
                f"(models: {', '.join(self.unpriced_models)}), so every cost leaves them out"
            )
        if self.running_runs:
            verb = "is" if self.running_runs == 1 else "are"
            gaps.append(
                f"{plural(self.running_runs, 'run')} {verb} still running (in progress, or "
                "its process died: `agentledger recover`), so the totals may grow"
            )
        return f"Incomplete ({counted}): " + "; ".join(gaps) + "."


@dataclass(frozen=True)
class Totals:
    """Usage summed over some steps: a run's own (exclusive) or its subtree's (inclusive)."""

    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    unpriced_steps: int
    tool_calls: int
    tool_errors: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class RunCost:
    """A run with its own and its subtree's usage, and its subagent runs (costliest first)."""

    run_id: str
    agent_name: str
    status: str
    started_at: datetime | None
    runs: int
    exclusive: Totals
    inclusive: Totals
    children: tuple[RunCost, ...] = ()
    shown_id: str = ""
    """The run's id as the command line shows it: its shortest unique prefix
    (``Analytics.short_ids``)."""

    def walk(self) -> Iterable[RunCost]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class UsagePoint:
    """Usage of one agent with one model in one time bucket."""

    bucket: datetime
    agent_name: str
    model: str
    tokens: int
    cost_usd: float | None
    unpriced_steps: int


@dataclass(frozen=True)
class ToolStat:
    tool_name: str
    calls: int
    errors: int
    error_rate: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None


@dataclass(frozen=True)
class Column:
    name: str
    numeric: bool = False
    identifier: bool = False
    """A column of short ids (``Analytics.short_ids``): always shown in a terminal, never
    wrapped nor cut."""
    priority: int = 1
    """Which columns a narrow terminal shows: 1 first, then 2, 3, ... while they fit."""
    min_width: int | None = None
    """``None``: each cell is shown whole on one line, in a terminal and on the page (numbers,
    dates, names, ids); a width: free text (a title, a sentence) that wraps, in a terminal
    never narrower than this."""

    @property
    def prose(self) -> bool:
        """Free text, which wraps (other cells keep to one line)."""
        return self.min_width is not None


@dataclass(frozen=True)
class ReportTable:
    """A titled table of formatted cells, drawn the same in the terminal and in HTML.

    ``records`` are the values the rows were formatted from, by column (numbers as numbers,
    ids in full), and ``name`` names the table: what ``analytics report --json`` prints."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    name: str = ""
    records: tuple[Record, ...] = ()
    links: tuple[str, ...] = ()
    """Per row, the anchor of the page its first cell leads to (:func:`run_anchor`), when the
    table has any."""


def run_anchor(run_id: str) -> str:
    """The id of the element of the HTML page that shows the run ``run_id`` in its tree."""
    return f"run-{run_id}"


@dataclass(frozen=True)
class Report:
    """Everything the report shows, read once from the ledger."""

    source: str
    generated_at: datetime
    completeness: Completeness
    unit: BucketUnit
    buckets: tuple[datetime, ...]
    usage: tuple[UsagePoint, ...]
    runs: tuple[RunCost, ...]
    tools: tuple[ToolStat, ...]
    tables: tuple[ReportTable, ...]


# -- reading -----------------------------------------------------------------------------------


def build_report(
    analytics: Analytics, *, top: int = 10, generated_at: datetime | None = None
) -> Report:
    """The report over ``analytics``' ledger; tables of runs and conversations keep ``top``."""
    completeness = _completeness(analytics)
    first, last = _time_span(analytics)
    unit = bucket_unit(first, last)
    runs = _top_runs(analytics, top)
    tools = _tool_stats(analytics)
    tables = (
        _conversation_table(analytics, top),
        _usage_table("agents", "Usage by agent", "agent", analytics.agent_usage(), "agent_name"),
        _usage_table("models", "Usage by model", "model", analytics.model_usage(), "model"),
        _runs_table(runs),
        _tools_table(tools),
        _tree_shape_table(analytics),
        _completeness_table(completeness),
        *_running_table(analytics, top),
    )
    return Report(
        source=make_url(analytics.url).render_as_string(hide_password=True),
        generated_at=generated_at or datetime.now(UTC),
        completeness=completeness,
        unit=unit,
        buckets=tuple(time_buckets(first, last, unit)),
        usage=_usage(analytics, unit),
        runs=runs,
        tools=tools,
        tables=tables,
    )


def bucket_unit(first: datetime | None, last: datetime | None) -> BucketUnit:
    """Hours for data spanning up to two days, days beyond."""
    if first is None or last is None or last - first <= timedelta(hours=48):
        return "hour"
    return "day"


def time_buckets(first: datetime | None, last: datetime | None, unit: BucketUnit) -> list[datetime]:
    """Every bucket from the one holding ``first`` to the one holding ``last``, gaps included."""
    if first is None or last is None:
        return []
    step = timedelta(hours=1) if unit == "hour" else timedelta(days=1)
    bucket = _truncate(first, unit)
    buckets = []
    while bucket <= last:
        buckets.append(bucket)
        bucket += step
    return buckets


def _truncate(moment: datetime, unit: BucketUnit) -> datetime:
    hour = moment.replace(minute=0, second=0, microsecond=0)
    return hour if unit == "hour" else hour.replace(hour=0)


def _records(relation: duckdb.DuckDBPyRelation) -> list[Record]:
    columns = relation.columns
    return [dict(zip(columns, row, strict=True)) for row in relation.fetchall()]


def _one(relation: duckdb.DuckDBPyRelation) -> Record:
    rows = _records(relation)
    return rows[0] if rows else {}


def _completeness(analytics: Analytics) -> Completeness:
    row = _one(analytics.completeness())
    return Completeness(
        runs=row["runs"],
        running_runs=row["running_runs"],
        failed_runs=row["failed_runs"],
        steps=row["steps"],
        unpriced_steps=row["unpriced_steps"],
        unpriced_models=tuple(row["unpriced_models"] or ()),
    )


def _time_span(analytics: Analytics) -> tuple[datetime | None, datetime | None]:
    row = _one(analytics.sql("SELECT min(started_at) AS first, max(started_at) AS last FROM steps"))
    return row.get("first"), row.get("last")


def _usage(analytics: Analytics, unit: BucketUnit) -> tuple[UsagePoint, ...]:
    return tuple(
        UsagePoint(
            bucket=r["bucket"],
            agent_name=r["agent_name"],
            model=r["model"] or "(unknown)",
            tokens=r["input_tokens"] + r["output_tokens"],
            cost_usd=r["cost_usd"],
            unpriced_steps=r["unpriced_steps"],
        )
        for r in _records(analytics.usage_over_time(unit))
    )


def _top_runs(analytics: Analytics, top: int) -> tuple[RunCost, ...]:
    roots = _records(analytics.sql(_TOP_RUNS, [top]))
    below = _records(analytics.sql(_SUBTREES, [[r["run_id"] for r in roots]]))
    children: dict[str, list[Record]] = {}
    for record in below:
        children.setdefault(record["parent_run_id"], []).append(record)
    shown = analytics.short_ids((r["run_id"] for r in (*roots, *below)), of="run")
    return tuple(_run_cost(root, children, shown) for root in roots)


def _run_cost(record: Record, children: dict[str, list[Record]], shown: dict[str, str]) -> RunCost:
    below = [_run_cost(child, children, shown) for child in children.get(record["run_id"], [])]
    below.sort(key=lambda c: (-(c.inclusive.cost_usd or 0.0), -c.inclusive.tokens))
    return RunCost(
        run_id=record["run_id"],
        agent_name=record["agent_name"],
        status=record["status"],
        started_at=record["started_at"],
        runs=record["inclusive_runs"],
        exclusive=_totals(record, "exclusive"),
        inclusive=_totals(record, "inclusive"),
        children=tuple(below),
        shown_id=shown[record["run_id"]],
    )


def _totals(record: Record, prefix: str) -> Totals:
    return Totals(
        steps=record[f"{prefix}_steps"],
        input_tokens=record[f"{prefix}_input_tokens"],
        output_tokens=record[f"{prefix}_output_tokens"],
        cost_usd=record[f"{prefix}_cost_usd"],
        unpriced_steps=record[f"{prefix}_unpriced_steps"],
        tool_calls=record[f"{prefix}_tool_calls"],
        tool_errors=record[f"{prefix}_tool_errors"],
    )


def _tool_stats(analytics: Analytics) -> tuple[ToolStat, ...]:
    relation = analytics.tool_stats().order("calls DESC, tool_name")
    return tuple(
        ToolStat(
            tool_name=r["tool_name"],
            calls=r["calls"],
            errors=r["errors"],
            error_rate=r["error_rate"],
            p50_ms=r["p50_ms"],
            p95_ms=r["p95_ms"],
            p99_ms=r["p99_ms"],
            max_ms=r["max_ms"],
        )
        for r in _records(relation)
    )


# -- tables ------------------------------------------------------------------------------------

_TOKEN_COLUMNS = (
    Column("input tokens", True, priority=2),
    Column("output tokens", True, priority=2),
    Column("cache read", True, priority=3),
    Column("cache write", True, priority=3),
    Column("cost", True),
)


def _token_cells(r: Record) -> tuple[str, ...]:
    return (
        count(r["input_tokens"]),
        count(r["output_tokens"]),
        count(r["cache_read_tokens"]),
        count(r["cache_write_tokens"]),
        cost_text(r["cost_usd"], fully_priced=not r["unpriced_steps"]),
    )


def _conversation_table(analytics: Analytics, top: int) -> ReportTable:
    total = _one(analytics.sql("SELECT count(*) AS n FROM conversation_usage"))["n"]
    rows = _records(
        analytics.conversation_usage().order(f"{_BY_COST}, last_run_at DESC").limit(top)
    )
    columns = (
        Column("conversation", identifier=True),
        Column("title", priority=3, min_width=16),
        Column("runs", True),
        Column("subagent runs", True, priority=3),
        Column("steps", True, priority=3),
        *_TOKEN_COLUMNS,
        Column("last run", priority=2),
    )
    short = analytics.short_ids((r["conversation_id"] for r in rows), of="conversation")
    cells = tuple(
        (
            short[r["conversation_id"]],
            r["title"] or "",
            count(r["runs"]),
            count(r["subagent_runs"]),
            count(r["steps"]),
            *_token_cells(r),
            time_text(r["last_run_at"]),
        )
        for r in rows
    )
    note = f"the {len(rows)} costliest of {total}" if total > len(rows) else ""
    title = "Usage by conversation (with subagent runs)"
    return ReportTable(title, columns, cells, note, "conversations", tuple(rows))


def _usage_table(
    name: str, title: str, label: str, relation: duckdb.DuckDBPyRelation, key: str
) -> ReportTable:
    rows = _records(relation.order(f"{_BY_COST}, {key}"))
    columns = (
        Column(label, priority=0),
        Column("runs", True),
        Column("steps", True, priority=2),
        *_TOKEN_COLUMNS,
    )
    cells = tuple(
        (r[key] or "(unknown)", count(r["runs"]), count(r["steps"]), *_token_cells(r)) for r in rows
    )
    return ReportTable(title, columns, cells, name=name, records=tuple(rows))


def _runs_table(runs: Sequence[RunCost]) -> ReportTable:
    """The costliest top-level runs, each by its short id (``Analytics.short_ids``), leading
    to its tree on the page."""
    columns = (
        Column("run", identifier=True),
        Column("agent", min_width=12),
        Column("status"),
        Column("started", priority=2),
        Column("runs", True, priority=3),
        Column("tokens excl.", True, priority=3),
        Column("tokens incl.", True, priority=2),
        Column("cost excl.", True, priority=3),
        Column("cost incl.", True),
        Column("tool errors incl.", True, priority=2),
    )
    cells = tuple(
        (
            run.shown_id,
            run.agent_name,
            run.status,
            time_text(run.started_at),
            count(run.runs),
            count(run.exclusive.tokens),
            count(run.inclusive.tokens),
            cost_text(run.exclusive.cost_usd, fully_priced=not run.exclusive.unpriced_steps),
            cost_text(run.inclusive.cost_usd, fully_priced=not run.inclusive.unpriced_steps),
            count(run.inclusive.tool_errors),
        )
        for run in runs
    )
    note = (
        "Top-level runs by cost, then tokens. excl.: the run's own steps; incl.: with every "
        "subagent run below it. `agentledger trace RUN` draws a run's tree."
    )
    records = tuple(
        {
            "run_id": run.run_id,
            "agent_name": run.agent_name,
            "status": run.status,
            "started_at": run.started_at,
            "runs": run.runs,
            "exclusive": asdict(run.exclusive),
            "inclusive": asdict(run.inclusive),
        }
        for run in runs
    )
    links = tuple(run_anchor(run.run_id) for run in runs)
    title = "The most expensive runs"
    return ReportTable(title, columns, cells, note, "runs", records, links)


def _tools_table(tools: Sequence[ToolStat]) -> ReportTable:
    columns = (
        Column("tool", priority=0),
        Column("calls", True),
        Column("errors", True),
        Column("error rate", True, priority=2),
        Column("p50 ms", True, priority=2),
        Column("p95 ms", True, priority=2),
        Column("p99 ms", True, priority=3),
        Column("max ms", True, priority=3),
    )
    cells = tuple(
        (
            t.tool_name,
            count(t.calls),
            count(t.errors),
            percent(t.error_rate),
            ms_text(t.p50_ms),
            ms_text(t.p95_ms),
            ms_text(t.p99_ms),
            ms_text(t.max_ms),
        )
        for t in tools
    )
    records = tuple(asdict(t) for t in tools)
    return ReportTable("Tools", columns, cells, name="tools", records=records)


_MEASURES = (Column("measure", priority=0, min_width=16), Column("value", True, priority=0))
"""The columns of a table of measures, one a row."""


def _tree_shape_table(analytics: Analytics) -> ReportTable:
    s = _one(analytics.tree_shape_summary())
    depths = s.get("runs_by_depth") or {}
    pairs = (
        ("run trees (top-level runs)", count(s.get("trees"))),
        ("trees with subagent runs", count(s.get("trees_with_subagents"))),
        (
            "runs per tree: mean / max",
            f"{number(s.get('mean_runs_per_tree'))} / {count(s.get('max_runs_per_tree'))}",
        ),
        ("deepest run (top level is 0)", count(s.get("max_depth"))),
        ("runs by depth", ", ".join(f"{d}: {n:,}" for d, n in sorted(depths.items())) or "–"),
        (
            "fan-out of runs with subagents: mean / p95 / max",
            f"{number(s.get('mean_fan_out'))} / "
            f"{number(s.get('p95_fan_out'))} / {count(s.get('max_fan_out'))}",
        ),
    )
    records = (s,) if s else ()
    return ReportTable("Run tree shape", _MEASURES, pairs, name="tree_shape", records=records)


def _completeness_table(c: Completeness) -> ReportTable:
    pairs = (
        ("runs", count(c.runs)),
        ("still running", count(c.running_runs)),
        ("failed", count(c.failed_runs)),
        ("steps", count(c.steps)),
        ("steps without a price", count(c.unpriced_steps)),
        ("models without a price", ", ".join(c.unpriced_models) or "–"),
    )
    columns = (_MEASURES[0], Column("value", True, priority=0, min_width=12))  # models: a list
    return ReportTable("Completeness", columns, pairs, c.summary(), "completeness", (asdict(c),))


def _running_table(analytics: Analytics, top: int) -> tuple[ReportTable, ...]:
    rows = _records(analytics.running_runs().order("started_at").limit(top))
    if not rows:
        return ()
    columns = (
        Column("run", identifier=True),
        Column("conversation", identifier=True),
        Column("agent", min_width=12),
        Column("depth", True, priority=3),
        Column("started", priority=2),
        Column("last heartbeat", priority=2),
    )
    runs = analytics.short_ids((r["run_id"] for r in rows), of="run")
    conversations = analytics.short_ids((r["conversation_id"] for r in rows), of="conversation")
    cells = tuple(
        (
            runs[r["run_id"]],
            conversations[r["conversation_id"]],
            r["agent_name"],
            count(r["depth"]),
            time_text(r["started_at"]),
            time_text(r["heartbeat_at"]),
        )
        for r in rows
    )
    note = "Still running, or their process died: `agentledger recover` finds the stale ones."
    title = "Runs still running (oldest first)"
    return (ReportTable(title, columns, cells, note, "running_runs", tuple(rows)),)
