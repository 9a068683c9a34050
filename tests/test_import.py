"""``agentledger import``: an Agents SDK ``SQLiteSession`` file and an ``llm`` logs database,
each made by its own library (llm logging responses of a model of this test's, offline),
imported through ``ledger.turn`` and checked with SQL on SQLite and PostgreSQL: the
conversation kept apart from the trace, usage and cost, tool executions, the file's times, a
second import adding nothing, a dry run writing nothing, and a wrong file refused."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import llm
import pytest
import sqlite_utils
from agents import SQLiteSession
from click.testing import CliRunner
from llm.migrations import MIGRATIONS

from agentledger.cli import cli
from agentledger.errors import ImportSourceError
from agentledger.importing import import_history, recognise
from agentledger.ledger import Ledger
from support.databases import BACKENDS
from support.invariants import violations
from support.ledger import Database

SQLITE_ONLY = pytest.mark.parametrize("db_url", BACKENDS[:1], indirect=True)

WEATHER_TURN: list[Any] = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"type": "reasoning", "id": "rs1", "summary": [{"type": "summary_text", "text": "Look."}]},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "22C, sunny"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Sunny, 22C."}],
    },
]
THANKS_TURN: list[Any] = [
    {"role": "user", "content": "Thanks!"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Bye."}]},
]


def sdk_file(path: Path, sessions: dict[str, list[Any]]) -> Path:
    """A SQLiteSession file, written by the SDK's own session."""

    async def write() -> None:
        for session_id, items in sessions.items():
            await SQLiteSession(session_id, path).add_items(items)

    asyncio.run(write())
    return path


class Forecaster(llm.Model):
    """A model of this test's: it calls get_weather when asked about the weather, answers
    with what the tool returned, and greets otherwise; its usage as a provider reports it."""

    model_id = "gpt-4o-mini"
    supports_tools = True

    def execute(self, prompt: Any, stream: bool, response: Any, conversation: Any) -> Any:
        if prompt.tool_results:
            yield f"It is {prompt.tool_results[0].output}."
            response.set_usage(input=300, output=7)
        elif prompt.tools and "weather" in (prompt.prompt or ""):
            call = llm.ToolCall(name="get_weather", arguments={"city": "Paris"}, tool_call_id="t1")
            response.add_tool_call(call)
            response.set_usage(input=200, output=12)
        else:
            yield "Hello!"
            response.set_usage(input=100, output=3)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"22C in {city}"


def llm_logs(path: Path) -> Path:
    """An llm logs database, logged by llm's own code: one conversation of two prompts (the
    second one a tool chain of two model calls) and a prompt of its own."""
    db = sqlite_utils.Database(path)
    model = Forecaster()
    conversation = model.conversation()
    greeting = conversation.prompt("hi")
    greeting.text()
    greeting.log_to_db(db)
    for response in conversation.chain("what's the weather?", tools=[get_weather]).responses():
        response.text()
        response.log_to_db(db)
    alone = model.prompt("hello again")
    alone.text()
    alone.log_to_db(db)
    db.close()
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sources")
    return {
        "agents-sdk": sdk_file(folder / "sessions.db", {"user-42": WEATHER_TURN + THANKS_TURN}),
        "llm": llm_logs(folder / "logs.db"),
    }


def messages(db: Database, conversation_id: str) -> list[tuple[str, str]]:
    rows = db.rows(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = :id ORDER BY seq",
        id=conversation_id,
    )
    return [(r["role"], r["content"]) for r in rows]


def as_json(value: Any) -> Any:
    """A JSON column as either backend gives it back (SQLite: text)."""
    return json.loads(value) if isinstance(value, str) else value


def utc(value: datetime | str) -> datetime:
    """A time as either backend gives it back (SQLite: text), in UTC."""
    value = datetime.fromisoformat(value) if isinstance(value, str) else value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def test_an_agents_sdk_session_is_a_conversation_and_its_tool_calls_the_trace(
    ledger: Ledger, db: Database, db_url: str, sources: dict[str, Path]
) -> None:
    summary = import_history(ledger, sources["agents-sdk"])

    assert (summary.kind, summary.conversations, summary.turns) == ("agents-sdk", 1, 2)
    assert (summary.steps, summary.tool_executions, summary.usage_recorded) == (3, 1, False)
    conversation = db.row("SELECT * FROM conversations")
    assert conversation["title"] == "user-42"
    assert as_json(conversation["metadata"]) == {
        "imported_from": "agents-sdk",
        "source_id": "user-42",
    }
    assert messages(db, conversation["id"]) == [
        ("user", "What's the weather in Paris?"),
        ("assistant", "Sunny, 22C."),
        ("user", "Thanks!"),
        ("assistant", "Bye."),
    ]
    runs = db.rows("SELECT * FROM agent_runs ORDER BY started_at, id")
    assert [(r["status"], r["step_count"], r["cost_usd"]) for r in runs] == [
        ("completed", 2, None),
        ("completed", 1, None),
    ]
    tool = db.row("SELECT * FROM tool_executions")
    assert (tool["tool_name"], tool["result"], bool(tool["is_error"])) == (
        "get_weather",
        "22C, sunny",
        False,
    )
    assert as_json(tool["arguments"]) == {"city": "Paris"}
    reasoning = db.scalar("SELECT reasoning FROM step_executions WHERE step_index = 0")
    assert reasoning == "Look."
    stored = sqlite3.connect(sources["agents-sdk"]).execute(
        "SELECT min(created_at) FROM agent_messages"
    )
    written = datetime.fromisoformat(stored.fetchone()[0]).replace(tzinfo=UTC)
    assert utc(runs[0]["started_at"]) == written  # the file's time, not the import's
    assert violations(db_url) == []


