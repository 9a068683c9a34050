"""``LedgerReader``: a SQLite ledger read through ``sqlite3``, without SQLAlchemy, reads what
``Ledger`` reads, with the same checks (checksums, scopes, prefixes), and refuses what
``Ledger.open(migrate=False)`` refuses. The facts it reads the tables by (``_columns``) and the
revisions it knows (``_revisions``) are kept in step with the models and the migrations here."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Boolean, event

import support.migration_harness as harness
from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall
from agentledger.errors import (
    AmbiguousIdError,
    LedgerCorruptError,
    NotFoundError,
    SchemaVersionError,
)
from agentledger.ledger import Ledger, LedgerReader, migrate, tables
from agentledger.ledger._columns import COLUMNS, column_kind, decoded_rows
from agentledger.ledger._revisions import HEAD, REVISIONS
from support.cli import get_weather, record_a_run, record_a_run_and_a_stale_one


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with a finished run, a stale one, and a tenant's conversation."""
    path = tmp_path_factory.mktemp("reader") / "ledger.db"
    record_a_run_and_a_stale_one(str(path))
    with Ledger.open(path) as ledger:
        scoped = ledger.scoped(tenant_id="acme", owner_id="ann")
        llm = ScriptedLLM(
            [
                InferenceResponse(
                    tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"})]
                ),
                InferenceResponse(content="Oslo is cold."),
            ]
        )
        agent = AgentBuilder().with_llm(llm).with_tools([get_weather]).with_ledger(scoped).build()
        agent.run("Weather in Oslo?")
    return path


@pytest.fixture
def both(recorded: Path) -> Iterator[tuple[Ledger, LedgerReader]]:
    with Ledger.open(recorded, migrate=False) as ledger, LedgerReader.open(recorded) as reader:
        yield ledger, reader


@contextlib.contextmanager
def changed(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to the SQLite file ``path``, committed and closed after."""
    with contextlib.closing(sqlite3.connect(path)) as database, database:
        yield database


def columns_of(row: object) -> dict[str, object]:
    """A ``Conversation`` or ``AgentRun`` by column name, as the reader's record holds it."""
    data = row.model_dump()  # type: ignore[attr-defined]
    data["metadata"] = data.pop("metadata_")
    return data


@pytest.mark.parametrize("scope", [(None, None), ("acme", None), ("acme", "ann"), ("other", None)])
def test_the_reader_reads_what_the_ledger_reads_in_every_scope(both, scope):
    ledger, reader = both
    if scope != (None, None):
        ledger, reader = ledger.scoped(*scope), reader.scoped(*scope)
    conversations = ledger.conversations()
    assert [dict(c) for c in reader.conversations()] == [columns_of(c) for c in conversations]
    assert [dict(r) for r in reader.runs()] == [columns_of(r) for r in ledger.runs()]
    short = ledger.short_ids([c.id for c in conversations], of="conversation")
    for c in conversations:
        assert dict(reader.conversation(short[c.id])) == columns_of(c)
        assert reader.history(c.id) == ledger.history(c.id)
        assert reader.model_context(c.id) == ledger.model_context(c.id)
        assert reader.messages(c.id, "messages") == ledger.messages(c.id, "messages")
    for run in ledger.runs():
        assert reader.steps(run.id) == ledger.steps(run.id)
        ours, theirs = reader.run_tree(run.id), ledger.run_tree(run.id)
        assert [(n.run.id, n.exclusive) for n in ours.walk()] == [
            (n.run.id, n.exclusive) for n in theirs.walk()
        ]
        assert ours.inclusive == theirs.inclusive and reader.run(run.id).usage == run.usage
    for words in ("Paris", "weather", "Oslo"):
        assert reader.search(words) == ledger.search(words)
    ids = [c.id for c in conversations]
    assert reader.short_ids(ids, of="conversation") == ledger.short_ids(ids, of="conversation")


def test_the_reader_finds_ids_by_prefix_and_refuses_what_the_ledger_refuses(both):
    ledger, reader = both
    run = ledger.runs()[0]
    assert reader.run(ledger.short_ids([run.id], of="run")[run.id]).id == run.id
    for handle in (ledger, reader):
        with pytest.raises(AmbiguousIdError) as raised:
            handle.conversation(run.id[:8])  # every id of the ledger was made within a minute
        with pytest.raises(NotFoundError, match="no run 'nope'"):
            handle.run("nope")
        outside = handle.scoped("other")
        with pytest.raises(NotFoundError):
            outside.run(run.id)
    assert "begins the ids of" in str(raised.value)


def test_every_stored_value_reads_back_as_the_models_column_types_read_it(tmp_path):
    """Every column of every table, holding a value (``representative_source`` fills the empty
    ones), read through sqlite3 and the reader's decoding, equals the value SQLAlchemy reads."""
    with (
        harness.representative_source(tmp_path) as (typed, _),
        changed(tmp_path / "representative.db") as database,
    ):
        for table, columns in COLUMNS.items():
            cursor = database.execute(f"SELECT {', '.join(columns)} FROM {table}")
            names = [d[0] for d in cursor.description]
            read = decoded_rows(table, names, cursor.fetchall())
            stamps = harness.CHANGE_COLUMN  # the harness leaves the change stamps out
            assert [{k: v for k, v in r.items() if k != stamps} for r in read] == typed[table]


def test_the_column_lists_are_the_models_columns_in_order_of_the_same_kinds():
    assert {t.name: tuple(c.name for c in t.columns) for t in tables.LEDGER_TABLES} == COLUMNS
    for table in tables.LEDGER_TABLES:
        for column in table.columns:
            assert column_kind(table.name, column.name) == kind_of(column.type), column


def kind_of(column_type: object) -> object:
    """What a column of this type stores differently from what it reads back."""
    if isinstance(column_type, tables.EnumText):
        return column_type.enum
    for kind, types in (
        ("time", tables.UTCDateTime),
        ("json", tables.JSONColumn),
        ("flag", Boolean),
    ):
        if isinstance(column_type, types):
            return kind
    return None


def test_the_revisions_known_without_alembic_are_the_migrations():
    assert tuple(reversed([r.revision for r in migrate.history()])) == REVISIONS
    assert migrate.head() == HEAD


def test_a_damaged_row_is_an_error_never_a_different_answer(tmp_path):
    path = tmp_path / "damaged.db"
    recorded = record_a_run(str(path))
    with sqlite3.connect(path) as database:  # a flipped value: the checksum no longer matches
        database.execute(
            "UPDATE conversation_messages SET content = 'Paris is rainy.' WHERE seq = 1"
        )
    with LedgerReader.open(path) as reader, pytest.raises(LedgerCorruptError, match="checksum"):
        reader.history(recorded.conversation_id)


def test_a_file_that_is_no_ledger_is_named_so_and_never_told_to_upgrade(tmp_path):
    path = tmp_path / "app.db"
    with changed(path) as database:
        database.execute("CREATE TABLE t (x)")
    with pytest.raises(SchemaVersionError) as raised:
        LedgerReader.open(path)
    assert "not an agentledger ledger (its tables: t)" in str(raised.value)
    assert "upgrade" not in str(raised.value)


def test_a_ledger_from_a_newer_agentledger_is_refused(tmp_path):
    path = tmp_path / "newer.db"
    record_a_run(str(path))
    with changed(path) as database:
        database.execute("UPDATE agentledger_version SET version_num = '9999'")
    with pytest.raises(SchemaVersionError, match="newer agentledger"):
        LedgerReader.open(path)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///ledger.db",
        "sqlite:////var/lib/app/ledger.db",
        "sqlite:///a%20b.db?timeout=5",
        "sqlite+pysqlite:///x.db",
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql+psycopg://user:secret@localhost:5432/ledger",
    ],
)
def test_a_url_is_read_as_sqlalchemy_reads_it(url):
    from agentledger.ledger._engine import engine_url
    from agentledger.ledger._urls import parse_url, redact

    # what SQLAlchemy reads in the URL the ledger's engine is made with
    parsed, theirs = parse_url(url), engine_url(url)
    assert (parsed.backend, parsed.database) == (theirs.get_backend_name(), theirs.database)
    if theirs.password is not None:  # shown without it, as SQLAlchemy shows it
        assert redact(url) == theirs.render_as_string(hide_password=True)


