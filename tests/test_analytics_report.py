"""``agentledger analytics report``, ``analytics sql`` and ``export parquet`` over two ledgers:
the offline demo (subagents, a tool error, no prices) and a small priced scenario spread over
three days (a subagent, a failing tool call, an agent whose name is markup). The numbers the
commands print are checked against SQL on the ledger file, the views script against the real
``duckdb`` command line, and the HTML page for being one self-contained, well-formed file."""

from __future__ import annotations

import csv
import io
import re
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import support.migration_harness as harness
from agentledger import AgentBuilder, SubagentSpec, ToolCall, Usage, tool
from agentledger.analytics import Analytics, build_report, figures
from agentledger.analytics._report import bucket_unit
from agentledger.cli import cli
from agentledger.cli.demo import build_agent, converse_recorded
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM

DUCKDB_CLI = Path(sys.executable).parent / "duckdb"
EVIL = "[red]<script>alert('owned')</script>"
"""An agent name that is rich markup and HTML: it must come out as the text it is."""
START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


# -- ledgers -------------------------------------------------------------------------------------


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the archive."""
    return f"facts about {topic}"


class Clock:
    """Every reading 250 ms after the last; ``jump`` moves on by more."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        reading, self.now = self.now, self.now + timedelta(milliseconds=250)
        return reading

    def jump(self, by: timedelta) -> None:
        self.now += by


def respond(
    content: str = "", *, calls: tuple[ToolCall, ...] = (), tokens: tuple[int, int], cost: float
) -> InferenceResponse:
    return InferenceResponse(
        content=content,
        tool_calls=list(calls),
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
        cost_usd=cost,
        finish_reason="tool_calls" if calls else "stop",
    )


def record_priced_scenario(path: Path) -> None:
    """Day 1: ``planner`` calls lookup wrongly (an error result), spawns ``researcher`` (which
    looks up and answers), then answers. Day 2: ``planner`` answers at once. Day 3: the agent
    named ``EVIL`` answers. Every step has a cost."""
    clock = Clock(START)
    researcher = SubagentSpec(
        name="researcher",
        description="Finds facts.",
        system_prompt="You research.",
        tools=[lookup],
        llm=ScriptedLLM(
            [
                respond(
                    calls=(ToolCall(id="r1", name="lookup", arguments={"topic": "x"}),),
                    tokens=(50, 5),
                    cost=0.002,
                ),
                respond("the facts", tokens=(60, 6), cost=0.003),
            ],
            model="small-model",
        ),
    )
    spawn = {"subagent": "researcher", "task": "find the facts"}
    planner_llm = ScriptedLLM(
        [
            respond(
                calls=(ToolCall(id="p1", name="lookup", arguments={"wrong": 1}),),
                tokens=(100, 10),
                cost=0.01,
            ),
            respond(
                calls=(ToolCall(id="p2", name="spawn_subagent", arguments=spawn),),
                tokens=(120, 12),
                cost=0.012,
            ),
            respond("done", tokens=(150, 15), cost=0.015),
            respond("again", tokens=(80, 8), cost=0.008),
        ],
        model="big-model",
    )
    evil_llm = ScriptedLLM([respond("hi", tokens=(7, 3), cost=0.001)], model="tiny<b>model")
    with Ledger.open(path) as ledger:
        planner = (
            AgentBuilder()
            .with_llm(planner_llm)
            .with_name("planner")
            .with_tools([lookup])
            .with_subagents([researcher])
            .with_clock(clock)
            .with_ledger(ledger)
            .build()
        )
        planner.run("What are the facts?")
        clock.jump(timedelta(days=1))
        planner.run("Again?")
        clock.jump(timedelta(days=1))
        evil = AgentBuilder().with_llm(evil_llm).with_name(EVIL).with_clock(clock)
        evil.with_ledger(ledger).build().run("Hello")


def record_demo(path: Path) -> None:
    with Ledger.open(path) as ledger:
        agent, _llm = build_agent(ledger=ledger, prices=None)
        converse_recorded(agent)


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("priced") / "ledger.db"
    record_priced_scenario(path)
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "ledger.db"
    record_demo(path)
    return path


