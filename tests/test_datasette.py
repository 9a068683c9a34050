"""Datasette serves a ledger with ``agentledger datasette-metadata``: every table and column
described as ``schema/README.md`` describes it, and canned queries that answer what the
``Ledger`` answers (a conversation, a run's trace, a run tree with its usage, the most
expensive runs, the slowest tools, search), with hostile parameter values taken as data.

Datasette is driven in process, through its own test client, over the offline demo's ledger
(priced) and one conversation whose text is SQL and quotes."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from datasette.app import Datasette
from markupsafe import escape

from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM
from agentledger.cli import cli
from agentledger.cli.demo import build_agent, converse_recorded
from agentledger.integrations.datasette import CANNED_QUERIES
from agentledger.ledger import Ledger, migrate

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "Robert'); DROP TABLE agent_runs; -- \"quoted\" and 'single' NEAR(x) OR *"
"""A user's message (and a search) made of what SQL and FTS5 would take as syntax."""
HOSTILE_ANSWER = "Noted: nothing was dropped."


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's ledger, priced, and one conversation whose text is SQL and quotes."""
    path = tmp_path_factory.mktemp("datasette") / "ledger.db"
    with Ledger.open(path) as ledger:
        agent, _ = build_agent(ledger=ledger)
        converse_recorded(agent)
        llm = ScriptedLLM([InferenceResponse(content=HOSTILE_ANSWER)])
        AgentBuilder().with_llm(llm).with_ledger(ledger).build().run(HOSTILE)
    return path


@pytest.fixture(scope="module")
def ledger(ledger_file: Path) -> Iterator[Ledger]:
    with Ledger.open(ledger_file, read_only=True) as opened:
        yield opened


def metadata_of(path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(path), "datasette-metadata", *args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def metadata(ledger_file: Path) -> dict[str, Any]:
    code, output = metadata_of(ledger_file)
    assert code == 0, output
    loaded: dict[str, Any] = json.loads(output)
    return loaded


@pytest.fixture(scope="module")
def served(ledger_file: Path, metadata: dict[str, Any]) -> Datasette:
    return Datasette([str(ledger_file)], metadata=copy.deepcopy(metadata))  # Datasette adds to it


def get(served: Datasette, path: str, **params: str) -> Any:
    response = asyncio.run(served.client.get(path, params=params))
    assert response.status_code == 200, response.text
    return response


def query(
    served: Datasette, name: str, *, database: str = "ledger", **params: str
) -> list[dict[str, Any]]:
    """The rows of the canned query ``name`` on the served ledger ``database``."""
    path = f"/{database}/{name}.json"
    rows: list[dict[str, Any]] = get(served, path, _shape="array", **params).json()
    return rows


def hostile_conversation(ledger: Ledger) -> str:
    (hit,) = ledger.search("Robert DROP quoted")
    return hit.conversation_id


# --- every canned query runs, and answers what the ledger answers -----------------------------


def params_for(name: str, ledger: Ledger) -> dict[str, str]:
    """Parameters that find rows: the demo's first run (which called tools), its conversation
    and the tree of its team turn."""
    runs = ledger.runs()  # newest first
    first, team = runs[-1], next(r for r in runs if r.parent_run_id is not None)
    return {
        "conversation": {"conversation_id": first.conversation_id},
        "run_trace": {"run_id": first.id},
        "run_tree": {"run_id": team.root_run_id},
        "search": {"query": "Lisbon"},
    }.get(name, {})


@pytest.mark.parametrize("name", CANNED_QUERIES)
def test_every_canned_query_runs_on_the_demo_ledger_and_finds_rows(served, ledger, name):
    assert query(served, name, **params_for(name, ledger))


def message_fields(message: Any) -> tuple[Any, ...]:
    return (message.id, message.role.value, message.content, message.name, message.tool_call_id)


def row_fields(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["id"], row["role"], row["content"], row["name"], row["tool_call_id"])


def test_the_conversation_query_is_each_conversation_as_ledger_history_reads_it(served, ledger):
    conversations = ledger.conversations()
    assert len(conversations) > 3  # the demo's, its subagents' and the hostile one
    for conversation in conversations:
        rows = query(served, "conversation", conversation_id=conversation.id)
        assert [row_fields(r) for r in rows] == [
            message_fields(m) for m in ledger.history(conversation.id)
        ]


def test_the_conversation_query_reads_the_hostile_text_back_as_it_was_said(served, ledger):
    rows = query(served, "conversation", conversation_id=hostile_conversation(ledger))
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", HOSTILE),
        ("assistant", HOSTILE_ANSWER),
    ]


