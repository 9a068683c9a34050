"""A harness for the ledger's migrations, reused by every revision.

For each revision R with a predecessor P (read from the packaged Alembic scripts, so a new
revision is picked up without touching the tests), ``check_upgrade_keeps_rows`` migrates a
fresh database to P, fills every table that exists at P with representative rows, upgrades to
R and checks that every row is still there, value for value.

The representative rows come from real agents recorded by the ledger at the newest schema
(``record_representative_runs``): two turns with tool calls, a tool error and reasoning; an
inline-trace conversation; a run whose model failed; a run whose process "died" after a step
(it keeps its lease and buffer rows). Columns that no run fills are then given a value by SQL
(``fill_empty_columns``), so that every column of every table holds something. Copied into a
database at P, they are projected onto P's columns: a column P has that a later revision dropped
because other columns keep its information (``RETIRED``) gets the value it would have held,
rebuilt from the rows; any other column P has and the newest schema does not gets a value made
from its type; and every checksum is computed again as P's code wrote it.

A revision that drops a retired column must keep its information: after the upgrade the value
can still be rebuilt from the rows, and the downgrade restores it exactly.

Migrations are driven through ``agentledger db upgrade|downgrade`` (the command line a user
runs), and rows are read and written with plain SQL on connections of the harness's own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from click.testing import CliRunner
from pydantic import JsonValue
from sqlalchemy import (
    Engine,
    MetaData,
    Table,
    column,
    create_engine,
    inspect,
    null,
    select,
    text,
    update,
)
from sqlalchemy import types as sqltypes

from agentledger import AgentBuilder, AgentState, Message, Role, ToolCall, tool
from agentledger._values import new_id
from agentledger.cli import cli
from agentledger.ledger import (
    Appended,
    ChannelValue,
    CheckpointKey,
    Ledger,
    PendingWrite,
    SessionKey,
    StateDelta,
    StoredCheckpoint,
    StoredEntry,
    StoredEvent,
    StoredRecord,
)
from agentledger.ledger import tables as ledger_tables
from agentledger.ledger.checksums import ADDED, COVERED, canonical_json, checksum_over
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.sqlalchemy_urls import sqlalchemy_url

VERSION_TABLE = "agentledger_version"
FTS_PREFIX = "conversation_messages_fts"
"""Full-text search objects: made by the migrations, not described by the models."""
TRACE_FTS = "tool_executions_fts"
"""The trace's full-text search objects (revision 0013)."""
FTS_PREFIXES = (FTS_PREFIX, TRACE_FTS)
ID_PREFIX_INDEXES = ("conversations_id_prefixes", "agent_runs_id_prefixes")
"""PostgreSQL's indexes of ids in the order of their bytes (revision 0017): made by the
migrations, not described by the models."""

SEARCH_WORD = "marmalade"
"""A word only the answers of the representative runs contain (full-text search finds it)."""

STALE_USER_TEXT = "Plan a trip to Porto, please."

UNKNOWN_ID = "01900000-0000-7000-8000-000000000000"
"""A well-formed id that no ledger holds."""

# --- revisions --------------------------------------------------------------------------------


def script_directory() -> ScriptDirectory:
    """The migrations the installed agentledger ships."""
    with as_file(files("agentledger") / "migrations") as location:
        return ScriptDirectory(str(location))


def revisions() -> list[str]:
    """Every revision, oldest first."""
    return [script.revision for script in reversed(list(script_directory().walk_revisions()))]


def head() -> str:
    heads = script_directory().get_heads()
    assert len(heads) == 1, f"the migrations have {len(heads)} heads: {heads}"
    return heads[0]


def predecessor(revision: str) -> str | None:
    down = script_directory().get_revision(revision).down_revision
    assert not isinstance(down, tuple), f"{revision} is a merge revision: {down}"
    return down


def upgrade_steps() -> list[tuple[str, str]]:
    """``(P, R)`` for every revision R that has a predecessor P, oldest first."""
    return [(p, r) for r in revisions() if (p := predecessor(r)) is not None]


def migrate(url: str, revision: str, *, direction: str = "upgrade") -> str:
    """``agentledger --db URL db upgrade|downgrade REVISION``; its output."""
    result = CliRunner().invoke(cli, ["--db", url, "db", direction, revision])
    assert result.exit_code == 0, f"db {direction} {revision}: {result.output}{result.exception!r}"
    return result.output


