"""Row checksums and position checks: a damaged ledger gives an error, never a different answer.

On both backends: every row a real run writes carries the checksum of its covered columns (a
run once it ends); the canonical form reads the same whatever a backend gives back, so rows
written on one backend, or copied to the other, verify; one value changed with SQL makes the
public read of it raise ``LedgerCorruptError`` naming the table and the row, and
``Ledger.verify()`` lists exactly that row, while the columns the checksum leaves out (lease,
version, heartbeat) change freely; a row deleted from a sequence shows as an error too;
``agentledger db verify`` says all this on the command line; and revision 0003 seals the rows a
ledger already held.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import insert, select, text

import support.migration_harness as harness
from agentledger import AgentBuilder, ToolCall, tool
from agentledger.cli import cli
from agentledger.errors import LedgerCorruptError
from agentledger.ledger import Ledger
from agentledger.ledger.checksums import ADDED, COVERED, checksum, checksum_over
from agentledger.ledger.tables import (
    ADK_SESSION_TABLES,
    GRAPH_TABLES,
    STORE_TABLES,
    adk_states,
    agent_runs,
    context_compactions,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    metadata,
    step_executions,
    tool_executions,
)
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.clocks import FakeClock
from support.ledger import Database

TABLES = (
    conversations,
    agent_runs,
    conversation_messages,
    execution_buffer_rows,
    step_executions,
    tool_executions,
    context_compactions,
)
"""Parents first: the order rows can be inserted in."""

PLUS_TWO = timezone(timedelta(hours=2))
TRICKY: dict[str, Any] = {
    "z": {"b": 2.0, "a": 1e20, "c": [True, False, None]},
    "a": [1e23, 0.1, -0.0, 1.5e-7, "ü", 12345678901234567890],
    "m": {"y": {"x": 2.5e300}},
}
"""JSON whose keys come back reordered (JSONB sorts them) and whose integral floats come back as
integers (JSONB keeps numbers as decimals), next to booleans, NULLs and non-ASCII text."""


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


@tool
def measure(payload: dict[str, Any]) -> str:
    """Measure a payload."""
    return json.dumps(payload, sort_keys=True)


def weather(call_id: str, city: str) -> ToolCall:
    return ToolCall(id=call_id, name="get_weather", arguments={"city": city})


# --- a recorded ledger --------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    url: str
    conversation_id: str
    run_id: str
    """Three steps: two tool calls at once, one more, then the answer."""
    second_run_id: str
    """One step: the answer. The conversation's messages are seq 0..3."""
    running_conversation_id: str
    running_run_id: str
    """Stepped once and never ended: its checksum is NULL, its buffer holds two rows."""


def record(url: str) -> Recorded:
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=(weather("call_p", "Paris"), weather("call_l", "Lisbon")),
                usage={"input_tokens": 100, "output_tokens": 20, "reasoning_tokens": 3},
                cost_usd=0.002,
                reasoning="Two cities at once.",
                finish_reason="tool_calls",
            ),
            InferenceResponse(
                tool_calls=(weather("call_r", "Rome"),),
                usage={"input_tokens": 150, "output_tokens": 10},
                cost_usd=0.001,
                finish_reason="tool_calls",
            ),
            InferenceResponse(
                content="Sunny in Paris, Lisbon and Rome.",
                usage={"input_tokens": 200, "output_tokens": 30},
                cost_usd=0.003,
                finish_reason="stop",
            ),
            InferenceResponse(content="You are welcome.", finish_reason="stop"),
        ],
        model="scripted-model",
    )
    with Ledger.open(url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_tools([get_weather])
            .with_parallel_tools(2)
            .with_ledger(ledger)
            .build()
        )
        conversation = ledger.create_conversation(title="Weather", metadata={"channel": "test"})
        first = agent.run("Weather in Paris and Lisbon, then Rome?", conversation.id)
        second = agent.run("Thanks!", conversation.id)
        assert first.status == second.status == "completed"
        # A conversation summarized once: a summary, messages out of the context, compactions.
        summarized = ScriptedLLM(
            [InferenceResponse(content="They said hello.", usage={"input_tokens": 40})]
        )
        compacting = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Noted.")] * 2))
            .with_context_budget(10_000, keep_recent=2, summarizer=summarized)
            .with_ledger(ledger)
            .build()
        )
        hello = compacting.run("Hello.")
        compacting.run("Hello again.", hello.conversation_id)
        assert compacting.compact(hello.conversation_id, force=True) is not None
        running_conversation, running_run = harness.begin_stale_run(ledger)
    return Recorded(
        url=url,
        conversation_id=conversation.id,
        run_id=first.run_id,
        second_run_id=second.run_id,
        running_conversation_id=running_conversation,
        running_run_id=running_run,
    )