def test_an_llm_conversation_keeps_its_tool_chain_in_one_turn_with_usage_and_cost(
    ledger: Ledger, db: Database, db_url: str, sources: dict[str, Path]
) -> None:
    summary = import_history(ledger, sources["llm"])

    assert (summary.kind, summary.conversations, summary.turns, summary.steps) == ("llm", 2, 3, 4)
    chat = db.row("SELECT * FROM conversations WHERE title = 'hi'")
    assert messages(db, chat["id"]) == [
        ("user", "hi"),
        ("assistant", "Hello!"),
        ("user", "what's the weather?"),
        ("assistant", "It is 22C in Paris."),
    ]
    weather = db.rows(
        "SELECT * FROM agent_runs WHERE conversation_id = :id ORDER BY started_at DESC",
        id=chat["id"],
    )[0]
    assert (weather["step_count"], weather["input_tokens"], weather["output_tokens"]) == (
        2,
        500,
        19,
    )
    steps = db.rows(
        "SELECT input_tokens, cost_usd, model FROM step_executions WHERE run_id = :id "
        "ORDER BY step_index",
        id=weather["id"],
    )
    assert [(s["input_tokens"], s["model"]) for s in steps] == [
        (200, "gpt-4o-mini"),
        (300, "gpt-4o-mini"),
    ]
    assert all(s["cost_usd"] > 0 for s in steps)  # priced from the table for its model
    tool = db.row("SELECT * FROM tool_executions WHERE run_id = :id", id=weather["id"])
    assert (tool["tool_call_id"], tool["result"]) == ("t1", "22C in Paris")
    assert violations(db_url) == []


@SQLITE_ONLY
def test_a_second_import_adds_nothing_and_a_grown_file_only_its_new_turns(
    ledger: Ledger, db: Database, tmp_path: Path
) -> None:
    source = sdk_file(tmp_path / "sessions.db", {"user-42": WEATHER_TURN})
    import_history(ledger, source)
    tables = ["conversations", "conversation_messages", "agent_runs", "step_executions"]
    before = {table: db.count(table) for table in tables}

    again = import_history(ledger, source)

    assert (again.turns, again.skipped) == (0, 1)
    assert {table: db.count(table) for table in tables} == before
    sdk_file(source, {"user-42": THANKS_TURN})
    grown = import_history(ledger, source)
    assert (grown.turns, grown.skipped, db.count("conversations")) == (1, 1, 1)
    assert db.count("conversation_messages") == before["conversation_messages"] + 2


@SQLITE_ONLY
def test_a_dry_run_counts_what_would_be_imported_and_writes_nothing(
    db_url: str, tmp_path: Path, sources: dict[str, Path]
) -> None:
    runner = CliRunner()
    missing = tmp_path / "new.db"
    preview = runner.invoke(
        cli, ["--db", str(missing), "import", str(sources["llm"]), "--dry-run", "--json"]
    )
    assert preview.exit_code == 0, preview.output
    assert not missing.exists()
    counted = json.loads(preview.output)
    assert (counted["dry_run"], counted["turns"], counted["steps"]) == (True, 3, 4)

    done = runner.invoke(cli, ["--db", str(missing), "import", str(sources["llm"])])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("Imported 3 turns (4 steps, 1 tool execution) in 2")
    size = missing.stat().st_size
    again = runner.invoke(cli, ["--db", str(missing), "import", str(sources["llm"]), "--dry-run"])
    assert "Would import 0 turns" in again.output and "3 turns already imported" in again.output
    assert missing.stat().st_size == size


@SQLITE_ONLY
def test_a_tenant_and_owner_get_the_imported_conversations(
    db_url: str, tmp_path: Path, sources: dict[str, Path]
) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            db_url,
            "import",
            str(sources["agents-sdk"]),
            "--tenant",
            "acme",
            "--owner",
            "ann",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "the file records no token usage" in result.output
    with Ledger.open(db_url) as ledger:
        assert [c.title for c in ledger.scoped("acme", "ann").conversations()] == ["user-42"]
        assert ledger.scoped("other").conversations() == []