# --- plain SQL on the database ------------------------------------------------------------------


Rows = dict[str, list[dict[str, Any]]]


class Database:
    """SQL straight on a ledger's database, through an engine of the harness's own."""

    def __init__(self, url: str | Path) -> None:
        self.url = str(url)
        # JSON written as the ledger writes it (its canonical text), so a row a migration
        # writes back is the row the harness wrote, to the byte.
        self.engine: Engine = create_engine(sqlalchemy_url(url), json_serializer=canonical_json)
        self.dialect = self.engine.dialect.name

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine.dispose()

    def table_names(self) -> list[str]:
        """The ledger's tables: without the version table, the full-text search objects and
        the change bookkeeping (revision 0008: stamps the database makes, not data)."""
        names = inspect(self.engine).get_table_names()
        return sorted(
            n
            for n in names
            if n != VERSION_TABLE and not n.startswith(FTS_PREFIXES) and n not in CHANGE_TABLES
        )

    def all_table_names(self) -> list[str]:
        return sorted(inspect(self.engine).get_table_names())

    def columns(self) -> dict[str, list[str]]:
        """The columns of the ledger's tables, without the change stamps (``change_seq``)."""
        inspector = inspect(self.engine)
        return {
            t: [c["name"] for c in inspector.get_columns(t) if c["name"] != CHANGE_COLUMN]
            for t in self.table_names()
        }

    def reflect(self) -> MetaData:
        metadata = MetaData()
        metadata.reflect(self.engine, only=self.table_names())
        return metadata

    def versions(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r for (r,) in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def count(self, table: str) -> int:
        return int(self.scalar(f'SELECT COUNT(*) FROM "{table}"'))

    def counts(self) -> dict[str, int]:
        return {t: self.count(t) for t in self.table_names()}

    def snapshot(self, columns: Mapping[str, Sequence[str]] | None = None) -> Rows:
        """Every row of every table (or of ``columns``' tables, with only those columns) as the
        database driver returns it, in a stable order: what "unchanged" is measured against."""
        wanted = dict(columns) if columns is not None else self.columns()
        snapshot: Rows = {}
        with self.engine.connect() as conn:
            for table, names in sorted(wanted.items()):
                listed = ", ".join(f'"{n}"' for n in names)
                rows = [
                    dict(r)
                    for r in conn.execute(text(f'SELECT {listed} FROM "{table}"')).mappings()
                ]
                snapshot[table] = sorted(rows, key=_sort_key)
        return snapshot

    def typed_rows(self) -> Rows:
        """Every row of the models' tables, read through the models' column types (times
        timezone-aware, JSON decoded, booleans as bool): fit to be written to any backend."""
        rows: Rows = {}
        present = self.columns()  # an older revision lacks the columns added since
        with self.engine.connect() as conn:
            for table in ledger_tables.metadata.sorted_tables:
                if table.name in present:
                    have = [c for c in table.columns if c.name in present[table.name]]
                    found = conn.execute(select(*have)).mappings()
                    rows[table.name] = [dict(r) for r in found]
        return rows

    def insert(self, rows: Rows) -> None:
        """Write ``rows`` into the tables this database has (at whatever revision it is),
        projected onto their columns (a retired column rebuilt from the rows, a NOT NULL column
        the rows lack given a made-up value), and sealed as that revision's code seals them."""
        metadata = self.reflect()
        with self.engine.begin() as conn:
            for table in metadata.sorted_tables:
                given = rows.get(table.name, [])
                projected = [_project(table, row, rows) for row in given]
                if projected:
                    conn.execute(table.insert(), _parents_first(table, projected))
            _reseal(conn, metadata)

    def fill_empty_columns(
        self, skip: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, list[str]]:
        """Give every nullable column that is NULL in every row a value in one row, so the data
        exercises every column (but those in ``skip``); what was filled, by table."""
        metadata = self.reflect()
        filled: dict[str, list[str]] = {}
        with self.engine.begin() as conn:
            for table in metadata.sorted_tables:
                pk = list(table.primary_key.columns)
                first = conn.execute(select(*pk).order_by(*pk).limit(1)).first()
                if first is None:
                    continue
                for column in table.columns:
                    if column.name in (skip or {}).get(table.name, ()):
                        continue
                    if _holds_a_value(conn, column):
                        continue
                    value = _value_for(conn, table, column, own_id=first[0])
                    where = [c == v for c, v in zip(pk, first, strict=True)]
                    conn.execute(update(table).where(*where).values({column.name: value}))
                    filled.setdefault(table.name, []).append(column.name)
            _reseal(conn, metadata)
        return filled

    def empty_columns(self) -> dict[str, list[str]]:
        """Columns without a value in any row (a JSON ``null`` counts as none), by table."""
        empty: dict[str, list[str]] = {}
        with self.engine.connect() as conn:
            for table in self.reflect().sorted_tables:
                for column in table.columns:
                    if not _holds_a_value(conn, column):
                        empty.setdefault(table.name, []).append(column.name)
        return empty


def _reseal(conn: Any, reflected: MetaData) -> None:
    """Checksums again for the rows that have one, as the ledger's code at this database's
    revision would have written them: over the columns the table has (those the newest
    checksum covers, and the retired ones), in the table's order, with the added ones that
    differ from their defaults (at revisions that have the column at all)."""
    for name, reflected_table in reflected.tables.items():
        if name not in COVERED or "checksum" not in reflected_table.columns:
            continue
        names = [c.name for c in reflected_table.columns]
        covered = [n for n in names if n in COVERED[name] or (name, n) in RETIRED]
        added = [n for n in ADDED.get(name, {}) if n in names]
        typed = [_typed_column(name, n) for n in names]
        query = select(*typed).select_from(reflected_table).where(column("checksum").is_not(None))
        for row in conn.execute(query).mappings():
            changed = [(n, row[n]) for n in added if row[n] != ADDED[name][n]]
            conn.execute(
                update(reflected_table)
                .where(reflected_table.c.id == row["id"])
                .values(checksum=checksum_over(covered, row, changed))
            )


def _typed_column(table: str, name: str) -> Any:
    """Column ``name`` of ``table`` read through the type the ledger gives it (a retired column
    through the type it had), as checksums need it."""
    model = ledger_tables.metadata.tables[table]
    if name in model.c:
        return column(name, model.c[name].type)
    retired = RETIRED.get((table, name))
    return column(name, retired.type if retired else sqltypes.NullType())


def _holds_a_value(conn: Any, column: Any) -> bool:
    """Whether some row has a value in ``column``: read through its type, so that a JSON
    ``null`` is no value either."""
    return any(v is not None for v in conn.execute(select(column)).scalars())


def restrict(snapshot: Rows, columns: Mapping[str, Sequence[str]]) -> Rows:
    """``snapshot`` with only ``columns`` (and their tables), ordered as ``snapshot()`` orders."""
    return {
        table: sorted(
            ({name: row[name] for name in names} for row in snapshot[table]), key=_sort_key
        )
        for table, names in sorted(columns.items())
    }


def _sort_key(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=repr)


def _project(table: Table, row: Mapping[str, Any], rows: Rows) -> dict[str, Any]:
    projected = {c.name: row[c.name] for c in table.columns if c.name in row}
    for col in table.columns:
        retired = RETIRED.get((table.name, col.name))
        if col.name in projected:
            continue
        if retired is not None:  # no value is SQL NULL, as the ledger wrote it (not JSON null)
            value = retired.rebuild(rows, row)
            projected[col.name] = null() if value is None else value
        elif not col.nullable and col.server_default is None:
            projected[col.name] = _made_up(col.type, col.name)
    return projected


# --- columns dropped because others keep their information --------------------------------------


def tool_calls_of(rows: Rows, step: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``step_executions.tool_calls`` as revisions before 0005 held it: the step's calls, as
    its tool rows hold them (``metadata.raw_arguments`` for arguments that were not JSON)."""
    tools = sorted(
        (t for t in rows["tool_executions"] if t["step_id"] == step["id"]),
        key=lambda t: t["position"],
    )
    calls = []
    for tool_row in tools:
        call = {
            "id": tool_row["tool_call_id"],
            "name": tool_row["tool_name"],
            "arguments": tool_row["arguments"] or {},
        }
        raw = (tool_row["metadata"] or {}).get("raw_arguments")
        if raw is not None:
            call["raw_arguments"] = raw
        calls.append(call)
    return calls or None


@dataclass(frozen=True)
class Retired:
    """A column a revision dropped because other columns keep its information."""

    revision: str
    """The revision that dropped it."""
    type: Any
    rebuild: Callable[[Rows, Mapping[str, Any]], Any]
    """Its value in a row, from the rows of every table (typed, as ``typed_rows`` reads them)."""


RETIRED = {
    ("step_executions", "tool_calls"): Retired("0005", ledger_tables.JSONType, tool_calls_of),
}
"""Columns dropped because other columns keep their information, by (table, column)."""

RESEALED = {"0005": {"step_executions"}}
"""Revisions that compute the checksums of a table's rows again (its columns changed)."""


def retired_by(revision: str) -> set[tuple[str, str]]:
    return {key for key, retired in RETIRED.items() if retired.revision == revision}


def rewritten_by(revision: str) -> set[tuple[str, str]]:
    """The columns a revision changes the values of, in rows it keeps."""
    return {(table, "checksum") for table in RESEALED.get(revision, set())}


def rewritten_between(older: str, newer: str) -> set[tuple[str, str]]:
    """The columns the revisions after ``older`` up to ``newer`` change the values of."""
    return {pair for revision in _span(older, newer) for pair in rewritten_by(revision)}


def unchanged_between(
    columns: Mapping[str, Sequence[str]], older: str, newer: str
) -> dict[str, list[str]]:
    """``columns`` (a database's at ``older``) without those that the revisions after ``older``
    up to ``newer`` retire or change the values of: what an upgrade leaves as it was."""
    changed = {pair for r in _span(older, newer) for pair in retired_by(r) | rewritten_by(r)}
    return {t: [c for c in names if (t, c) not in changed] for t, names in columns.items()}


def _span(older: str, newer: str) -> list[str]:
    order = revisions()
    return order[order.index(older) + 1 : order.index(newer) + 1]


def _parents_first(table: Table, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` ordered so that a row another row of the same table refers to comes first."""
    own = [
        (fk.parent.name, fk.column.name)
        for fk in table.foreign_keys
        if fk.column.table.name == table.name
    ]
    if not own:
        return rows
    ordered: list[dict[str, Any]] = []
    placed: dict[str, set[Any]] = {referred: set() for _, referred in own}
    pending = list(rows)
    while pending:
        ready = [
            row
            for row in pending
            if all(
                row[column] is None
                or row[column] in placed[referred]
                or row[column] == row[referred]
                for column, referred in own
            )
        ]
        assert ready, f"rows of {table.name} refer to each other in a cycle"
        for row in ready:
            ordered.append(row)
            pending.remove(row)
            for _, referred in own:
                placed[referred].add(row[referred])
    return ordered


_FIXED_TIME = datetime(2031, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)


def _made_up(type_: sqltypes.TypeEngine[Any], name: str) -> Any:
    if isinstance(type_, sqltypes.JSON):
        return {"harness": name, "values": [1, 2.5, True, None, "ü"]}
    if isinstance(type_, sqltypes.Boolean):
        return True
    if isinstance(type_, sqltypes.Integer):
        return 7
    if isinstance(type_, sqltypes.Float | sqltypes.Numeric):
        return 1.25
    if isinstance(type_, sqltypes.DateTime):
        return _FIXED_TIME
    return f"harness value of {name}"


def _value_for(conn: Any, table: Table, column: Any, *, own_id: Any) -> Any:
    """A value for ``column``: an existing id of the table it refers to, or one of its type."""
    for fk in column.foreign_keys:
        referred = fk.column
        candidates = [
            v for (v,) in conn.execute(select(referred).order_by(referred.desc()).limit(2))
        ]
        others = [v for v in candidates if v != own_id]
        return (others or candidates)[0]
    return _made_up(column.type, f"{table.name}.{column.name}")


# --- representative runs ------------------------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


@tool
def forecast(city: str) -> str:
    """The week's forecast for a city, at length."""
    return " ".join(f"Day {day}: 22C and sunny in {city}." for day in range(1, 15))


@tool
def convert(amount: float, currency: str) -> str:
    """Convert an amount of US dollars into another currency."""
    if currency.upper() != "EUR":
        raise ValueError(f"no rate for {currency}")
    return f"{amount * 0.92:.2f} EUR"


def _calls(*calls: ToolCall, **fields: Any) -> InferenceResponse:
    return InferenceResponse(tool_calls=calls, finish_reason="tool_calls", **fields)


def _answer(text_: str, **fields: Any) -> InferenceResponse:
    return InferenceResponse(content=text_, finish_reason="stop", **fields)


def record_representative_runs(
    ledger: Ledger,
    *,
    compaction: bool = True,
    forgetting: bool = True,
    graph: bool = True,
    stored: bool = True,
    sessions: bool = True,
) -> dict[str, str]:
    """Real agents recorded in ``ledger``, so that every table gets rows; their ids by name.

    - ``trip``: a conversation of two runs with tool calls (two in parallel), reasoning, usage
      and cost, a tool that raises and a call with invalid arguments;
    - ``inline``: a run with the tool trace kept in the conversation;
    - ``failed``: a run whose model ran out of responses after one step (status ``failed``,
      buffer kept);
    - ``stale``: a run begun and stepped through a ledger handle that was then closed, as if its
      process died (status ``running``, lease held, buffer rows left);
    - with ``compaction``, :func:`record_compactions`;
    - with ``forgetting``, :func:`record_forgetting`;
    - with ``graph``, :func:`record_graph_checkpoints`; with ``stored``,
      :func:`record_stored_conversations`; with ``sessions``, :func:`record_adk_session`.
    """
    ids: dict[str, str] = {}
    usage = {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 40}
    weather = ToolCall(id="call_w", name="get_weather", arguments={"city": "Lisbon"})
    trip_llm = ScriptedLLM(
        [
            _calls(
                weather,
                ToolCall(id="call_c", name="convert", arguments={"amount": 100, "currency": "EUR"}),
                content="Checking the weather and the rate.",
                reasoning="Two tools at once.",
                usage={**usage, "reasoning_tokens": 5},
                cost_usd=0.0012,
                metadata={"provider": "scripted"},
            ),
            _answer(
                f"Lisbon is sunny; 100 USD is 92.00 EUR. Bring {SEARCH_WORD}.",
                reasoning="Both tools answered.",
                usage=usage,
                cost_usd=0.0009,
            ),
            _calls(
                ToolCall(id="call_bad", name="convert", arguments={"amount": "lots"}),
                ToolCall(id="call_gbp", name="convert", arguments={"amount": 5, "currency": "GBP"}),
            ),
            _answer(f"I cannot convert to pounds, but {SEARCH_WORD} travels well.", usage=usage),
        ],
        model="scripted-model",
    )
    trip = (
        AgentBuilder()
        .with_llm(trip_llm)
        .with_name("trip-planner")
        .with_system_prompt("You plan trips.")
        .with_tools([get_weather, convert])
        .with_parallel_tools(2)
        .with_max_steps(8)
        .with_ledger(ledger)
        .build()
    )
    first = trip.run("What is the weather in Lisbon, and what is 100 USD in EUR?")
    second = trip.run("And in pounds?", first.conversation_id)
    ids.update(trip=first.conversation_id, trip_run=first.run_id, trip_run_2=second.run_id)

    inline_llm = ScriptedLLM([_calls(weather), _answer(f"Sunny, with {SEARCH_WORD} skies.")])
    inline = (
        AgentBuilder()
        .with_llm(inline_llm)
        .with_name("inline")
        .with_tools([get_weather])
        .with_separated_tool_trace(False)
        .with_ledger(ledger)
        .build()
    )
    result = inline.run("Weather in Lisbon, inline?")
    ids.update(inline=result.conversation_id, inline_run=result.run_id)

    failing = (
        AgentBuilder()
        .with_llm(ScriptedLLM([_calls(weather)]))
        .with_name("failing")
        .with_tools([get_weather])
        .with_ledger(ledger)
        .build()
    )
    result = failing.run("This model will run out of answers.")
    ids.update(failed=result.conversation_id, failed_run=result.run_id)

    ids.update(zip(("stale", "stale_run"), begin_stale_run(ledger), strict=True))
    if graph:
        ids.update(record_graph_checkpoints(ledger))
    if stored:
        ids.update(record_stored_conversations(ledger))
    if sessions:
        ids.update(record_adk_session(ledger))
    if compaction:
        ids.update(record_compactions(ledger))
    if forgetting:
        ids.update(record_forgetting(ledger))
    return ids


def record_graph_checkpoints(ledger: Ledger) -> dict[str, str]:
    """``graph``: a graph thread of two checkpoints, as a framework's saver stores them through
    ``ledger.graph_checkpoints`` (serialized values it made; the ledger never decodes them):
    a channel of plain values, one of messages (the ids of the ``trip`` conversation's first
    two messages), and a pending write."""
    thread = f"graph-thread-{new_id()}"
    message_ids = tuple(m.id for m in ledger.messages(_first_conversation(ledger))[:2])
    store = ledger.graph_checkpoints
    parent = None
    for n, checkpoint_id in enumerate(
        ("1ef00000-0000-6000-8000-000000000001", "1ef00000-0000-6000-8000-000000000002")
    ):
        versions = {"count": f'"{n + 1}"', "messages": '"1"'}
        key = CheckpointKey(thread, "", checkpoint_id)
        stored = StoredCheckpoint(
            key=key,
            parent_checkpoint_id=parent,
            checkpoint_type="msgpack",
            checkpoint=bytes([0x80 + n]),
            channel_versions=versions,
            metadata={"source": "loop", "step": n, "parents": {}, "run_id": f"graph-run-{n}"},
        )
        new = {("count", versions["count"]): ChannelValue("msgpack", bytes([n]))}
        if n == 0:
            new[("messages", '"1"')] = ChannelValue(message_ids=message_ids)
        store.put(stored, new)
        parent = checkpoint_id
    store.put_writes(
        key, [PendingWrite("task-1", 0, "count", "msgpack", b"\x03", "~__pregel_pull")]
    )
    return {"graph": thread}


def record_stored_conversations(ledger: Ledger) -> dict[str, str]:
    """``stored``: a framework's stored conversation of two entries, saved twice through
    ``ledger.stored_conversations`` (the second save compares the first's revision), and
    ``stored_fork``: a conversation forked from it, whose record names its source."""
    stored = ledger.stored_conversations
    conversation, fork = f"stored-{new_id()}", f"stored-fork-{new_id()}"
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    first, second = f"entry-{new_id()}", f"entry-{new_id()}"
    asked = StoredEntry(first, None, "request", {"parts": [{"content": "Hello?"}]})
    answered = StoredEntry(second, first, "response", {"parts": [{"content": "Hi."}]})
    usage: dict[str, JsonValue] = {"requests": 1, "input_tokens": 12, "output_tokens": 3}
    record = StoredRecord(conversation, first, "rev-1", "scope-a", None, None, [], {}, None, 1, at)
    assert stored.write(record, [asked], None)
    record = replace(record, head_id=second, revision="rev-2", usage=usage)
    assert stored.write(record, [answered], "rev-1")
    forked = replace(
        record,
        conversation_id=fork,
        revision="rev-f",
        forked_from=conversation,
        forked_at=first,
        branches=[second],
        deferred={"calls": []},
    )
    assert stored.write(forked, [], None)
    return {"stored": conversation, "stored_fork": fork}


def record_adk_session(ledger: Ledger) -> dict[str, str]:
    """``adk_session``: an agent framework's session with state in each scope and two events,
    the second's text held by the message row of the run it began (its row a residue)."""
    sessions = ledger.adk_sessions
    key = SessionKey("harness-app", "harness-user", f"session-{new_id()}")
    delta = StateDelta(app={"plan": "pro"}, user={"name": "Ann"}, session={"step": 1})
    made = sessions.create(key, delta, 1_700_000_000.25)
    assert made is not None
    first = StoredEvent("event-1", "invocation-1", 1_700_000_001.5, {"author": "app"})
    assert sessions.append(key, first, delta, expected=0, seen=0.0).outcome is Appended.STORED
    asked = {"author": "user", "content": {"role": "user", "parts": [{"text": "Hello?"}]}}
    second = StoredEvent("event-2", "invocation-2", 1_700_000_002.5, asked)
    appended = sessions.append(key, second, StateDelta(), expected=1, seen=0.0)
    turn = ledger.turn("Hello?", conversation_id=appended.conversation_id)
    turn.begin()
    turn.answer("Hi.")
    residue = {"author": "user", "content": {"role": "user", "parts": [{}]}}
    sessions.refer(appended.row_id, residue, [turn.user_message.id])
    return {"adk_session": appended.conversation_id}


def _first_conversation(ledger: Ledger) -> str:
    return ledger.conversations()[-1].id


def record_forgetting(ledger: Ledger) -> dict[str, str]:
    """``forgotten``: a small conversation recorded, then forgotten (a ``forget_log`` row)."""
    agent = AgentBuilder().with_llm(ScriptedLLM([_answer("Forgotten soon.")])).with_ledger(ledger)
    conversation_id = agent.build().run("Please forget this.").conversation_id
    forgotten = ledger.forget(conversation_id)
    assert forgotten.log_id is not None and forgotten.counts["conversation_messages"] == 2
    return {"forgotten": conversation_id, "forget_log": forgotten.log_id}


def record_compactions(ledger: Ledger) -> dict[str, str]:
    """``compacted``: a conversation whose run masked old tool results before a step, then
    whose first run was summarized (a summary; messages out of the context, pointing at it)."""
    lisbon = ToolCall(id="call_lisbon", name="forecast", arguments={"city": "Lisbon"})
    llm = ScriptedLLM(
        [
            _calls(lisbon, usage={"input_tokens": 300}),
            _calls(ToolCall(id="call_porto", name="forecast", arguments={"city": "Porto"})),
            _answer("Sunny in both.", usage={"input_tokens": 400}),
            _answer("Still sunny."),
        ]
    )
    summarizer = ScriptedLLM(
        [_answer("They asked about the weather in Lisbon and Porto.", usage={"input_tokens": 90})]
    )
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_name("compacted")
        .with_tools([forecast])
        .with_context_budget(60, keep_recent=1, summarize_at=1.0, summarizer=summarizer)
        .with_ledger(ledger)
        .build()
    )
    first = agent.run("Weather in Lisbon and in Porto, one after the other?")
    agent.run("And now?", first.conversation_id)
    compaction = agent.compact(first.conversation_id, force=True)
    assert compaction is not None and compaction.summary_id is not None
    return {"compacted": first.conversation_id, "compacted_run": first.run_id}


def begin_stale_run(ledger: Ledger) -> tuple[str, str]:
    """A run begun and stepped once through ``ledger``, never committed: (conversation, run).

    Close ``ledger`` afterwards and the run is what a crashed process leaves behind.
    """
    weather = ToolCall(id="call_stale", name="get_weather", arguments={"city": "Porto"})
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([_calls(weather, content="Looking it up.")]))
        .with_name("stale-planner")
        .with_tools([get_weather])
        .with_ledger(ledger)
        .build()
    )
    conversation = ledger.create_conversation(
        title="A trip to Porto", metadata={"channel": "harness"}
    )
    state = ledger.recorder.load_conversation(conversation.id)
    user = Message(role=Role.USER, content=STALE_USER_TEXT, metadata={"lang": "en"})
    state = agent.begin(state.with_messages(state.messages().append(user)))
    ledger.recorder.begin_run(state, user_message=user, agent_name=agent.name)
    after: AgentState = agent.step(state)
    ledger.recorder.record_step(after.run_id, after.current_execution, after.filed_since(state))
    assert state.run_id is not None
    return conversation.id, state.run_id


@contextlib.contextmanager
def representative_source(
    directory: Path, *, compaction: bool = True
) -> Iterator[tuple[Rows, dict[str, str]]]:
    """A SQLite ledger at the newest schema in ``directory`` holding the representative runs
    (and a value in every column); its rows, typed, and the runs' ids. Without
    ``compaction``, only what revision 0003 can hold too (no compaction, every message in the
    context, nothing forgotten): the rows of an old ledger, whose checksums still match once
    upgraded."""
    path = directory / "representative.db"
    with Ledger.open(path) as ledger:
        ids = record_representative_runs(
            ledger,
            compaction=compaction,
            forgetting=compaction,
            graph=compaction,
            stored=compaction,
            sessions=compaction,
        )
    with Database(path) as database:
        skip = (
            {}
            if compaction
            else {
                **ONLY_SINCE_0004,
                "forget_log": FORGET_LOG_COLUMNS,
                **ONLY_SINCE_0014,
                **ONLY_SINCE_0015,
                **ONLY_SINCE_0016,
            }
        )
        database.fill_empty_columns(skip=skip)
        assert database.empty_columns() == skip
        yield database.typed_rows(), ids


CHANGE_TABLES = frozenset({"agentledger_changes", "agentledger_deletions"})
CHANGE_COLUMN = "change_seq"
"""Revision 0008's change tracking: stamps and logs the database makes as rows are written,
which differ from one database to another for the same rows (and start again after a downgrade
and an upgrade), so the rows are compared without them."""

ONLY_SINCE_0004 = {
    "context_compactions": [c.name for c in ledger_tables.context_compactions.columns],
    "conversation_messages": ["summary_id"],
}
"""What revision 0003 cannot hold: left empty in a ledger that stands for an old one."""

ONLY_SINCE_0006 = {"agent_runs": ["partial_output", "partial_step_index"]}
"""What revision 0005 cannot hold: what a streaming run has shown so far."""

FORGET_LOG_COLUMNS = [c.name for c in ledger_tables.forget_log.columns]

ONLY_SINCE_0010 = {
    "conversations": ["tenant_id", "owner_id"],
    "agent_runs": ["tenant_id", "owner_id"],
    **{
        table.name: ["tenant_id"]
        for table in ledger_tables.LEDGER_TABLES
        if table.name not in ("conversations", "agent_runs")
    },
    "forget_log": FORGET_LOG_COLUMNS,
}
"""What revision 0009 cannot hold: whose each conversation is, and what was forgotten."""

ONLY_SINCE_0014 = {
    table.name: [c.name for c in table.columns] for table in ledger_tables.GRAPH_TABLES
}
"""What revision 0013 cannot hold: graph checkpoints."""

ONLY_SINCE_0015 = {
    table.name: [c.name for c in table.columns] for table in ledger_tables.STORE_TABLES
}
"""What revision 0014 cannot hold: a framework's stored conversations."""

ONLY_SINCE_0016 = {
    table.name: [c.name for c in table.columns]
    for table in (*ledger_tables.ADK_SESSION_TABLES, ledger_tables.adk_states)
}
"""What revision 0015 cannot hold: an agent framework's sessions and their shared state."""

CANNOT_HOLD = {
    "0003": ONLY_SINCE_0004,
    "0005": ONLY_SINCE_0006,
    "0009": ONLY_SINCE_0010,
    "0013": ONLY_SINCE_0014,
    "0014": ONLY_SINCE_0015,
    "0015": ONLY_SINCE_0016,
}
"""What a revision cannot hold, by revision (a downgrade to it refuses a ledger that holds it):
revisions not listed can hold everything the newest can."""


# --- the check every revision gets ----------------------------------------------------------------


def check_upgrade_keeps_rows(url: str, previous: str, revision: str, rows: Rows) -> None:
    """Migrate ``url`` (a fresh database) to ``previous``, fill every table it has then, upgrade
    to ``revision``: every row must still be there, unchanged, but for the columns the revision
    retires (whose information must still be there: rebuilt from the rows, it is what it was)
    and the checksums it computes again (which must match). Downgrading back to ``previous``
    must restore every row exactly."""
    migrate(url, previous)
    with Database(url) as database:
        assert database.versions() == [previous]
        before_columns = database.columns()
        assert before_columns, f"no tables at revision {previous}"
        database.insert(rows)
        counts = database.counts()
        assert all(counts.values()), f"a table is empty at {previous}: {counts}"
        before = database.snapshot(before_columns)

    migrate(url, revision)
    retired, rewritten = retired_by(revision), rewritten_by(revision)
    with Database(url) as database:
        assert database.versions() == [revision]
        after_columns = database.columns()
        for table, names in before_columns.items():
            assert table in after_columns, f"{revision} dropped the table {table}"
            lost = set(names) - set(after_columns[table])
            expected = {name for t, name in retired if t == table and name in names}
            assert lost == expected, f"{revision} dropped columns of {table}: {sorted(lost)}"
        kept = {
            table: [n for n in names if (table, n) not in retired | rewritten]
            for table, names in before_columns.items()
        }
        assert database.snapshot(kept) == restrict(before, kept)
        _check_retired_kept(database, before, retired)
    if revision == head():
        with Ledger.open(url, migrate=False) as ledger:
            assert ledger.verify() == [], "the rows the upgrade sealed again do not verify"

    migrate(url, previous, direction="downgrade")
    with Database(url) as database:
        assert database.versions() == [previous]
        assert database.snapshot(before_columns) == before


def _check_retired_kept(database: Database, before: Rows, retired: set[tuple[str, str]]) -> None:
    """Each retired column's value, rebuilt from the rows after the upgrade, is what the
    column held before it."""
    if not retired:
        return
    now = database.typed_rows()
    for table, name in retired:
        rebuild = RETIRED[(table, name)].rebuild
        held = {r["id"]: _decoded(r[name]) for r in before[table]}
        assert {r["id"]: rebuild(now, r) for r in now[table]} == held, f"{table}.{name} lost"


def _decoded(value: Any) -> Any:
    """A JSON value as the driver gave it: text on SQLite, decoded on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value