@pytest.fixture
def recorded(db_url: str) -> Recorded:
    return record(db_url)


@pytest.fixture
def database(recorded: Recorded) -> Iterator[Database]:
    opened = Database(recorded.url)
    yield opened
    opened.close()


def typed_rows(url: str, table: Any) -> list[dict[str, Any]]:
    """The rows of ``table`` read through the ledger's column types, outside the library."""
    database = Database(url)
    try:
        with database.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(table)).mappings()]
    finally:
        database.close()


def change(database: Database, sql: str, **params: Any) -> None:
    """One statement in a transaction of its own; on PostgreSQL with foreign keys not enforced
    (a damaged SQLite file does not enforce them either, and plain connections to SQLite do not
    turn them on)."""
    with database.engine.begin() as conn:
        if database.dialect == "postgresql":
            conn.execute(text("SET LOCAL session_replication_role = replica"))
        assert conn.execute(text(sql), params).rowcount == 1, sql


# --- every row is sealed ------------------------------------------------------------------------


def test_every_row_of_a_real_run_is_sealed_with_the_checksum_of_its_columns(recorded):
    unsealed: list[tuple[str, str]] = []
    for table in TABLES:
        rows = typed_rows(recorded.url, table)
        assert rows, f"the run left no rows in {table.name}"
        for row in rows:
            if row["checksum"] is None:
                unsealed.append((table.name, row["id"]))
            else:
                assert row["checksum"] == checksum(table, row), (table.name, row["id"])
    assert unsealed == [(agent_runs.name, recorded.running_run_id)]
    with Ledger.open(recorded.url, migrate=False, verify=True) as ledger:
        assert ledger.verify() == []


def test_a_run_is_sealed_when_it_ends_and_not_before(recorded):
    with Ledger.open(recorded.url, migrate=False) as ledger:
        assert ledger.recover(stale_after=0)
    (row,) = [r for r in typed_rows(recorded.url, agent_runs) if r["id"] == recorded.running_run_id]
    assert row["status"] == "interrupted"
    assert row["checksum"] == checksum(agent_runs, row)


def test_the_checksum_covers_all_but_the_checksum_lease_version_heartbeat_and_change_stamp():
    uncovered = {
        table.name: sorted(
            set(table.columns.keys()) - set(COVERED[table.name]) - set(ADDED.get(table.name, ()))
        )
        for table in TABLES
    }
    assert uncovered == {
        "conversations": [
            *("change_seq", "checksum", "lease_expires_at", "lease_holder", "lease_run_id"),
            *("updated_at", "version"),
        ],
        # change_seq (0008): the database's own stamp, set on every insert and update
        "conversation_messages": ["change_seq", "checksum"],
        "agent_runs": ["change_seq", "checksum", "heartbeat_at"],
        "execution_buffer_rows": ["checksum"],
        "step_executions": ["change_seq", "checksum"],
        "tool_executions": ["change_seq", "checksum"],
        "context_compactions": ["change_seq", "checksum"],
    }
    # Added after 0003: covered once they differ from their defaults (sealed rows still match).
    # tenant_id and owner_id (0010): NULL in every row written before, so no row was sealed again.
    assert ADDED == {
        "conversations": {"tenant_id": None, "owner_id": None},
        "conversation_messages": {
            "in_context": True,
            "summary_id": None,
            "interrupted": False,
            "tenant_id": None,
        },
        "agent_runs": {
            "partial_output": None,
            "partial_step_index": None,
            "cache_write_1h_tokens": 0,
            "tenant_id": None,
            "owner_id": None,
        },
        "execution_buffer_rows": {"tenant_id": None},
        "step_executions": {"cache_write_1h_tokens": 0, "tenant_id": None, "interrupted": False},
        "tool_executions": {"tenant_id": None},
        "context_compactions": {"cache_write_1h_tokens": 0, "tenant_id": None},
    }
    row = {c: None for c in COVERED["conversation_messages"]}
    same = checksum(conversation_messages, {**row, "in_context": True, "summary_id": None})
    assert checksum(conversation_messages, row) == same
    assert checksum(conversation_messages, {**row, "in_context": False}) != same
    assert checksum(conversation_messages, {**row, "summary_id": "s"}) != same
    assert checksum(conversation_messages, {**row, "interrupted": True}) != same
    assert checksum(conversation_messages, {**row, "tenant_id": "acme"}) != same