def test_a_sqlite_url_with_an_escaped_space_names_one_file_for_the_ledger_and_the_reader(tmp_path):
    """``%20`` in a SQLite URL is a space for the ledger (whatever SQLAlchemy version makes its
    engine) as for the reader."""
    url = f"sqlite:///{tmp_path}/a%20b.db"
    with Ledger.open(url) as ledger:
        made = ledger.create_conversation(title="spaced")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b.db"]
    with LedgerReader.open(url) as reader:
        assert reader.conversation(made.id).title == "spaced"


def test_reads_inside_a_readers_reading_see_one_moment_scoped_readers_included(tmp_path: Path):
    path = tmp_path / "ledger.db"
    record_a_run(str(path))
    with Ledger.open(path) as writer, LedgerReader.open(path) as reader:
        scoped = reader.scoped(tenant_id="acme")

        def read_twice() -> tuple[int, int, int, int]:
            before = (len(reader.conversations()), len(scoped.conversations()))
            for tenant in (None, "acme"):  # committed by another handle meanwhile
                with writer.scoped(tenant_id=tenant).turn(user="Meanwhile", agent_name="a") as t:
                    t.answer("ok")
            return *before, len(reader.conversations()), len(scoped.conversations())

        everyone, acme, everyone_after, acme_after = reader.reading("two listings", read_twice)

        assert (everyone_after, acme_after) == (everyone, acme)
        assert len(reader.conversations()) == everyone + 2
        assert len(scoped.conversations()) == acme + 1


def test_an_error_of_the_applications_own_pool_listener_is_not_taken_for_a_damaged_row(tmp_path):
    """A read that fails before it reads a row (here in a checkout listener the application
    added to the ledger's engine) raises that error as it is, not as a damaged database."""
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        ledger.create_conversation(title="kept")

        def broken(dbapi: object, record: object, proxy: object) -> None:
            raise TypeError("the listener's own bug")

        event.listen(ledger.engine, "checkout", broken)
        with pytest.raises(TypeError, match="the listener's own bug"):
            ledger.conversations()
        with pytest.raises(TypeError, match="the listener's own bug"):
            ledger.reading("two reads", lambda: (ledger.conversations(), ledger.runs()))
        event.remove(ledger.engine, "checkout", broken)
        assert [c.title for c in ledger.conversations()] == ["kept"]