def tool_calls_of(message: Any) -> list[tuple[Any, ...]]:
    return [(c.id, c.name, dict(c.arguments), c.raw_arguments) for c in message.tool_calls]


def test_the_run_trace_query_is_the_trace_ledger_trace_messages_rebuilds(served, ledger):
    traced = 0
    for run in ledger.runs():
        rows = query(served, "run_trace", run_id=run.id)
        trace = ledger.trace_messages(run.id)
        assert [row_fields(r) for r in rows] == [message_fields(m) for m in trace]
        for row, message in zip(rows, trace, strict=True):
            calls = json.loads(row["tool_calls"]) if row["tool_calls"] else []
            found = [(c["id"], c["name"], c["arguments"], c["raw_arguments"]) for c in calls]
            assert found == tool_calls_of(message)
            assert row["reasoning"] == message.reasoning
        traced += len(trace)
    assert traced > 10  # the demo's tool calls, its spawns and its subagents'


SPENT = ("steps", "input_tokens", "output_tokens", "cost_usd", "fully_priced")
INCLUSIVE = (
    *SPENT,
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def spend_fields(spend: Any, names: tuple[str, ...]) -> dict[str, Any]:
    values = {
        "steps": spend.steps,
        "cost_usd": spend.cost_usd,
        "fully_priced": int(spend.fully_priced),
        **{n: getattr(spend.usage, n) for n in names if n.endswith("_tokens")},
    }
    return {n: values[n] for n in names}


def approx_costs(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: pytest.approx(v) if isinstance(v, float) else v for k, v in fields.items()}


def test_the_run_tree_query_has_each_run_s_exclusive_and_inclusive_usage_as_the_run_tree(
    served, ledger
):
    subagents = [r for r in ledger.runs() if r.parent_run_id is not None]
    assert subagents and any(r.cost_usd for r in ledger.runs())  # a tree, priced
    for run in ledger.runs():  # every run: the whole tree from a root, a subtree from the others
        tree = ledger.run_tree(run.id)
        rows = query(served, "run_tree", run_id=run.id)
        nodes = list(tree.walk())
        assert [r["run_id"] for r in rows] == [n.run.id for n in nodes]
        for row, node in zip(rows, nodes, strict=True):
            assert row["parent_run_id"] == node.run.parent_run_id
            assert row["level"] == node.run.depth - run.depth
            assert {n: row[n] for n in SPENT} == approx_costs(spend_fields(node.exclusive, SPENT))
            inclusive = {n: row[f"inclusive_{n}"] for n in INCLUSIVE}
            assert inclusive == approx_costs(spend_fields(node.inclusive, INCLUSIVE))


def test_the_most_expensive_runs_are_the_top_level_runs_by_what_their_trees_spent(served, ledger):
    roots = [r for r in ledger.runs() if r.parent_run_id is None]
    spent = {r.id: ledger.run_tree(r.id).inclusive for r in roots}

    def costliest(run_id: str) -> tuple[Any, ...]:
        spend = spent[run_id]
        tokens = spend.usage.input_tokens + spend.usage.output_tokens
        return (spend.cost_usd is None, -(spend.cost_usd or 0), -tokens, run_id)

    rows = query(served, "expensive_runs")
    assert [r["run_id"] for r in rows] == sorted(spent, key=costliest)
    for row in rows:
        tree = ledger.run_tree(row["run_id"])
        assert row["runs"] == len(list(tree.walk()))
        assert {n: row[n] for n in SPENT} == approx_costs(spend_fields(tree.inclusive, SPENT))
    assert rows[-1]["cost_usd"] is None  # the hostile conversation's model has no price


def test_the_slowest_tools_are_the_ledger_s_tool_executions_by_mean_duration(served, ledger):
    durations: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    for run in ledger.runs():
        for execution in ledger.tool_executions(run.id):
            durations[execution.tool_name].append(execution.duration_ms)
            errors[execution.tool_name] += execution.is_error
    means = {name: sum(d) / len(d) for name, d in durations.items()}

    rows = query(served, "slowest_tools")
    assert [r["tool_name"] for r in rows] == sorted(means, key=lambda n: (-means[n], n))
    for row in rows:
        name = row["tool_name"]
        assert row["calls"] == len(durations[name])
        assert row["mean_ms"] == pytest.approx(means[name], abs=0.002)
        assert row["max_ms"] == pytest.approx(max(durations[name]), abs=0.002)
        assert row["errors"] == errors[name]


@pytest.mark.parametrize(
    "words",
    [
        "Lisbon",
        "lisbon HOTEL",
        "weather   Friday",
        '"Lisbon"',
        "Robert DROP quoted",
        HOSTILE,
        "'; DROP TABLE conversation_messages; --",
        "' OR '1'='1",
        '" OR 1=1 --',
        "NEAR OR AND NOT",
        "*",
        "",
        "   ",
    ],
)
def test_search_finds_the_messages_ledger_search_finds(served, ledger, words):
    rows = query(served, "search", query=words)
    assert [r["id"] for r in rows] == [h.message.id for h in ledger.search(words, limit=100)]


def test_search_finds_the_hostile_message_by_its_own_text(served, ledger):
    rows = query(served, "search", query=HOSTILE)
    assert [r["content"] for r in rows] == [HOSTILE]


@pytest.mark.parametrize(
    ("name", "param"),
    [("conversation", "conversation_id"), ("run_trace", "run_id"), ("run_tree", "run_id")],
)
@pytest.mark.parametrize("value", ["' OR '1'='1", "x' UNION SELECT * FROM agent_runs --", HOSTILE])
def test_an_id_made_of_sql_is_an_id_that_matches_nothing(served, ledger_file, name, param, value):
    before = ledger_file.read_bytes()
    assert query(served, name, **{param: value}) == []
    assert ledger_file.read_bytes() == before


# --- ids as the command line prints them, links between the queries, what is out of the way ----

ID_QUERIES = [("conversation", "conversation_id"), ("run_trace", "run_id"), ("run_tree", "run_id")]


def ids_for(name: str, ledger: Ledger) -> list[str]:
    if name == "conversation":
        return [c.id for c in ledger.conversations()]
    return [r.id for r in ledger.runs()]


@pytest.mark.parametrize(("name", "param"), ID_QUERIES)
def test_an_id_query_takes_the_short_id_the_command_line_prints(served, ledger, name, param):
    kind = "conversation" if name == "conversation" else "run"
    ids = ids_for(name, ledger)
    shown = ledger.short_ids(ids, of=kind)
    assert any(len(short) < len(full) for full, short in shown.items())
    for full, short in shown.items():
        assert query(served, name, **{param: short}) == query(served, name, **{param: full})
    assert any(query(served, name, **{param: short}) for short in shown.values())


@pytest.mark.parametrize(("name", "param"), ID_QUERIES)
def test_a_prefix_that_begins_several_ids_finds_nothing_and_the_ids_query_lists_them(
    served, ledger, name, param
):
    ids = ids_for(name, ledger)
    prefix = ids[0][:8]
    begun = sorted(i for i in ids if i.startswith(prefix))
    assert len(begun) > 1  # the demo's ids, made in the same second, share their first 8

    assert query(served, name, **{param: prefix}) == []
    assert query(served, name, **{param: ids[0][:7]}) == []  # shorter than the CLI takes
    listed = query(served, "ids", prefix=prefix)
    kind = "conversation" if name == "conversation" else "run"
    assert sorted(r["id"] for r in listed if r["kind"] == kind) == begun


def test_each_id_links_to_the_trace_and_the_tree_and_each_link_leads_there(served, ledger):
    rows = query(served, "expensive_runs")
    followed = 0
    for row in rows:
        for column, name, param, key in (
            ("trace", "run_trace", "run_id", "run_id"),
            ("tree", "run_tree", "run_id", "run_id"),
            ("messages", "conversation", "conversation_id", "conversation_id"),
        ):
            link = row[column]
            assert link == f"http://localhost/ledger/{name}?{param}={row[key]}"
            page = get(served, link.removeprefix("http://localhost"))
            assert page.status_code == 200
            followed += 1
        tree = query(served, "run_tree", run_id=row["run_id"])
        assert tree[0]["run_id"] == row["run_id"]
        assert all(r["trace"].endswith(f"run_id={r['run_id']}") for r in tree)
    assert followed == 3 * len(rows)
    # In the page, the link is an anchor.
    html = get(served, "/ledger/expensive_runs").text
    assert f'<a href="{rows[0]["trace"]}">' in html
    # A spawning tool call leads to its subagent's trace.
    team = next(r for r in ledger.runs() if r.parent_run_id is not None)
    spawns = [r for r in query(served, "run_trace", run_id=team.parent_run_id) if r["child_run_id"]]
    assert spawns and all(r["subagent_trace"].endswith(r["child_run_id"]) for r in spawns)


def test_a_link_leads_where_the_request_came_from(served, ledger):
    proxied = asyncio.run(
        served.client.get(
            "/ledger/expensive_runs.json",
            params={"_shape": "array"},
            headers={"host": "ledger.example", "x-forwarded-proto": "https"},
        )
    ).json()
    assert proxied[0]["trace"].startswith("https://ledger.example/ledger/run_trace?run_id=")


def test_the_canned_queries_hide_their_sql_until_asked(served, metadata):
    queries = metadata["databases"]["ledger"]["queries"]
    assert all(q["hide_sql"] is True for q in queries.values())
    page = get(served, "/ledger/run_tree", run_id="x").text.split("<body", 1)[1]
    assert "WITH RECURSIVE" not in page and "_show_sql=1" in page
    shown = get(served, "/ledger/run_tree", run_id="x", _show_sql="1").text.split("<body", 1)[1]
    assert "WITH RECURSIVE" in shown


def test_the_ledger_s_bookkeeping_and_search_index_tables_are_hidden(served):
    listed = {t["name"]: t["hidden"] for t in get(served, "/ledger.json").json()["tables"]}
    bookkeeping = {"agentledger_changes", "agentledger_deletions", "agentledger_version"}
    index = {
        name
        for name in listed
        if name.startswith(("conversation_messages_fts", "tool_executions_fts"))
    }
    assert index and {name for name, hidden in listed.items() if hidden} == bookkeeping | index


# --- every table and column is described, as the schema's documentation describes it -----------


def readme_sections() -> dict[str, list[str]]:
    text = (ROOT / "schema" / "README.md").read_text(encoding="utf-8")
    sections = {}
    for chunk in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading = re.match(r"`(\w+)`", chunk)
        if heading:
            sections[heading.group(1)] = chunk.splitlines()[1:]
    return sections


def as_text(markdown: str) -> str:
    return re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", markdown).replace("`", "").replace("*", "")


def test_each_documented_table_and_column_says_what_schema_readme_says(metadata):
    tables = metadata["databases"]["ledger"]["tables"]
    sections = readme_sections()
    assert set(sections) <= set(tables)
    for name, lines in sections.items():
        paragraph = " ".join(next(p for p in "\n".join(lines).split("\n\n") if p.strip()).split())
        assert tables[name]["description"].startswith(as_text(paragraph)), name
        rows = [line for line in lines if line.startswith("| `")]
        assert rows, name
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            referred = cells[2].startswith("as in ") or cells[2] == "see Conventions"
            meaning = "" if referred else as_text(cells[2])
            for column in re.findall(r"`(\w+)`", cells[0]):
                described = tables[name]["columns"][column]
                assert described and meaning in described, (name, column, described)


def test_a_column_documented_as_in_another_table_has_that_table_s_description(metadata):
    tables = metadata["databases"]["ledger"]["tables"]
    buffer, messages = tables["execution_buffer_rows"], tables["conversation_messages"]
    for column in ("role", "tool_calls", "tool_call_id", "name"):
        assert buffer["columns"][column] == messages["columns"][column]


def test_a_column_documented_in_the_conventions_has_the_convention_s_first_sentence(metadata):
    text = as_text((ROOT / "schema" / "README.md").read_text(encoding="utf-8"))
    for name, table in metadata["databases"]["ledger"]["tables"].items():
        if "checksum" in table["columns"]:
            described = table["columns"]["checksum"]
            assert described.startswith("Every table has a checksum (bigint, null): a CRC-32")
            assert described in " ".join(text.split()), name


def visible_tables(served: Datasette) -> dict[str, list[str]]:
    listed = get(served, "/ledger.json").json()["tables"]
    return {t["name"]: t["columns"] for t in listed if not t["hidden"]}


def test_every_table_and_column_datasette_shows_has_a_description(served, metadata):
    tables = metadata["databases"]["ledger"]["tables"]
    for name, columns in visible_tables(served).items():
        assert tables[name]["description"], name
        assert {c: bool(tables[name]["columns"].get(c)) for c in columns} == dict.fromkeys(
            columns, True
        ), name


def test_the_metadata_names_no_table_or_column_the_served_ledger_lacks(served, ledger_file):
    metadata = json.loads(metadata_of(ledger_file)[1])
    with sqlite3.connect(ledger_file) as conn:
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for name, table in metadata["databases"]["ledger"]["tables"].items():
            assert name in names
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({name})")}
            assert set(table["columns"]) <= columns, name
    listed = get(served, "/ledger.json").json()["queries"]
    assert [q["name"] for q in listed] == list(CANNED_QUERIES)


def test_datasette_s_pages_show_the_descriptions(served, metadata):
    tables = metadata["databases"]["ledger"]["tables"]
    page = get(served, "/ledger/agent_runs").text
    assert str(escape(tables["agent_runs"]["description"])) in page
    assert str(escape(tables["agent_runs"]["columns"]["root_run_id"])) in page
    search = get(served, "/ledger/search").text
    assert "Search the conversations" in search and 'name="query"' in search


# --- the command ------------------------------------------------------------------------------


def test_the_metadata_is_keyed_by_the_file_s_stem_as_datasette_names_it(ledger_file, tmp_path):
    served_file = tmp_path / "team-ledger.db"
    shutil.copyfile(ledger_file, served_file)
    code, output = metadata_of(served_file)
    assert code == 0, output
    metadata = json.loads(output)
    assert list(metadata["databases"]) == ["team-ledger"]
    datasette = Datasette([str(served_file)], metadata=metadata)
    assert query(datasette, "search", database="team-ledger", query="Lisbon")


def test_the_datasette_command_serves_the_ledger_with_the_metadata_file(ledger_file, tmp_path):
    """``datasette ledger.db -m metadata.json``, as a user runs it (``--get`` answers one
    request without starting a server)."""
    served_file, target = tmp_path / "ledger.db", tmp_path / "metadata.json"
    shutil.copyfile(ledger_file, served_file)
    assert metadata_of(served_file, "--output", str(target))[0] == 0
    datasette = Path(sys.executable).with_name("datasette")
    done = subprocess.run(
        [
            datasette,
            served_file,
            "-m",
            target,
            "--get",
            "/ledger/search.json?query=Lisbon&_shape=array",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and all("Lisbon" in row["content"] for row in rows)


def test_output_writes_the_metadata_to_a_file(ledger_file, tmp_path, metadata):
    target = tmp_path / "metadata.json"
    code, output = metadata_of(ledger_file, "--output", str(target))
    assert (code, output) == (0, "")
    assert json.loads(target.read_text(encoding="utf-8")) == metadata


@pytest.mark.parametrize(
    ("db", "says"),
    [
        ("postgresql://someone@localhost/ledger", "Datasette serves SQLite files"),
        ("sqlite://", "Datasette serves SQLite files"),
        ("{tmp}/missing.db", "no ledger at"),
    ],
)
def test_a_ledger_datasette_cannot_serve_is_refused_and_nothing_is_written(tmp_path, db, says):
    target = tmp_path / "metadata.json"
    result = CliRunner().invoke(
        cli, ["--db", db.format(tmp=tmp_path), "datasette-metadata", "--output", str(target)]
    )
    assert result.exit_code != 0
    assert says in " ".join(result.output.split())
    assert not target.exists() and not (tmp_path / "missing.db").exists()


def test_a_ledger_at_an_older_revision_is_refused_saying_to_upgrade(tmp_path):
    path = tmp_path / "old.db"
    migrate.upgrade(str(path), "0007")
    target = tmp_path / "metadata.json"
    code, output = metadata_of(path, "--output", str(target))
    assert code == 1
    assert "agentledger db upgrade" in output and not target.exists()
    assert migrate.current(str(path)) == "0007"  # only read


def test_neither_import_agentledger_nor_the_metadata_loads_datasette(ledger_file):
    script = (
        "import sys, agentledger\n"
        "loaded = 'datasette' in sys.modules\n"
        "from agentledger.integrations.datasette import datasette_metadata\n"
        "datasette_metadata()\n"
        "print(loaded, 'datasette' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "False"], done.stderr