# --- the canonical form -------------------------------------------------------------------------

AT = datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)

SAME_VALUE = {
    "a time in another zone": (AT.astimezone(PLUS_TWO), AT),
    "JSON keys in another order": (
        {"b": 1, "a": {"d": [1, 2], "c": None}},
        {"a": {"c": None, "d": [1, 2]}, "b": 1},
    ),
    "an integral float": (2.0, 2),
    "an integral float in JSON": ({"x": [2.0, 1e20]}, {"x": [2, 100000000000000000000]}),
    "a large integral float in JSON, as JSONB gives it back": (
        {"x": 1e23},
        {"x": 10**23},
    ),
    "a huge integral float in JSON, as JSONB gives it back": ({"x": 2.5e300}, {"x": 25 * 10**299}),
    "a negative zero in JSON": ({"x": -0.0}, {"x": 0}),
    "a boolean, as an integer": (True, 1),
    "a tuple, as a JSON list": ({"x": (1, "a")}, {"x": [1, "a"]}),
    "JSON keys that are not text": ({1: "a", None: "b"}, {"1": "a", "null": "b"}),
}

OTHER_VALUE = {
    "text": ("x", "y"),
    "a number and its text": (1, "1"),
    "NULL and empty text": (None, ""),
    "NULL and a tilde": (None, "~"),
    "a fraction": (0.1, 0.2),
    "a time a microsecond later": (AT, AT + timedelta(microseconds=1)),
    "JSON and its text": ({"a": 1}, '{"a":1}'),
    "false and NULL": (False, None),
}


@pytest.mark.parametrize(("written", "read"), SAME_VALUE.values(), ids=list(SAME_VALUE))
def test_a_value_and_how_a_backend_gives_it_back_have_the_same_checksum(written, read):
    assert checksum_over(["v"], {"v": written}) == checksum_over(["v"], {"v": read})


@pytest.mark.parametrize(("one", "other"), OTHER_VALUE.values(), ids=list(OTHER_VALUE))
def test_different_values_have_different_checksums(one, other):
    assert checksum_over(["v"], {"v": one}) != checksum_over(["v"], {"v": other})


def test_the_canonical_form_is_pinned_so_existing_ledgers_keep_verifying():
    """A change of the canonical form makes every ledger already written look damaged: it
    needs a migration that seals the rows again."""
    row = {
        "id": "c1",
        "kind": "main",
        "title": "Trip",
        "parent_run_id": None,
        "created_at": AT.astimezone(PLUS_TWO),
        "metadata": {"b": {"c": 1e20}, "a": [1, 2.5, True, None, "ü"]},
        "version": 3,  # not covered
    }
    canonical = "\x1f".join(
        [
            "sc1",
            "smain",
            "sTrip",
            "~",
            "t2031-02-03T04:05:06.789012+00:00",
            'j{"a":[1,2.5,true,null,"ü"],"b":{"c":100000000000000000000}}',
        ]
    )
    assert checksum(conversations, row) == zlib.crc32(canonical.encode()) == 4116226375


