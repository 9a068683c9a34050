"""The schema is public API: the committed DDL in ``schema/``, the models, the migrations and
``schema/README.md`` say the same thing."""

from __future__ import annotations

import contextlib
import difflib
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import inspect

from agentledger.cli import cli
from agentledger.ledger import Ledger, migrate
from agentledger.ledger import tables as ledger_tables
from agentledger.ledger.schema import ddl
from support.migration_harness import (
    FTS_PREFIX,
    FTS_PREFIXES,
    ID_PREFIX_INDEXES,
    VERSION_TABLE,
    Database,
    record_representative_runs,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schema"
MODEL_TABLES = ledger_tables.metadata.sorted_tables


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_committed_ddl_is_what_the_migrations_generate(dialect):
    committed = (SCHEMA / f"{dialect}.sql").read_text(encoding="utf-8")
    generated = ddl(dialect)
    if generated != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                f"schema/{dialect}.sql (committed)",
                f"ddl({dialect!r}) (from the migrations)",
            )
        )
        pytest.fail(
            f"schema/{dialect}.sql is out of date with the migrations: run `make schema` and "
            f"commit the result.\n{diff[:4000]}"
        )


def test_the_agentledger_db_schema_command_writes_the_committed_ddl(tmp_path):
    out = tmp_path / "schema.sql"
    result = CliRunner().invoke(cli, ["db", "schema", "--dialect", "sqlite", "--output", out])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == (SCHEMA / "sqlite.sql").read_text(encoding="utf-8")


def _include(obj: object, name: str | None, type_: str, reflected: bool, other: object) -> bool:
    return not (name or "").startswith((*FTS_PREFIXES, *ID_PREFIX_INDEXES))


def test_the_models_and_the_migrations_agree(db_url):
    migrate.upgrade(db_url, migrate.head())  # named by its id: every migration runs in turn
    with Database(db_url) as database, database.engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": VERSION_TABLE,
                "compare_type": True,
                "compare_server_default": True,
                "include_object": _include,
            },
        )
        differences = compare_metadata(context, ledger_tables.metadata)
    assert differences == [], (
        "the models (agentledger/ledger/tables.py) and the migrations disagree: add a migration "
        f"(alembic revision --autogenerate) or fix the models: {differences}"
    )


# --- the DDL builds the same schema as the migrations -----------------------------------------


def _structure(url: str) -> dict[str, Any]:
    """Tables, columns, keys and indexes as SQLAlchemy's inspector sees them."""
    engine = Database(url)
    try:
        inspector = inspect(engine.engine)
        shape: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            if table.startswith(tuple(f"{p}_" for p in FTS_PREFIXES)):  # FTS5's shadow tables
                continue
            shape[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
                ],
                "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
                "foreign keys": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"])
                    for f in inspector.get_foreign_keys(table)
                ),
                "unique": sorted(
                    tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(str(c) for c in i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                ),
            }
        with engine.engine.connect() as conn:
            for what, sql in CATALOG[engine.dialect].items():
                shape[what] = sorted(tuple(row) for row in conn.exec_driver_sql(sql))
        return shape
    finally:
        engine.engine.dispose()


CATALOG = {
    "sqlite": {
        "triggers": "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'",
        "rows": "SELECT count(*) FROM agentledger_changes",
    },
    "postgresql": {
        "triggers": "SELECT tgname, tgrelid::regclass::text, tgtype FROM pg_trigger "
        "WHERE NOT tgisinternal",
        "functions": "SELECT proname, prosecdef, proconfig::text, prosrc FROM pg_proc "
        "WHERE pronamespace = 'public'::regnamespace",
        "policies": "SELECT tablename, policyname, cmd, qual, with_check FROM pg_policies",
        "row-level security": "SELECT relname, relrowsecurity, relforcerowsecurity "
        "FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'",
        "index definitions": "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = 'public'",
        "rows": "SELECT count(*) FROM agentledger_changes",
    },
}
"""What the inspector does not compare, read from each dialect's catalog."""