@SQLITE_ONLY
def test_progress_is_reported_on_long_imports(db_url: str, tmp_path: Path) -> None:
    sessions = {f"s{n:02}": THANKS_TURN for n in range(50)}
    source = sdk_file(tmp_path / "many.db", sessions)
    result = CliRunner().invoke(cli, ["--db", db_url, "import", str(source), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "read 50 of 50 conversations" in result.stderr


def text_file(path: Path) -> Path:
    path.write_text("not a database")
    return path


def sqlite_file(path: Path, tables: dict[str, dict[str, type]]) -> Path:
    db = sqlite_utils.Database(path)
    for name, columns in tables.items():
        db[name].create(columns)
    db.close()
    return path


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("make", "kind", "said"),
    [
        (text_file, None, "is not a SQLite database"),
        (
            lambda p: sqlite_file(p, {"notes": {"id": int, "text": str}}),
            None,
            "it is a SQLite file with the tables notes",
        ),
        (
            lambda p: sqlite_file(
                p,
                {
                    "checkpoints": {
                        "thread_id": str,
                        "checkpoint_ns": str,
                        "checkpoint_id": str,
                        "checkpoint": bytes,
                    },
                    "writes": {"thread_id": str, "checkpoint_id": str, "task_id": str},
                },
            ),
            None,
            "is a LangGraph SqliteSaver file of an older langgraph-checkpoint-sqlite .its "
            "checkpoints table has no type",
        ),
        (
            lambda p: sdk_file(p, {"s": THANKS_TURN}),
            "llm",
            "is not an llm logs database: it is an OpenAI Agents SDK SQLiteSession file",
        ),
    ],
)
def test_a_file_of_another_kind_is_refused_naming_what_it_is(
    ledger: Ledger, db: Database, tmp_path: Path, make: Any, kind: str | None, said: str
) -> None:
    path = make(tmp_path / "source.db")
    with pytest.raises(ImportSourceError, match=said):
        import_history(ledger, path, kind=kind)
    assert db.count("conversations") == 0


def test_a_file_it_cannot_import_is_refused_before_a_ledger_is_made_for_it(tmp_path: Path) -> None:
    target, source = tmp_path / "new.db", text_file(tmp_path / "notes.txt")
    refused = CliRunner().invoke(cli, ["--db", str(target), "import", str(source)])
    assert refused.exit_code == 1
    assert "is not a SQLite database" in refused.output
    assert not target.exists()
    assert recognise(sdk_file(tmp_path / "s.db", {"s": THANKS_TURN})) == "agents-sdk"


@SQLITE_ONLY
def test_an_llm_database_of_a_newer_llm_is_refused_naming_its_migrations(
    ledger: Ledger, tmp_path: Path, sources: dict[str, Path]
) -> None:
    path = tmp_path / "newer.db"
    path.write_bytes(sources["llm"].read_bytes())
    newer = sqlite_utils.Database(path)
    newer["_llm_migrations"].insert({"name": "m028_future", "applied_at": "2030-01-01"})
    newer.close()
    with pytest.raises(ImportSourceError, match=r"newer llm .* m028_future"):
        import_history(ledger, path)


@SQLITE_ONLY
def test_llm_logs_of_before_0_36_are_read_from_the_responses_table(
    ledger: Ledger, db: Database, tmp_path: Path
) -> None:
    """llm up to 0.35 logged to ``responses``: the schema made by llm's own migrations of
    then, the rows written as those versions wrote them (that code is no longer installed)."""
    logs = sqlite_utils.Database(tmp_path / "old.db")
    for migration in MIGRATIONS[: [m.__name__ for m in MIGRATIONS].index("m023_message_store")]:
        migration(logs)
        logs["_llm_migrations"].insert({"name": migration.__name__, "applied_at": "2025-01-01"})
    logs["conversations"].insert({"id": "c1", "name": "weather", "model": "gpt-4o-mini"})
    base = {"model": "gpt-4o-mini", "conversation_id": "c1", "duration_ms": 1000}
    logs["responses"].insert_all(
        [
            {**base, "id": "r1", "prompt": "weather?", "response": "", "input_tokens": 50,
             "output_tokens": 5, "datetime_utc": "2025-01-02T10:00:00"},
            {**base, "id": "r2", "prompt": None, "response": "Sunny.", "input_tokens": 60,
             "output_tokens": 2, "datetime_utc": "2025-01-02T10:00:02"},
        ]
    )  # fmt: skip
    logs["tools"].insert({"id": 1, "hash": "h", "name": "get_weather"})
    logs["tool_calls"].insert(
        {"response_id": "r1", "tool_id": 1, "name": "get_weather", "arguments": "{}",
         "tool_call_id": "k1"}
    )  # fmt: skip
    logs["tool_results"].insert(
        {"response_id": "r2", "tool_id": 1, "name": "get_weather", "output": "sun",
         "tool_call_id": "k1"}
    )  # fmt: skip
    logs.close()

    summary = import_history(ledger, tmp_path / "old.db")

    assert (summary.turns, summary.steps, summary.tool_executions) == (1, 2, 1)
    run = db.row("SELECT * FROM agent_runs")
    assert (run["input_tokens"], run["status"]) == (110, "completed")
    assert utc(run["started_at"]) == datetime(2025, 1, 2, 10, tzinfo=UTC)
    assert utc(run["finished_at"]) == datetime(2025, 1, 2, 10, 0, 3, tzinfo=UTC)
    assert db.scalar("SELECT result FROM tool_executions") == "sun"