def record_tricky(url: str) -> tuple[str, str]:
    """A conversation and a run holding TRICKY everywhere JSON goes, and times in +02:00:
    (conversation id, run id)."""
    start = datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=PLUS_TWO)
    clock = FakeClock(start=start, tick=timedelta(microseconds=1001))
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=(ToolCall(id="call_m", name="measure", arguments={"payload": TRICKY}),),
                usage={"input_tokens": 10},
                cost_usd=2.0,
                metadata={"provider": TRICKY},
            ),
            InferenceResponse(content="Measured.", cost_usd=1e-9, metadata={"n": 1e20}),
        ]
    )
    with Ledger.open(url, clock=clock) as ledger:
        agent = (
            AgentBuilder().with_llm(llm).with_tools([measure]).with_clock(clock).with_ledger(ledger)
        ).build()
        conversation = ledger.create_conversation(
            title="tricky", metadata=TRICKY, conversation_id="tricky-conversation"
        )
        result = agent.run("Measure this.", conversation.id)
        assert result.status == "completed", result.error
    return conversation.id, result.run_id


def public_view(ledger: Ledger, conversation_id: str, run_id: str) -> list[Any]:
    return [
        ledger.conversation(conversation_id).model_dump(exclude={"updated_at", "change_seq"}),
        [m.model_dump() for m in ledger.messages(conversation_id)],
        ledger.run(run_id).model_dump(exclude={"id", "root_run_id", "change_seq"}),
        [e.model_dump() for e in ledger.steps(run_id)],
        [t.model_dump() for t in ledger.tool_executions(run_id)],
    ]


def numbers_alike(value: Any) -> Any:
    """``value`` (JSON, and datetimes) with every number as a Decimal: 1e23 == 10**23."""
    dumped = json.dumps(value, default=str)
    return json.loads(dumped, parse_float=Decimal, parse_int=Decimal)


def test_values_whose_form_a_backend_changes_verify_as_written(db_url):
    conversation_id, run_id = record_tricky(db_url)

    with Ledger.open(db_url, migrate=False) as ledger:
        assert ledger.verify() == []
        public_view(ledger, conversation_id, run_id)  # no LedgerCorruptError
        read = ledger.conversation(conversation_id).metadata_
        assert numbers_alike(read) == numbers_alike(TRICKY)  # 1e23 may come back as 10**23
    (stored,) = typed_rows(db_url, conversations)
    as_written = {
        "id": conversation_id,
        "kind": "main",
        "title": "tricky",
        "parent_run_id": None,
        "created_at": datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=PLUS_TWO),
        "metadata": TRICKY,
    }
    # The same number on every backend: the checksum of the values as the caller gave them.
    assert stored["checksum"] == checksum(conversations, as_written)


def copy_rows(source: str, target: str) -> None:
    """Every row of ``source`` into ``target`` (a ledger at the same revision, empty), read and
    written through the ledger's column types, checksums included."""
    rows = {table.name: typed_rows(source, table) for table in TABLES}
    database = Database(target)
    try:
        with database.engine.begin() as conn:
            for table in TABLES:
                if rows[table.name]:
                    conn.execute(insert(table), rows[table.name])
    finally:
        database.close()


@pytest.mark.parametrize("direction", ["sqlite to postgresql", "postgresql to sqlite"])
def test_rows_copied_to_the_other_backend_keep_their_checksums(tmp_path, pg_url, direction):
    sqlite_url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    source, target = (
        (sqlite_url, pg_url) if direction == "sqlite to postgresql" else (pg_url, sqlite_url)
    )
    conversation_id, run_id = record_tricky(source)
    Ledger.open(target).close()

    copy_rows(source, target)

    with Ledger.open(source, migrate=False) as ledger:
        original = public_view(ledger, conversation_id, run_id)
    with Ledger.open(target, migrate=False) as ledger:
        assert ledger.verify() == []
        assert numbers_alike(public_view(ledger, conversation_id, run_id)) == numbers_alike(
            original
        )
    for table in TABLES:
        sums = {r["id"]: r["checksum"] for r in typed_rows(source, table)}
        assert {r["id"]: r["checksum"] for r in typed_rows(target, table)} == sums


# --- one value changed with SQL -----------------------------------------------------------------

Read = Callable[[Ledger, Recorded], object]