def _apply_ddl(url: str, dialect: str) -> None:
    script = (SCHEMA / f"{dialect}.sql").read_text(encoding="utf-8")
    if dialect == "sqlite":
        path = url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.executescript(script)
    else:
        with Database(url) as database, database.engine.begin() as conn:
            conn.exec_driver_sql(script)


def _reset(url: str, dialect: str) -> None:
    if dialect == "sqlite":
        Path(url.removeprefix("sqlite:///")).unlink()
    else:
        with Database(url) as database, database.engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")


@pytest.mark.parametrize("how", ["the committed DDL", "Ledger.open of an empty database"])
def test_the_committed_ddl_builds_the_same_schema_as_running_every_migration(db_url, how):
    dialect = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    if how == "the committed DDL":
        _apply_ddl(db_url, dialect)
    else:
        Ledger.open(db_url).close()
        assert migrate.current(db_url) == migrate.head()
    built = _structure(db_url)
    _reset(db_url, dialect)
    migrate.upgrade(db_url, migrate.head())  # named by its id: every migration runs in turn
    migrated = _structure(db_url)

    assert sorted(built) == sorted(migrated)
    for part in migrated:
        assert built[part] == migrated[part], part
    assert {t.name for t in MODEL_TABLES} <= set(migrated)


def test_a_database_built_from_the_committed_sqlite_ddl_is_usable_by_sql(tmp_path):
    path = tmp_path / "from-ddl.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript((SCHEMA / "sqlite.sql").read_text(encoding="utf-8"))
        conn.execute(
            "INSERT INTO conversations (id, kind, version, created_at, updated_at) "
            "VALUES ('c1', 'main', 0, '2030-01-01 00:00:00', '2030-01-01 00:00:00')"
        )
        conn.execute(
            "INSERT INTO conversation_messages (id, conversation_id, section, seq, role, content, "
            "created_at) VALUES ('m1', 'c1', 'messages', 0, 'user', 'find the pelican', "
            "'2030-01-01 00:00:00')"
        )
        found = conn.execute(
            f"SELECT message_id FROM {FTS_PREFIX} WHERE {FTS_PREFIX} MATCH 'pelican'"
        ).fetchall()
    assert found == [("m1",)]


# --- the documentation -------------------------------------------------------------------------


def _readme_sections() -> dict[str, str]:
    text = (SCHEMA / "README.md").read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    for chunk in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading = re.match(r"`(\w+)`", chunk)
        if heading:
            sections[heading.group(1)] = chunk
    return sections


@pytest.mark.parametrize("table", MODEL_TABLES, ids=lambda t: t.name)
def test_every_column_of_every_table_is_documented_in_its_section_of_the_schema_readme(table):
    sections = _readme_sections()
    assert table.name in sections, f"schema/README.md has no section `## \\`{table.name}\\``"
    missing = [c.name for c in table.columns if f"`{c.name}`" not in sections[table.name]]
    assert missing == [], (
        f"schema/README.md does not name these columns of {table.name} in its section: {missing}"
    )


def test_the_schema_readme_names_the_version_table_and_the_search_objects():
    text = (SCHEMA / "README.md").read_text(encoding="utf-8")
    assert f"`{VERSION_TABLE}`" in text
    assert all(prefix in text for prefix in FTS_PREFIXES)


# --- documented meanings the SQL must keep ------------------------------------------------------


def test_a_json_column_without_a_value_holds_sql_null_as_documented(db_url):
    with Ledger.open(db_url) as ledger:
        record_representative_runs(ledger)
    with Database(db_url) as database, database.engine.connect() as conn:
        json_columns = [
            (table.name, column.name)
            for table in MODEL_TABLES
            for column in table.columns
            if "JSON" in str(column.type.compile(dialect=database.engine.dialect)).upper()
        ]
        assert json_columns
        literal_nulls = {
            f"{table}.{column}": n
            for table, column in json_columns
            if (
                n := conn.exec_driver_sql(
                    f'SELECT COUNT(*) FROM "{table}" WHERE CAST("{column}" AS TEXT) = \'null\''
                ).scalar()
            )
        }
    assert literal_nulls == {}, (
        "JSON columns hold the JSON literal null where schema/README.md promises SQL NULL "
        f"(so `WHERE column IS NULL` misses them): {literal_nulls}"
    )
