"""``agentledger.ledger.migrate``, the migrations as plain functions; and revision 0005, which
stores a step's tool calls once and refuses, changing nothing, where that would lose
information or seal damage."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import support.migration_harness as harness
from agentledger.errors import MigrationError, SchemaVersionError
from agentledger.ledger import Ledger, migrate
from support.migration_harness import Database, Rows


@pytest.fixture(scope="module")
def representative_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rows]:
    with harness.representative_source(tmp_path_factory.mktemp("source")) as (rows, _ids):
        yield rows


def test_the_functions_migrate_a_ledger_by_its_url(db_url):
    assert migrate.current(db_url) is None
    assert migrate.upgrade(db_url, "0004") == "0004"
    with pytest.raises(SchemaVersionError, match=r"not the newest.*agentledger db upgrade"):
        migrate.check(db_url)
    assert migrate.upgrade(db_url) == migrate.head() == migrate.current(db_url)
    migrate.check(db_url)
    assert migrate.downgrade(db_url, "base") is None
    assert migrate.current(db_url) is None


def test_history_lists_every_revision_newest_first_with_what_it_does():
    history = migrate.history()
    assert [r.revision for r in history] == list(reversed(harness.revisions()))
    assert history[0].revision == migrate.head()
    assert history[-1].down_revision is None
    assert all(r.doc for r in history)
    assert [r.down_revision for r in history[:-1]] == [r.revision for r in history[1:]]


def test_a_ledger_from_a_newer_agentledger_is_refused_by_every_function(db_url):
    migrate.upgrade(db_url)
    with Database(db_url) as database, database.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {harness.VERSION_TABLE} SET version_num = '9999'")
    for call in (migrate.check, migrate.upgrade, lambda url: migrate.downgrade(url, "0004")):
        with pytest.raises(SchemaVersionError, match="newer agentledger"):
            call(db_url)


def old_ledger(url: str, rows: Rows) -> None:
    """A ledger at revision 0004 holding the representative rows (tool calls in each step)."""
    migrate.upgrade(url, "0004")
    with Database(url) as database:
        database.insert(rows)


def a_step_with_calls(database: Database) -> str:
    return str(database.scalar("SELECT id FROM step_executions WHERE tool_calls IS NOT NULL"))


def test_revision_0005_moves_each_steps_calls_to_a_count_and_keeps_them_in_the_tool_rows(
    db_url, representative_rows
):
    old_ledger(db_url, representative_rows)
    with Database(db_url) as database:
        step = a_step_with_calls(database)
        held = json.loads(
            str(
                database.scalar(
                    "SELECT CAST(tool_calls AS TEXT) FROM step_executions WHERE id = :s", s=step
                )
            )
        )
    migrate.upgrade(db_url)
    with Database(db_url) as database:
        count = database.scalar("SELECT tool_call_count FROM step_executions WHERE id = :s", s=step)
        calls = database.scalar("SELECT COUNT(*) FROM tool_executions WHERE step_id = :s", s=step)
    assert count == calls == len(held) > 0
    with Ledger.open(db_url, migrate=False) as ledger:
        assert ledger.verify() == []


def test_revision_0005_refuses_a_step_whose_calls_its_tool_rows_do_not_hold(
    db_url, representative_rows
):
    old_ledger(db_url, representative_rows)
    with Database(db_url) as database:
        step = a_step_with_calls(database)
        with database.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE step_executions SET checksum = NULL, tool_calls = "
                '\'[{"id": "lost", "name": "nowhere", "arguments": {}}]\' '
                f"WHERE id = '{step}'"
            )
        before = database.snapshot()

    with pytest.raises(MigrationError, match=rf"step {step}.*would lose information"):
        migrate.upgrade(db_url)

    with Database(db_url) as database:
        assert database.versions() == ["0004"]
        assert database.snapshot() == before


def test_revision_0005_refuses_a_damaged_step_rather_than_seal_it(db_url, representative_rows):
    old_ledger(db_url, representative_rows)
    with Database(db_url) as database:
        step = a_step_with_calls(database)
        with database.engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE step_executions SET content = 'x' WHERE id = '{step}'")
        before = database.snapshot()

    with pytest.raises(MigrationError, match=rf"step {step}.*does not match its checksum"):
        migrate.upgrade(db_url)

    with Database(db_url) as database:
        assert database.versions() == ["0004"]
        assert database.snapshot() == before


def test_its_downgrade_refuses_a_step_that_lost_a_tool_row(db_url, representative_rows):
    old_ledger(db_url, representative_rows)
    migrate.upgrade(db_url)
    with Database(db_url) as database:
        step = database.scalar("SELECT id FROM step_executions WHERE tool_call_count > 0")
        with database.engine.begin() as conn:
            conn.exec_driver_sql(f"DELETE FROM tool_executions WHERE step_id = '{step}'")
        before = database.snapshot()

    with pytest.raises(MigrationError, match=rf"step {step}.*cannot be rebuilt"):
        migrate.downgrade(db_url, "0004")

    with Database(db_url) as database:
        assert database.versions() == [migrate.head()]
        assert database.snapshot() == before