READS: dict[str, Read] = {
    "conversation": lambda ledger, r: ledger.conversation(r.conversation_id),
    "conversations": lambda ledger, r: ledger.conversations(),
    "messages": lambda ledger, r: ledger.messages(r.conversation_id),
    "load_conversation": lambda ledger, r: ledger.recorder.load_conversation(r.conversation_id),
    "run": lambda ledger, r: ledger.run(r.run_id),
    "runs": lambda ledger, r: ledger.runs(r.conversation_id),
    "all runs": lambda ledger, r: ledger.runs(),
    "run_tree": lambda ledger, r: ledger.run_tree(r.run_id),
    "steps": lambda ledger, r: ledger.steps(r.run_id),
    "trace_messages": lambda ledger, r: ledger.trace_messages(r.run_id),
    "tool_executions": lambda ledger, r: ledger.tool_executions(r.run_id),
    "run_result": lambda ledger, r: ledger.recorder.run_result(r.run_id),
    "buffer": lambda ledger, r: ledger.buffer(r.running_run_id),
}


def error_of(read: Read, ledger: Ledger, recorded: Recorded) -> str | None:
    """The message of the LedgerCorruptError ``read`` raises, or None if it reads."""
    try:
        read(ledger, recorded)
    except LedgerCorruptError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Change:
    table: str
    sql: str
    """Changes the row whose id is ``:id``."""
    row: str
    """SQL selecting that id, with ``:conversation``, ``:run`` and ``:running`` bound."""
    reads: tuple[str, ...]


MESSAGE_1 = "SELECT id FROM conversation_messages WHERE conversation_id = :conversation AND seq = 1"
STEP_1 = "SELECT id FROM step_executions WHERE run_id = :run AND step_index = 1"
TOOL_0_1 = "SELECT id FROM tool_executions WHERE run_id = :run AND step_index = 0 AND position = 1"
RUN = "SELECT id FROM agent_runs WHERE id = :run"
CONVERSATION = "SELECT id FROM conversations WHERE id = :conversation"

CHANGES = {
    "a message's content": Change(
        "conversation_messages",
        "UPDATE conversation_messages SET content = 'x' WHERE id = :id",
        MESSAGE_1,
        ("messages", "load_conversation"),
    ),
    "a message taken out of the context": Change(
        "conversation_messages",
        "UPDATE conversation_messages SET in_context = false WHERE id = :id",
        MESSAGE_1,
        ("messages",),
    ),
    "a step's output tokens": Change(
        "step_executions",
        "UPDATE step_executions SET output_tokens = output_tokens + 1 WHERE id = :id",
        STEP_1,
        ("steps", "trace_messages", "run_result"),
    ),
    "a tool's result": Change(
        "tool_executions",
        "UPDATE tool_executions SET result = 'x' WHERE id = :id",
        TOOL_0_1,
        ("tool_executions", "steps", "trace_messages"),
    ),
    "a finished run's cost": Change(
        "agent_runs",
        "UPDATE agent_runs SET cost_usd = 9.99 WHERE id = :id",
        RUN,
        ("run", "runs", "all runs", "run_tree", "steps"),
    ),
    "a conversation's title": Change(
        "conversations",
        "UPDATE conversations SET title = 'x' WHERE id = :id",
        CONVERSATION,
        ("conversation", "conversations", "messages", "runs"),
    ),
}


def row_id(database: Database, recorded: Recorded, sql: str) -> str:
    found = database.column(
        sql,
        conversation=recorded.conversation_id,
        run=recorded.run_id,
        running=recorded.running_run_id,
    )
    assert len(found) == 1, (sql, found)
    return str(found[0])


@pytest.mark.parametrize("change_", CHANGES.values(), ids=list(CHANGES))
def test_a_value_changed_with_sql_is_an_error_naming_its_row_and_verify_lists_it(
    recorded, database, change_
):
    damaged = row_id(database, recorded, change_.row)
    change(database, change_.sql, id=damaged)

    with Ledger.open(recorded.url, migrate=False) as ledger:
        errors = {name: error_of(READS[name], ledger, recorded) for name in change_.reads}
        problems = ledger.verify()
    for name, message in errors.items():
        assert message is not None, f"{name} read the damaged row without an error"
        assert damaged in message and change_.table in message, (name, message)
        assert "agentledger db verify" in message, (name, message)
    assert problems == [f"row {damaged!r} of {change_.table} does not match its checksum"]


