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
database at P, they are projected onto P's columns; a column P has and the newest schema does
not gets a value made from its type.

Migrations are driven through ``agentledger db upgrade|downgrade`` (the command line a user
runs), and rows are read and written with plain SQL on connections of the harness's own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from click.testing import CliRunner
from sqlalchemy import Engine, MetaData, Table, create_engine, inspect, select, text, update
from sqlalchemy import types as sqltypes

from agentledger import AgentBuilder, AgentState, Message, Role, ToolCall, tool
from agentledger.cli import cli
from agentledger.ledger import Ledger
from agentledger.ledger import tables as ledger_tables
from agentledger.ledger._checksum import COVERED, checksum
from agentledger.llm import InferenceResponse, ScriptedLLM

VERSION_TABLE = "agentledger_version"
FTS_PREFIX = "conversation_messages_fts"
"""Full-text search objects: made by the migrations, not described by the models."""

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


def sqlalchemy_url(url: str | Path) -> str:
    """The URL SQLAlchemy needs for what the ledger accepts (a path, sqlite:///, postgresql://)."""
    text_url = str(url)
    if "://" not in text_url:
        return f"sqlite:///{text_url}"
    if text_url.startswith("postgresql://"):
        return "postgresql+psycopg://" + text_url.split("://", 1)[1]
    return text_url


Rows = dict[str, list[dict[str, Any]]]


class Database:
    """SQL straight on a ledger's database, through an engine of the harness's own."""

    def __init__(self, url: str | Path) -> None:
        self.url = str(url)
        self.engine: Engine = create_engine(sqlalchemy_url(url))
        self.dialect = self.engine.dialect.name

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine.dispose()

    def table_names(self) -> list[str]:
        """The ledger's tables: without the version table and the full-text search objects."""
        names = inspect(self.engine).get_table_names()
        return sorted(n for n in names if n != VERSION_TABLE and not n.startswith(FTS_PREFIX))

    def all_table_names(self) -> list[str]:
        return sorted(inspect(self.engine).get_table_names())

    def columns(self) -> dict[str, list[str]]:
        inspector = inspect(self.engine)
        return {t: [c["name"] for c in inspector.get_columns(t)] for t in self.table_names()}

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
        present = set(self.table_names())
        with self.engine.connect() as conn:
            for table in ledger_tables.metadata.sorted_tables:
                if table.name in present:
                    found = conn.execute(select(table)).mappings()
                    rows[table.name] = [dict(r) for r in found]
        return rows

    def insert(self, rows: Rows) -> None:
        """Write ``rows`` into the tables this database has (at whatever revision it is),
        projected onto their columns; a NOT NULL column the rows lack gets a made-up value."""
        metadata = self.reflect()
        with self.engine.begin() as conn:
            for table in metadata.sorted_tables:
                given = rows.get(table.name, [])
                projected = [_project(table, row) for row in given]
                if projected:
                    conn.execute(table.insert(), _parents_first(table, projected))

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
    """Checksums again for the rows that have one, as the ledger would have written the values
    filled in (at revisions that have the column)."""
    for name, reflected_table in reflected.tables.items():
        if name not in COVERED or "checksum" not in reflected_table.columns:
            continue
        table = ledger_tables.metadata.tables[name]
        for row in conn.execute(select(table).where(table.c.checksum.is_not(None))).mappings():
            conn.execute(
                update(table).where(table.c.id == row["id"]).values(checksum=checksum(table, row))
            )


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


def _project(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    projected = {c.name: row[c.name] for c in table.columns if c.name in row}
    for column in table.columns:
        if column.name not in projected and not column.nullable and column.server_default is None:
            projected[column.name] = _made_up(column.type, column.name)
    return projected


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


def record_representative_runs(ledger: Ledger, *, compaction: bool = True) -> dict[str, str]:
    """Real agents recorded in ``ledger``, so that every table gets rows; their ids by name.

    - ``trip``: a conversation of two runs with tool calls (two in parallel), reasoning, usage
      and cost, a tool that raises and a call with invalid arguments;
    - ``inline``: a run with the tool trace kept in the conversation;
    - ``failed``: a run whose model ran out of responses after one step (status ``failed``,
      buffer kept);
    - ``stale``: a run begun and stepped through a ledger handle that was then closed, as if its
      process died (status ``running``, lease held, buffer rows left);
    - with ``compaction``, :func:`record_compactions`.
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
    if compaction:
        ids.update(record_compactions(ledger))
    return ids


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
    state = ledger.load_conversation(conversation.id)
    user = Message(role=Role.USER, content=STALE_USER_TEXT, metadata={"lang": "en"})
    state = agent.begin(state.with_messages(state.messages().append(user)))
    ledger.begin_run(state, user_message=user, agent_name=agent.name)
    after: AgentState = agent.step(state)
    ledger.record_step(state, after)
    assert state.run_id is not None
    return conversation.id, state.run_id


@contextlib.contextmanager
def representative_source(
    directory: Path, *, compaction: bool = True
) -> Iterator[tuple[Rows, dict[str, str]]]:
    """A SQLite ledger at the newest schema in ``directory`` holding the representative runs
    (and a value in every column); its rows, typed, and the runs' ids. Without
    ``compaction``, only what revision 0003 can hold too (no compaction, every message in the
    context): the rows of an old ledger, whose checksums still match once upgraded."""
    path = directory / "representative.db"
    with Ledger.open(path) as ledger:
        ids = record_representative_runs(ledger, compaction=compaction)
    with Database(path) as database:
        skip = None if compaction else ONLY_SINCE_0004
        database.fill_empty_columns(skip=skip)
        assert database.empty_columns() == (skip or {})
        yield database.typed_rows(), ids


ONLY_SINCE_0004 = {
    "context_compactions": [c.name for c in ledger_tables.context_compactions.columns],
    "conversation_messages": ["summary_id"],
}
"""What revision 0003 cannot hold: left empty in a ledger that stands for an old one."""


# --- the check every revision gets ----------------------------------------------------------------


def check_upgrade_keeps_rows(url: str, previous: str, revision: str, rows: Rows) -> None:
    """Migrate ``url`` (a fresh database) to ``previous``, fill every table it has then, upgrade
    to ``revision``: every row must still be there, unchanged. Downgrading back to
    ``previous`` must keep them too."""
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
    with Database(url) as database:
        assert database.versions() == [revision]
        after_columns = database.columns()
        for table, names in before_columns.items():
            assert table in after_columns, f"{revision} dropped the table {table}"
            lost = set(names) - set(after_columns[table])
            assert not lost, f"{revision} dropped columns of {table}: {sorted(lost)}"
        assert database.snapshot(before_columns) == before

    migrate(url, previous, direction="downgrade")
    with Database(url) as database:
        assert database.versions() == [previous]
        assert database.snapshot(before_columns) == before
