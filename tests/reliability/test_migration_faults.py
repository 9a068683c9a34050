"""Migrations killed half way, and several at once, on SQLite and PostgreSQL.

``Ledger.open`` migrates under a lock, in one transaction (Alembic runs inside the transaction
``_migrate.locked`` opens, so every revision of an upgrade commits together): a process killed
anywhere in an upgrade must leave the database exactly as it was (the old revision, its schema,
every row), never half way, and the next ``Ledger.open`` finishes the job. A child process
(``support.crash_points``'s ``upgrade`` role) upgrades a ledger filled at the previous revision
with the migration harness's representative rows and dies at its n-th schema write, for every n,
and at its COMMIT; the same for a first migration of an empty database. Then four processes open one
old ledger at once: they all succeed, one of them migrates, the others wait for it; and when
the one holding the migration lock is killed, the others carry on.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import support.migration_harness as harness
from agentledger import AgentBuilder
from agentledger.ledger import Ledger
from agentledger.ledger import tables as ledger_tables
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.crash_points import (
    COMMIT,
    KILL_MODES,
    expected_status,
    run_forked,
    run_forked_together,
)
from support.invariants import violations
from support.migration_harness import Database, Rows
from support.sizes import SOAK

HEAD = harness.head()
PREVIOUS = harness.predecessor(HEAD)
MODEL_TABLES = sorted(set(ledger_tables.metadata.tables) - harness.CHANGE_TABLES)
OPENERS = 4


@pytest.fixture(scope="module")
def representative_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rows]:
    source = tmp_path_factory.mktemp("source")
    assert PREVIOUS is not None  # an old ledger holds what its revision can
    compaction = "context_compactions" not in harness.CANNOT_HOLD.get(PREVIOUS, {})
    with harness.representative_source(source, compaction=compaction) as (rows, _ids):
        yield rows


# --- what a database holds -----------------------------------------------------------------------


def schema(url: str) -> list[tuple[Any, ...]]:
    """Every table, column, index and trigger of the database, as its catalog describes them."""
    with Database(url) as database, database.engine.connect() as conn:
        if database.dialect == "sqlite":
            found = conn.exec_driver_sql(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
            )
        else:
            found = conn.exec_driver_sql(
                "SELECT 'column', table_name, column_name, data_type, is_nullable "
                "FROM information_schema.columns WHERE table_schema = 'public' "
                "UNION ALL SELECT 'index', tablename, indexname, indexdef, '' FROM pg_indexes "
                "WHERE schemaname = 'public' ORDER BY 1, 2, 3"
            )
        return [tuple(row) for row in found]


@dataclass(frozen=True)
class Before:
    """A ledger at the previous revision, filled: what a failed upgrade must leave alone."""

    columns: dict[str, list[str]]
    rows: Rows
    schema: list[tuple[Any, ...]]
    violations: list[str]


def old_ledger(url: str, rows: Rows) -> Before:
    assert PREVIOUS is not None
    harness.migrate(url, PREVIOUS)
    with Database(url) as database:
        database.insert(rows)
        columns = database.columns()
        assert all(database.counts().values())
        snapshot = database.snapshot(columns)
    # The harness's rows hold an inline-trace conversation: judge them in inline mode.
    return Before(columns, snapshot, schema(url), violations(url, separated=False))


def assert_untouched(url: str, before: Before) -> None:
    """The old revision, its schema and its rows, exactly: no half an upgrade."""
    with Database(url) as database:
        assert database.versions() == [PREVIOUS]
        assert database.snapshot(before.columns) == before.rows
    assert schema(url) == before.schema
    assert violations(url, separated=False) == before.violations


def assert_upgraded(url: str, before: Before | None) -> None:
    """The head revision with every table, every old row, and a ledger that works: a new run
    commits, and search finds the old answers once each and the new one."""
    with Database(url) as database:
        assert database.versions() == [HEAD]
        assert database.table_names() == MODEL_TABLES
        if before is not None:
            assert PREVIOUS is not None
            kept = harness.unchanged_between(before.columns, PREVIOUS, HEAD)
            assert database.snapshot(kept) == harness.restrict(before.rows, kept)
    with Ledger.open(url, migrate=False) as ledger:
        llm = ScriptedLLM([InferenceResponse(content="Quinces ripen in autumn.")])
        AgentBuilder().with_llm(llm).with_ledger(ledger).build().run("When do quinces ripen?")
        assert len(ledger.search("quinces")) == 2
        old_answers = ledger.search(harness.SEARCH_WORD)
        assert len(old_answers) == (3 if before is not None else 0)
    assert violations(url, separated=False) == (before.violations if before else [])


def empty(url: str) -> bool:
    with Database(url) as database:
        return database.all_table_names() == []


def kill_positions() -> Iterator[int | str]:
    """Where to kill: at the COMMIT, then at the 1st, 2nd, ... schema write (in ``make test``
    at the 1st, 2nd, 4th, 8th, ... of a first migration, which has dozens)."""
    yield COMMIT
    yield from itertools.count(1)


# --- one process, killed ------------------------------------------------------------------------


MODES = KILL_MODES if SOAK else ("one way a backend",)
"""How the upgrades are killed: both ways on both backends in ``make soak``; in ``make test``
SQLite's by ``os._exit`` and PostgreSQL's by SIGKILL (:func:`kill_mode`)."""


def kill_mode(mode: str, url: str) -> str:
    return mode if mode in KILL_MODES else KILL_MODES[url.startswith("postgresql")]


@pytest.mark.parametrize("mode", MODES)
def test_an_upgrade_killed_at_any_statement_leaves_the_old_revision_and_the_next_open_ends_it(
    db_url, tmp_path, representative_rows, mode, reliability_report
):
    mode = kill_mode(mode, db_url)
    before = old_ledger(db_url, representative_rows)

    kills = 0
    for at in kill_positions():
        child = run_forked(
            {"role": "upgrade", "url": db_url, "kill_at": at, "kill": mode}, tmp_path, f"at-{at}"
        )
        if child.returncode == 0 and at != COMMIT:  # fewer writes than that: it upgraded
            break
        assert child.returncode == expected_status(mode), f"{child.result}\n{child.describe()}"
        assert_untouched(db_url, before)
        kills += 1

    assert child.result is not None and "ok" in child.result, child.describe()
    writes = child.result["ok"]["writes"]
    assert len(writes) == kills - 1  # every write was a kill position, and the COMMIT too
    assert_upgraded(db_url, before)
    reliability_report(
        f"{PREVIOUS}->{HEAD} with the harness's rows, killed ({mode}) at each of its "
        f"{len(writes)} schema writes and at its COMMIT: {kills} kills, each leaving "
        f"{PREVIOUS}, its schema and its rows exactly; the next open upgraded it whole"
    )


def test_a_first_migration_killed_part_way_leaves_no_schema_and_the_next_open_makes_it(
    db_url, tmp_path, reliability_report
):
    kills, positions = 0, []
    for at in kill_positions():
        if isinstance(at, int) and not SOAK and at & (at - 1):
            continue  # make test: powers of two only
        child = run_forked({"role": "upgrade", "url": db_url, "kill_at": at}, tmp_path, f"at-{at}")
        if child.returncode == 0 and at != COMMIT:
            break
        assert child.returncode == -signal.SIGKILL, f"{child.result}\n{child.describe()}"
        assert empty(db_url), f"killed at {at}, the first migration left tables behind"
        kills += 1
        positions.append(str(at))

    assert child.result is not None and "ok" in child.result, child.describe()
    writes = len(child.result["ok"]["writes"])
    if SOAK:
        assert kills == writes + 1
    assert_upgraded(db_url, None)
    where = f"each of its {writes} schema writes" if SOAK else f"writes {', '.join(positions[1:])}"
    reliability_report(
        f"a first migration killed at its COMMIT and at {where} (of {writes}): {kills} kills, "
        "each leaving no table; the next open migrated it whole"
    )


# --- several processes at once ------------------------------------------------------------------


def test_processes_opening_an_old_ledger_at_once_all_succeed_and_one_of_them_migrates_it(
    db_url, tmp_path, representative_rows, reliability_report
):
    before = old_ledger(db_url, representative_rows)

    finished = run_forked_together(
        {f"opener-{n}": {"role": "upgrade", "url": db_url} for n in range(OPENERS)}, tmp_path
    )

    results = {name: child.result for name, child in finished.items()}
    assert all(child.returncode == 0 for child in finished.values()), results
    assert all(r is not None and "ok" in r for r in results.values()), results
    writes = sorted(len(r["ok"]["writes"]) for r in results.values() if r is not None)
    assert writes[:-1] == [0] * (OPENERS - 1) and writes[-1] > 0, results
    assert_upgraded(db_url, before)
    reliability_report(
        f"{OPENERS} processes opened one {PREVIOUS} ledger at once: all succeeded, one migrated "
        f"({writes[-1]} writes), the others waited; rows intact"
    )


def test_a_process_killed_while_holding_the_migration_lock_does_not_stop_the_others(
    db_url, tmp_path, representative_rows, reliability_report
):
    before = old_ledger(db_url, representative_rows)
    holding = tmp_path / "holding"
    opener = {"role": "upgrade", "url": db_url, "after": str(holding)}
    specs = {f"opener-{n}": opener for n in range(1, OPENERS)}
    # It takes the lock first, lets the others queue behind it, and dies at its first write.
    specs["opener-0"] = {"role": "upgrade", "url": db_url, "kill_at": 1, "holding": str(holding)}
    specs["opener-0"]["hold"] = 0.3

    finished = run_forked_together(specs, tmp_path)

    results = {name: child.result for name, child in finished.items()}
    killer = finished.pop("opener-0")
    assert killer.returncode == -signal.SIGKILL, killer.describe()
    assert all(child.returncode == 0 for child in finished.values()), results
    assert all(c.result is not None and "ok" in c.result for c in finished.values()), results
    migrated = [c for c in finished.values() if c.result and c.result["ok"]["writes"]]
    assert len(migrated) == 1, results
    assert_upgraded(db_url, before)
    reliability_report(
        f"{OPENERS} processes opened one {PREVIOUS} ledger at once; the one holding the "
        f"migration lock was killed at its first schema write with the other {OPENERS - 1} "
        "queued behind it: they all succeeded, one of them migrated; rows intact"
    )