def test_a_run_tree_summed_from_a_changed_step_row_is_an_error(recorded, database):
    """``run_tree``'s exclusive spend is summed from the step rows: one of them changed must
    not make it a different number."""
    damaged = row_id(database, recorded, STEP_1)
    change(database, "UPDATE step_executions SET output_tokens = 999 WHERE id = :id", id=damaged)

    with Ledger.open(recorded.url, migrate=False) as ledger:
        message = error_of(READS["run_tree"], ledger, recorded)
        spent = None if message else ledger.run_tree(recorded.run_id).exclusive.usage
    assert message is not None, f"run_tree read without an error, with {spent}"
    assert damaged in message and "step_executions" in message


UNCOVERED = {
    "a conversation's lease holder": (
        "UPDATE conversations SET lease_holder = 'someone else' WHERE id = :conversation",
        lambda ledger, r: ledger.conversation(r.conversation_id).lease_holder == "someone else",
    ),
    "a conversation's lease, version and update time": (
        "UPDATE conversations SET lease_run_id = :run, lease_expires_at = :at, "
        "version = version + 7, updated_at = :at WHERE id = :conversation",
        lambda ledger, r: ledger.conversation(r.conversation_id).lease_expires_at == AT,
    ),
    "a finished run's heartbeat": (
        "UPDATE agent_runs SET heartbeat_at = :at WHERE id = :run",
        lambda ledger, r: ledger.run(r.run_id).heartbeat_at == AT,
    ),
}


@pytest.mark.parametrize(("sql", "changed"), UNCOVERED.values(), ids=list(UNCOVERED))
def test_a_column_the_checksum_does_not_cover_changes_without_an_error(
    recorded, database, sql, changed
):
    # A time as each backend keeps it: naive UTC text on SQLite, timestamptz on PostgreSQL.
    at: Any = AT.replace(tzinfo=None).isoformat(sep=" ") if database.dialect == "sqlite" else AT
    change(database, sql, conversation=recorded.conversation_id, run=recorded.run_id, at=at)

    with Ledger.open(recorded.url, migrate=False) as ledger:
        assert changed(ledger, recorded)
        for read in READS.values():
            read(ledger, recorded)
        assert ledger.verify() == []


# --- a row deleted ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deletion:
    table: str
    row: str
    reads: tuple[str, ...]
    owner: str
    """Which id the problems verify() lists name: ``conversation``, ``run`` or ``running``."""


DELETIONS = {
    "a message from the middle of a conversation": Deletion(
        "conversation_messages", MESSAGE_1, ("messages", "load_conversation"), "conversation"
    ),
    "the first of a step's two tool executions": Deletion(
        "tool_executions",
        "SELECT id FROM tool_executions WHERE run_id = :run AND step_index = 0 AND position = 0",
        ("tool_executions", "steps", "trace_messages", "run_result"),
        "run",
    ),
    "the last of a step's two tool executions": Deletion(
        "tool_executions",
        TOOL_0_1,
        ("tool_executions", "steps", "trace_messages", "run_result"),
        "run",
    ),
    "a step from the middle of a run": Deletion(
        "step_executions", STEP_1, ("steps", "trace_messages", "run_result"), "run"
    ),
    "the last step of a run": Deletion(
        "step_executions",
        "SELECT id FROM step_executions WHERE run_id = :run AND step_index = 2",
        ("steps", "trace_messages", "run_result"),
        "run",
    ),
    "the first row of a run's buffer": Deletion(
        "execution_buffer_rows",
        "SELECT id FROM execution_buffer_rows WHERE run_id = :running AND seq = 0",
        ("buffer",),
        "running",
    ),
}