@pytest.fixture(scope="module", params=["demo", "priced"])
def ledger_file(request: pytest.FixtureRequest) -> Path:
    path: Path = request.getfixturevalue(request.param)
    return path


@pytest.fixture(scope="module")
def report(ledger_file: Path) -> str:
    """The terminal report of ``ledger_file``, printed once for every test that reads it."""
    return ok("--db", str(ledger_file), "analytics", "report")


@pytest.fixture(scope="module")
def priced_report(priced: Path) -> str:
    return ok("--db", str(priced), "analytics", "report")


@pytest.fixture(scope="module")
def priced_html(priced: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    target = tmp_path_factory.mktemp("html") / "report.html"
    output = ok("--db", str(priced), "analytics", "report", "--html", str(target))
    assert f"wrote {target}" in output
    return target.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo_html(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    target = tmp_path_factory.mktemp("html") / "report.html"
    ok("--db", str(demo), "analytics", "report", "--html", str(target))
    return target.read_text(encoding="utf-8")


# -- helpers -------------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, f"agentledger {' '.join(args)}: {result.output}"
    assert result.exception is None
    return result.output


def flat(output: str) -> str:
    return " ".join(output.split())


def sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


def table_rows(output: str, title: str) -> list[list[str]]:
    """The body rows of the terminal table titled ``title``, as cells."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


class Structure(HTMLParser):
    """Checks that every element is closed, in order, and collects the SVG charts."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "col", "source", "wbr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.charts: list[list[tuple[str, dict[str, str | None]]]] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "svg":
            self.charts.append([])
        elif "svg" in self.stack:
            self.charts[-1].append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if "svg" in self.stack:
            self.charts[-1].append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack, f"</{tag}> closes nothing"
        opened = self.stack.pop()
        assert opened == tag, f"</{tag}> closes <{opened}>"


def parsed(page: str) -> Structure:
    structure = Structure()
    structure.feed(page)
    structure.close()
    assert structure.stack == [], f"never closed: {structure.stack}"
    return structure


def drawn(chart: list[tuple[str, dict[str, str | None]]]) -> list[dict[str, str | None]]:
    """The rects and paths of a chart with a non-zero size."""
    return [
        attrs
        for tag, attrs in chart
        if (tag == "rect" and float(attrs["width"] or 0) > 0 and float(attrs["height"] or 0) > 0)
        or (tag == "path" and attrs.get("d"))
    ]


# -- the terminal report -------------------------------------------------------------------------


def test_the_report_lists_every_agent_with_the_token_sums_of_its_steps(ledger_file, report):
    output = report

    expected = sql(
        ledger_file,
        "SELECT r.agent_name, count(DISTINCT r.id), count(*), sum(s.input_tokens), "
        "sum(s.output_tokens) FROM step_executions s JOIN agent_runs r ON r.id = s.run_id "
        "GROUP BY r.agent_name",
    )
    rows = {row[0]: row for row in table_rows(output, "Usage by agent")}
    assert set(rows) == {agent for agent, *_ in expected}
    for agent, runs, steps, input_tokens, output_tokens in expected:
        assert rows[agent][1:5] == [
            f"{runs:,}",
            f"{steps:,}",
            f"{input_tokens:,}",
            f"{output_tokens:,}",
        ]


def test_the_report_sums_models_and_conversations_from_the_step_rows(ledger_file, report):
    output = report

    by_model = sql(
        ledger_file,
        "SELECT model, sum(input_tokens), sum(output_tokens) FROM step_executions GROUP BY model",
    )
    rows = {row[0]: row for row in table_rows(output, "Usage by model")}
    for model, input_tokens, output_tokens in by_model:
        assert rows[model][3:5] == [f"{input_tokens:,}", f"{output_tokens:,}"]
    ((total,),) = sql(ledger_file, "SELECT sum(input_tokens) FROM step_executions")
    conversations = table_rows(output, "Usage by conversation (with subagent runs)")
    assert sum(int(row[5].replace(",", "")) for row in conversations) == total


def test_the_demo_report_says_no_step_is_priced_and_never_shows_a_zero_cost(demo):
    output = ok("--db", str(demo), "analytics", "report")

    ((runs,), (steps,)) = sql(
        demo, "SELECT count(*) FROM agent_runs UNION ALL SELECT count(*) FROM step_executions"
    )
    first_lines = flat("\n".join(output.splitlines()[:4]))
    assert (
        f"Incomplete ({runs} runs, {steps} steps): {steps} of {steps} steps have no price "
        "(models: scripted-research-model, scripted-review-model, scripted-travel-model)"
    ) in first_lines
    assert "$0" not in output
    for row in table_rows(output, "Usage by agent"):
        assert row[-1] == "unpriced"
    for row in table_rows(output, "The most expensive runs"):
        assert row[7:9] == ["unpriced", "unpriced"]


def test_the_priced_report_is_complete_and_ranks_runs_by_inclusive_cost(priced, priced_report):
    output = priced_report

    assert "Complete: 4 runs, 7 steps; every step is priced" in output
    runs = table_rows(output, "The most expensive runs")
    assert [row[1] for row in runs] == ["planner", "planner", EVIL]
    planner = runs[0]
    # Each run by its shortest unique prefix: it names one run, whose steps cost 0.037.
    (run_id,) = sql(priced, f"SELECT id FROM agent_runs WHERE id LIKE '{planner[0]}%'")
    own = sql(priced, f"SELECT sum(cost_usd) FROM step_executions WHERE run_id = '{run_id[0]}'")
    assert own[0][0] == pytest.approx(0.037)
    # excl.: its own steps; incl.: with the researcher's 0.002 + 0.003.
    assert planner[4:9] == ["2", "407", "528", "$0.0370", "$0.0420"]
    assert planner[9] == "1"  # the failed lookup


def test_the_report_shows_the_tool_error_rates_and_latency_percentiles(priced_report):
    tools = {row[0]: row for row in table_rows(priced_report, "Tools")}
    assert tools["lookup"][1:4] == ["2", "1", "50.0%"]
    assert tools["lookup"][4:7] == ["250.0", "250.0", "250.0"]  # one tick of the clock
    assert tools["spawn_subagent"][1:4] == ["1", "0", "0.0%"]


def test_the_report_says_which_runs_are_still_running(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        _conversation, run_id = harness.begin_stale_run(ledger)

    output = ok("--db", str(path), "analytics", "report")

    assert "1 run is still running" in flat(output)
    assert "1 of 1 step has no price (models: scripted)" in flat(output)
    with Ledger.open(path) as ledger:
        shown = ledger.short_ids([run_id], of="run")[run_id]
    assert [row[0] for row in table_rows(output, "Runs still running (oldest first)")] == [shown]


def test_an_agent_name_that_is_markup_is_printed_as_it_is(priced_report):
    assert EVIL in priced_report


def test_an_empty_ledger_gives_a_report_with_nothing_recorded(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger.open(path).close()
    target = tmp_path / "report.html"

    output = ok("--db", str(path), "analytics", "report", "--html", str(target))

    assert "Complete: 0 runs, 0 steps" in output
    assert "nothing recorded yet" in output
    page = target.read_text(encoding="utf-8")
    assert "No steps recorded yet." in page and "No runs recorded yet." in page
    parsed(page)


@pytest.mark.parametrize(
    ("span", "unit"),
    [
        (None, "hour"),
        (timedelta(0), "hour"),
        (timedelta(hours=48), "hour"),
        (timedelta(hours=49), "day"),
        (timedelta(days=400), "day"),
    ],
)
def test_buckets_are_hours_up_to_two_days_of_data_and_days_beyond(span, unit):
    last = None if span is None else START + span
    assert bucket_unit(START if span is not None else None, last) == unit


def test_build_report_gives_the_same_numbers_as_the_views(priced):
    with Analytics.open(priced) as analytics:
        report = build_report(analytics, top=2)
        rollup = analytics.sql(
            "SELECT run_id, inclusive_cost_usd FROM run_rollup WHERE parent_run_id IS NULL"
        ).fetchall()

    assert len(report.runs) == 2
    costs = dict(rollup)
    for run in report.runs:
        assert run.inclusive.cost_usd == costs[run.run_id]
    tree = report.runs[0]
    assert [r.agent_name for r in tree.walk()] == ["planner", "researcher"]
    assert tree.inclusive.tokens == tree.exclusive.tokens + tree.children[0].inclusive.tokens
    assert report.unit == "day"
    assert len(report.buckets) == 3


# -- the HTML page -------------------------------------------------------------------------------


def test_the_html_page_is_self_contained(priced_html):
    structure = parsed(priced_html)

    for tag, attrs in structure.tags:
        for name in ("src", "xlink:href", "action", "data"):
            assert attrs.get(name) is None, f"<{tag} {name}=...> would fetch something"
        assert (attrs.get("href") or "#").startswith("#"), "a link out of the page"
        assert tag not in {"script", "link", "iframe", "img", "object", "embed"}, tag
    # No address but the SVG namespace, which names the XML vocabulary and is never fetched.
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\")", priced_html)
    assert priced_html.count('xmlns="http://www.w3.org/2000/svg"') == priced_html.count("<svg")
    assert "@import" not in priced_html and "url(" not in priced_html


def test_the_html_page_has_five_charts_that_draw_something(priced_html):
    charts = parsed(priced_html).charts

    assert len(charts) == 5
    for chart in charts:
        assert drawn(chart), chart
        assert ("title", {}) in chart  # a title, and the tooltips of the bars
        assert any(tag == "text" for tag, _ in chart)  # axis labels and legends
    assert "Tokens (input + output) per day" in priced_html
    assert "Cost (USD) per day" in priced_html
    assert "by cost" in priced_html  # every run is priced: the tree is drawn by cost


def test_the_charts_of_the_page_are_the_figures_a_notebook_shows(priced, priced_html):
    with Analytics.open(priced) as analytics:
        shown = figures(build_report(analytics))

    assert list(shown) == ["tokens", "cost", "cost_tree", "tool_latency", "tool_errors"]
    titles = re.findall(r"<h2>([^<]*)</h2>\n<figure>", priced_html)
    assert titles == [figure.title for figure in shown.values()]
    for figure in shown.values():
        assert figure.svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
        assert figure.svg in priced_html


def test_every_bar_has_a_tooltip(priced_html):
    rects = re.findall(r"<rect [^>]*>(.*?)</rect>", priced_html)

    assert rects
    assert all(
        inner.startswith("<title>") and len(inner) > len("<title></title>") for inner in rects
    )
    assert "2030-01-01 · planner: 407" in priced_html  # a bucket's bar for one agent


class Charts(HTMLParser):
    """Per chart of a page, its rects as (fill, tooltip) and its labels as (shown text, the
    whole text its tooltip gives, or the shown text when it has none)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rects: list[list[tuple[str, str]]] = []
        self.labels: list[list[tuple[str, str]]] = []
        self._element: tuple[str, str] | None = None  # the rect or text being read, its fill
        self._shown: list[str] = []
        self._tooltip: list[str] | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self.rects.append([])
            self.labels.append([])
        elif tag in ("rect", "text"):
            self._element = (tag, dict(attrs).get("fill") or "")
            self._shown, self._tooltip = [], None
        elif tag == "title" and self._element is not None:
            self._tooltip, self._in_title = [], True

    def handle_data(self, data: str) -> None:
        if self._in_title and self._tooltip is not None:
            self._tooltip.append(data)
        elif self._element is not None:
            self._shown.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in ("rect", "text") and self._element is not None:
            kind, fill = self._element
            shown = "".join(self._shown)
            tooltip = None if self._tooltip is None else "".join(self._tooltip)
            if kind == "rect":
                self.rects[-1].append((fill, tooltip or ""))
            else:
                self.labels[-1].append((shown, shown if tooltip is None else tooltip))
            self._element = None


def charts_of(page: str) -> Charts:
    charts = Charts()
    charts.feed(page)
    charts.close()
    return charts


def colours_by_name(charts: Charts, names: set[str]) -> dict[str, set[str]]:
    """The colours each of ``names`` is drawn in, over every chart: its legend swatches (whose
    tooltip is the name) and its stacked bars (whose tooltip ends in `` · name: value``)."""
    found: dict[str, set[str]] = {}
    for rects in charts.rects:
        for fill, tip in rects:
            for name in names:
                if tip == name or re.search(rf" · {re.escape(name)}: [^·]*$", tip):
                    found.setdefault(name, set()).add(fill)
    return found


@pytest.fixture(scope="module")
def crossed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A ledger whose agents and models rank one way by tokens and the other way by cost (a
    chart colouring by rank would swap their colours), and its report's page."""
    path = tmp_path_factory.mktemp("crossed") / "ledger.db"
    with Ledger.open(path) as ledger:
        for agent, model, tokens, cost in (
            ("wordy", "cheap-model", (900, 100), 0.001),
            ("pricey", "dear-model", (90, 10), 0.05),
        ):
            llm = ScriptedLLM([respond("ok", tokens=tokens, cost=cost)], model=model)
            AgentBuilder().with_llm(llm).with_name(agent).with_ledger(ledger).build().run("Hi")
    target = path.with_suffix(".html")
    ok("--db", str(path), "analytics", "report", "--html", str(target))
    return path, target.read_text(encoding="utf-8")


@pytest.mark.parametrize("which", ["priced", "crossed"])
def test_each_agent_and_each_model_has_one_colour_in_every_chart(
    which, priced, priced_html, crossed
):
    path, page = (priced, priced_html) if which == "priced" else crossed
    agents = {name for (name,) in sql(path, "SELECT DISTINCT agent_name FROM agent_runs")}
    models = {name for (name,) in sql(path, "SELECT DISTINCT model FROM step_executions")}
    charts = charts_of(page)

    for names in (agents, models):
        colours = colours_by_name(charts, names)
        assert set(colours) == names
        assert all(len(found) == 1 for found in colours.values()), colours
        assert len({next(iter(found)) for found in colours.values()}) == len(names)
    # The cost tree draws each run's own steps in its agent's colour.
    tree = [(fill, tip) for rects in charts.rects for fill, tip in rects if " · run " in tip]
    for agent, (colour,) in colours_by_name(charts, agents).items():
        fills = {fill for fill, tip in tree if tip.startswith(f"{agent} · run ")}
        assert colour in fills, (agent, colour, fills)


def test_the_chart_labels_are_shown_whole(priced_html):
    labels = [label for chart in charts_of(priced_html).labels for label in chart]

    assert any(EVIL in whole for _, whole in labels)
    for shown, whole in labels:
        assert shown == whole, f"cut: {shown!r} for {whole!r}"


def test_every_run_of_the_page_leads_to_its_tree(priced, priced_html):
    structure = parsed(priced_html)
    anchors = {attrs["id"] for _, attrs in structure.tags if attrs.get("id")}
    links = [attrs["href"] or "" for tag, attrs in structure.tags if tag == "a"]

    assert links and all(link.startswith("#") and link[1:] in anchors for link in links)
    runs = {run_id for (run_id,) in sql(priced, "SELECT id FROM agent_runs")}
    assert {f"run-{run_id}" for run_id in runs} <= anchors  # every run of the top trees
    table = priced_html.split("<caption>The most expensive runs</caption>")[1].split("</table>")[0]
    top = re.findall(r'<tr><td><a href="#run-([^"]+)">([^<]+)</a></td>', table)
    assert len(top) == 3 and all(run_id.startswith(shown) for run_id, shown in top)
    # Each run's row of the cost tree leads there too.
    assert {link for link in links if link[5:] in runs} == {f"#run-{run_id}" for run_id in runs}


def test_ids_in_the_tables_keep_to_one_line(priced_html):
    assert "td { white-space: nowrap; }" in priced_html
    ids = re.findall(r"<td( class=\"[^\"]*\")?>(?:<a [^>]*>)?[0-9a-f]{8}-[0-9a-f]", priced_html)
    assert len(ids) >= 5  # conversations and runs
    assert all("prose" not in classes for classes in ids)


def test_the_html_page_escapes_names_from_the_ledger(priced_html):
    assert "<script" not in priced_html
    assert "tiny<b>model" not in priced_html
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in priced_html
    assert "tiny&lt;b&gt;model" in priced_html


def test_the_html_page_holds_the_tables_and_the_completeness_line(priced_html, demo_html):
    for title in (
        "Usage by agent",
        "Usage by model",
        "The most expensive runs",
        "Tools",
        "Run tree shape",
        "Completeness",
    ):
        assert f"<caption>{title}</caption>" in priced_html
    assert '<p class="banner complete">Complete: 4 runs, 7 steps;' in priced_html
    assert '<p class="banner incomplete">Incomplete (' in demo_html


def test_without_prices_the_cost_chart_is_a_note_and_the_tree_is_drawn_by_tokens(demo_html):
    charts = parsed(demo_html).charts

    assert len(charts) == 4
    assert all(drawn(chart) for chart in charts)
    assert "No priced steps: the cost of every step is unknown" in demo_html
    assert "by tokens (input + output)" in demo_html
    assert "per hour" in demo_html  # the demo's runs take a second, not days
    assert "$0" not in demo_html


def test_the_report_cannot_be_written_where_there_is_no_directory(priced, tmp_path):
    result = invoke(
        "--db", str(priced), "analytics", "report", "--html", str(tmp_path / "no" / "r.html")
    )

    assert result.exit_code == 1
    assert "cannot write the report to" in result.output
    assert "Traceback" not in result.output


# -- analytics sql in the duckdb shell -----------------------------------------------------------


ROLLUP = (
    "SELECT run_id, exclusive_input_tokens, exclusive_output_tokens, inclusive_input_tokens, "
    "inclusive_output_tokens, inclusive_steps, exclusive_cost_usd, inclusive_cost_usd "
    "FROM run_rollup ORDER BY run_id"
)


def from_csv(text: str) -> list[tuple[Any, ...]]:
    rows = list(csv.reader(io.StringIO(text)))[1:]
    return [
        (row[0], *(int(v) for v in row[1:6]), *(None if v == "NULL" else float(v) for v in row[6:]))
        for row in rows
    ]


def test_the_views_script_gives_the_duckdb_shell_the_same_rollup_as_python(ledger_file, tmp_path):
    assert DUCKDB_CLI.exists(), "the duckdb command line is missing: pip install -e '.[dev]'"
    script = tmp_path / "views.sql"
    script.write_text(ok("--db", str(ledger_file), "analytics", "sql"), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    shell = subprocess.run(
        [str(DUCKDB_CLI), "-batch", "-csv", "-init", str(script), "-c", ROLLUP],
        cwd=elsewhere,  # the script names the ledger by its absolute path
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert shell.returncode == 0, shell.stderr
    with Analytics.open(ledger_file) as analytics:
        expected = analytics.sql(ROLLUP).fetchall()
    got = from_csv(shell.stdout)
    assert len(got) == len(expected) > 0
    for row, want in zip(got, expected, strict=True):
        assert row[:6] == want[:6]
        assert row[6:] == pytest.approx(want[6:])


# -- export parquet ------------------------------------------------------------------------------


@pytest.mark.parametrize("table", ["step_executions", "agent_runs"])
def test_export_writes_a_partition_per_day_with_every_row(priced, tmp_path, table):
    target = tmp_path / "exported"

    output = ok("--db", str(priced), "export", "parquet", str(target))

    days = {day for (day,) in sql(priced, f"SELECT DISTINCT date(started_at) FROM {table}")}
    assert len(days) == 3
    assert {p.name for p in (target / table).iterdir()} == {f"day={day}" for day in days}
    ((rows,),) = sql(priced, f"SELECT count(*) FROM {table}")
    pattern = (target / table / "*" / "*.parquet").as_posix()
    with duckdb.connect() as db:
        read = db.execute(
            "SELECT count(*), count(DISTINCT day) FROM read_parquet(?, hive_partitioning = true)",
            [pattern],
        ).fetchone()
    assert read == (rows, 3)
    listed = {row[0]: row for row in table_rows(output, "Parquet files by table")}
    assert listed[table][1:] == ["3", "3", str(rows)]


FTS = ("conversation_messages_fts", "tool_executions_fts")
FRAMEWORKS = ("graph_", "stored_", "adk_")


def test_the_pattern_the_export_prints_reads_back_every_table_it_wrote(demo, tmp_path):
    target = tmp_path / "exported"

    output = ok("--db", str(demo), "export", "parquet", str(target))

    (pattern,) = (line.split(" FROM ", 1)[1] for line in output.splitlines() if " FROM " in line)
    assert pattern == f"read_parquet('{target.as_posix()}/<table>/**/*.parquet')"
    bookkeeping = {"agentledger_changes"}  # named as left out
    assert all(name in flat(output) for name in bookkeeping)
    tables = {
        name
        for (name,) in sql(demo, "SELECT name FROM sqlite_master WHERE type = 'table'")
        # The search index, and the frameworks' state (named as left out: graph_* and so on)
        if not name.startswith(FTS + FRAMEWORKS)
    } - bookkeeping
    assert all(f"{prefix}*" in flat(output) for prefix in FRAMEWORKS)
    assert {folder.name for folder in target.iterdir()} == tables
    with duckdb.connect() as db:
        for table in sorted(tables):
            ((rows,),) = sql(demo, f"SELECT count(*) FROM {table}")
            read = db.sql(f"SELECT count(*) FROM {pattern.replace('<table>', table)}")
            assert read.fetchone() == (rows,), table


@pytest.mark.parametrize("table", ["context_compactions", "execution_buffer_rows"])
def test_export_writes_an_empty_table_as_one_file_of_no_rows_with_its_columns(
    priced, tmp_path, table
):
    assert sql(priced, f"SELECT count(*) FROM {table}") == [(0,)]
    target = tmp_path / "exported"

    output = ok("--db", str(priced), "export", "parquet", str(target))

    assert sorted(p.relative_to(target / table) for p in (target / table).rglob("*")) == [
        Path("empty"),
        Path("empty/data_0.parquet"),
    ]
    columns = [name for _, name, *_ in sql(priced, f"PRAGMA table_info({table})")]
    pattern = (target / table / "*" / "*.parquet").as_posix()
    with duckdb.connect() as db:
        read = db.sql(f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = true)")
        assert read.fetchall() == []
        assert read.columns == [*columns, "day"]
        assert str(read.types[-1]) == "DATE"  # as the day folders of the tables with rows give it
    assert pq.read_table(target / table).column_names == [*columns, "day"]  # pandas' reader
    assert pl.read_parquet(pattern, hive_partitioning=True).columns == [*columns, "day"]
    listed = {row[0]: row for row in table_rows(output, "Parquet files by table")}
    assert listed[table][1:] == ["0", "1", "0"]


# -- errors --------------------------------------------------------------------------------------

COMMANDS = [
    pytest.param(("analytics", "report"), id="report"),
    pytest.param(("analytics", "sql"), id="sql"),
    pytest.param(("export", "parquet", "out"), id="export"),
]


def assert_clean_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.output.startswith("Error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in flat(result.output)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of the test's own (``export parquet out`` would write there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_ledger_is_a_clean_error(command, tmp_path, elsewhere):
    result = invoke("--db", str(tmp_path / "nothing.db"), *command)

    assert_clean_error(result, "no ledger at", "the file does not exist")
    assert not (tmp_path / "nothing.db").exists()


@pytest.mark.parametrize("content", [b"not a database at all\n" * 10, b""], ids=["text", "empty"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_a_ledger_is_a_clean_error(command, content, tmp_path, elsewhere):
    path = tmp_path / "other.db"
    path.write_bytes(content)

    result = invoke("--db", str(path), *command)

    assert_clean_error(result)
    assert "not an agentledger ledger" in result.output or "cannot attach" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_scanner_extension_says_what_to_install(command, priced, monkeypatch, elsewhere):
    monkeypatch.setitem(sys.modules, "duckdb_extension_sqlite_scanner", None)  # not importable

    result = invoke("--db", str(priced), *command)

    assert_clean_error(result, "pip install 'duckdb-extension-sqlite-scanner==")