@pytest.mark.parametrize("deletion", DELETIONS.values(), ids=list(DELETIONS))
def test_a_row_deleted_with_sql_is_an_error_and_verify_reports_it(recorded, database, deletion):
    deleted = row_id(database, recorded, deletion.row)
    change(database, f"DELETE FROM {deletion.table} WHERE id = :id", id=deleted)
    owner = {
        "conversation": recorded.conversation_id,
        "run": recorded.run_id,
        "running": recorded.running_run_id,
    }[deletion.owner]

    with Ledger.open(recorded.url, migrate=False) as ledger:
        errors = {name: error_of(READS[name], ledger, recorded) for name in deletion.reads}
        problems = ledger.verify()
    silent = [name for name, message in errors.items() if message is None]
    assert not silent, f"read without an error: {silent}; verify() found {problems}"
    for name, message in errors.items():
        assert "agentledger db verify" in str(message), (name, message)
    assert any(owner in p for p in problems), f"verify() found {problems}"


# --- agentledger db verify ----------------------------------------------------------------------


def db_verify(url: str) -> Result:
    return CliRunner().invoke(cli, ["--db", url, "db", "verify"])


def test_db_verify_says_ok_and_what_it_checked_on_a_clean_ledger(recorded):
    result = db_verify(recorded.url)

    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: ")
    counted = "3 conversations, 10 conversation_messages, 5 agent_runs, 2 execution_buffer_rows"
    assert counted in result.output
    assert "1 without a checksum" in result.output
    assert "every checksum matches" in result.output


def test_db_verify_lists_a_damaged_row_and_exits_1(recorded, database):
    damaged = row_id(database, recorded, TOOL_0_1)
    change(database, "UPDATE tool_executions SET result = 'x' WHERE id = :id", id=damaged)

    result = db_verify(recorded.url)

    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"row {damaged!r} of tool_executions does not match its checksum"
    assert "restore it from a backup" in lines[-1].lower()
    assert "Traceback" not in result.output


def test_db_verify_on_a_missing_or_unreadable_file_is_a_one_line_error(tmp_path):
    missing = db_verify(str(tmp_path / "missing.db"))
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    unreadable = db_verify(str(garbage))

    for result in (missing, unreadable):
        assert result.exit_code == 1
        assert result.output.startswith("Error: ")
        assert "Traceback" not in result.output
    assert "agentledger db upgrade" in missing.output
    assert "garbage.db" in unreadable.output
    assert not (tmp_path / "missing.db").exists()


# --- revision 0003 seals the rows already there -------------------------------------------------


def test_revision_0003_seals_the_rows_a_ledger_already_held(db_url, tmp_path):
    with harness.representative_source(tmp_path) as (rows, ids):
        harness.migrate(db_url, "0002")
        with harness.Database(db_url) as database:
            assert "checksum" not in database.columns()["conversations"]
            database.insert(rows)

    harness.migrate(db_url, "head")

    unsealed = [
        (table.name, row["id"])
        for table in TABLES
        for row in typed_rows(db_url, table)
        if row["checksum"] is None
    ]
    assert unsealed == [("agent_runs", ids["stale_run"])]
    for table in TABLES:
        for row in typed_rows(db_url, table):
            if row["checksum"] is not None:
                assert row["checksum"] == checksum(table, row), (table.name, row["id"])
    with Ledger.open(db_url, migrate=False, verify=True) as ledger:
        assert ledger.verify() == []
        for name in ("trip", "inline", "failed", "stale"):
            ledger.messages(ids[name])
            for run in ledger.runs(ids[name]):
                ledger.steps(run.id)
                ledger.tool_executions(run.id)
                ledger.buffer(run.id)


def test_the_tables_checked_here_are_every_table_of_the_ledger():
    # 0008's stamps, and 0010's log of what was forgotten (ids and counts, no content)
    data = set(metadata.tables) - {"agentledger_changes", "agentledger_deletions", "forget_log"}
    # the graph checkpoint tables' damage is checked in tests/test_langgraph_saver.py, the
    # stored conversations' in tests/test_pydantic_ai_store.py, the sessions' in
    # tests/test_adk_sessions.py
    framework = {t.name for t in (*GRAPH_TABLES, *STORE_TABLES, *ADK_SESSION_TABLES, adk_states)}
    assert {t.name for t in TABLES} | framework == data == set(COVERED)
