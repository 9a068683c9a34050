"""Verification: finding damage in a ledger, at open (a quick probe of every table) and on
demand (every row against its checksum, every position, every count; on SQLite the file's own
checks too).

SQLite keeps no checksum of its pages; a damaged page reads as an error when SQLite notices
and as a different value when it does not. The probe at open reads the first page of every
table, which finds most damage at once; :func:`find_damage` reads everything.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, func, or_, select, true
from sqlalchemy.exc import DatabaseError

from .._values import AgentStatus, Role
from ._access import probe_sqlite_tables
from .checksums import COVERED, damaged_rows
from .tables import (
    agent_runs,
    conversation_messages,
    metadata,
    step_executions,
    tool_executions,
)

FULL_TEXT_TABLES = ("conversation_messages_fts", "tool_executions_fts")
"""The full-text indexes of a SQLite ledger: the messages' (revision 0002), the trace's (0013)."""

_FTS_CHECK = "INSERT INTO {table}({table}) VALUES('integrity-check')"
"""FTS5's own check of its index against the text it holds (``PRAGMA integrity_check`` does not
look inside a full-text index)."""

_POSITIONS = {
    "conversation_messages": ("conversation_id", "seq"),
    "execution_buffer_rows": ("run_id", "seq"),
    "step_executions": ("run_id", "step_index"),
    "tool_executions": ("step_id", "position"),
}
"""The tables whose rows are numbered within their owner, contiguously from 0."""


def probe_sqlite(engine: Engine, *, integrity: bool) -> None:
    """Read every table's first page (and, with ``integrity``, check every page): damage shows
    here as an error instead of later as a wrong answer."""
    with engine.connect() as conn:
        probe_sqlite_tables(lambda sql: conn.exec_driver_sql(sql).all())
        if integrity:
            problems = sqlite_problems(conn)
            if problems:
                raise sqlite3.DatabaseError(
                    "database disk image is malformed: " + "; ".join(problems[:5])
                )


def sqlite_problems(conn: Connection) -> list[str]:
    """What SQLite finds wrong with the file: ``integrity_check`` (pages, and every index
    against its table) and FTS5's check of each full-text index."""
    found = conn.exec_driver_sql("PRAGMA integrity_check").scalars().all()
    problems = [f"integrity_check: {p}" for p in found if p != "ok"]
    names = ", ".join(f"'{table}'" for table in FULL_TEXT_TABLES)
    indexes = conn.exec_driver_sql(
        f"SELECT name FROM sqlite_master WHERE name IN ({names}) ORDER BY name"
    ).scalars()
    return problems + _full_text_problems(conn, list(indexes))


def _full_text_problems(conn: Connection, indexes: list[str]) -> list[str]:
    """FTS5's check of the full-text ``indexes``. FTS5 runs it as an INSERT, which a read-only
    connection may not run: there it runs on a copy of the database (its pages copied as they
    are, damage included) in the temporary directory, never beside the ledger."""
    if not indexes:
        return []
    if conn.exec_driver_sql("PRAGMA query_only").scalar():
        return _full_text_problems_of_copy(conn, indexes)
    problems = []
    for table in indexes:
        try:
            conn.exec_driver_sql(_FTS_CHECK.format(table=table))
        except DatabaseError as exc:
            problems.append(_index_problem(table, str(exc.orig)))
    return problems


def _full_text_problems_of_copy(conn: Connection, indexes: list[str]) -> list[str]:
    source = conn.connection.dbapi_connection
    assert isinstance(source, sqlite3.Connection)
    problems = []
    with (
        tempfile.TemporaryDirectory(prefix="agentledger-verify-") as folder,
        contextlib.closing(sqlite3.connect(Path(folder) / "copy.db")) as copy,
    ):
        source.backup(copy)
        for table in indexes:
            try:
                copy.execute(_FTS_CHECK.format(table=table))
            except sqlite3.DatabaseError as exc:
                problems.append(_index_problem(table, str(exc)))
    return problems


def _index_problem(table: str, error: str) -> str:
    index = "the full-text index" if table == FULL_TEXT_TABLES[0] else "the trace's full-text index"
    return f"{index}: {' '.join(error.split())}"


def find_damage(conn: Connection) -> list[str]:
    """Everything wrong with the ledger, one line per problem (empty: all is well)."""
    problems: list[str] = []
    if conn.dialect.name == "sqlite":
        problems += sqlite_problems(conn)
        for row in conn.exec_driver_sql("PRAGMA foreign_key_check").all():
            problems.append(f"foreign_key_check: row {row[1]} of {row[0]} refers to no {row[2]}")
    problems += damaged_rows(conn)
    problems += _gaps(conn)
    problems += _miscounted_steps(conn)
    problems += _miscounted_tool_calls(conn)
    problems += _misplaced_interrupted_answers(conn)
    problems += _misplaced_interrupted_steps(conn)
    return problems


def _gaps(conn: Connection) -> list[str]:
    """Owners whose rows are not numbered 0, 1, 2...: a row was lost."""
    problems: list[str] = []
    for name, (owner, position) in _POSITIONS.items():
        table = metadata.tables[name]
        gaps = conn.execute(
            select(table.c[owner], func.count(), func.min(table.c[position]))
            .group_by(table.c[owner])
            .having(
                or_(
                    func.min(table.c[position]) != 0,
                    func.max(table.c[position]) != func.count() - 1,
                )
            )
        ).all()
        problems += [f"{name}: the positions of {g[0]} have gaps" for g in gaps]
    return problems


def _miscounted_steps(conn: Connection) -> list[str]:
    """Runs with fewer (or more) step rows than they counted: a step lost at the end."""
    found = _miscounted(conn, agent_runs.c.step_count, step_executions.c.run_id)
    return [f"run {run} counted {n} steps but has {rows} step rows" for run, n, rows in found]


def _miscounted_tool_calls(conn: Connection) -> list[str]:
    """Steps with fewer (or more) tool rows than the tool calls they counted: a tool execution
    lost at the end of a step."""
    found = _miscounted(
        conn, step_executions.c.tool_call_count, tool_executions.c.step_id, step_executions.c.run_id
    )
    return [
        f"run {run}, step {step}: called {n} tool(s), has {rows} tool execution(s)"
        for step, run, n, rows in found
    ]


def _miscounted(conn: Connection, counted: Any, owner: Any, *also: Any) -> list[tuple[Any, ...]]:
    """The owners (their id, the columns ``also``, the count they hold, their rows) whose
    ``counted`` column differs from the rows of the child table that name them in ``owner``."""
    children = select(owner.label("owner"), func.count().label("n")).group_by(owner).subquery()
    rows = func.coalesce(children.c.n, 0)
    parent = counted.table
    query = (
        select(parent.c.id, *also, counted, rows)
        .outerjoin(children, children.c.owner == parent.c.id)
        .where(counted != rows)
    )
    return [tuple(row) for row in conn.execute(query)]


def _misplaced_interrupted_answers(conn: Connection) -> list[str]:
    """Interrupted answers out of place: each is an assistant message of an ``interrupted``
    run, and the only assistant message of its run in the conversation (nothing answered
    after it, nothing before it that the cut answer would contradict)."""
    messages, runs = conversation_messages.c, agent_runs.c
    strays = conn.execute(
        select(messages.id, messages.run_id, messages.role, runs.status)
        .outerjoin(agent_runs, runs.id == messages.run_id)
        .where(
            messages.interrupted == true(),
            or_(
                messages.role != Role.ASSISTANT.value,
                runs.status.is_(None),
                runs.status != AgentStatus.INTERRUPTED.value,
            ),
        )
    ).all()
    problems = [
        f"interrupted message {m.id} is a {m.role} message of run {m.run_id} "
        f"({m.status or 'no run'}): only an interrupted run's answer is flagged interrupted"
        for m in strays
    ]
    cut = select(messages.run_id).where(messages.interrupted == true())
    doubled = conn.execute(
        select(messages.run_id, func.count())
        .where(messages.role == Role.ASSISTANT.value, messages.run_id.in_(cut))
        .group_by(messages.run_id)
        .having(func.count() > 1)
    ).all()
    problems += [
        f"run {run} has {n} assistant messages in its conversation, one of them interrupted: "
        "an interrupted answer is its run's only one"
        for run, n in doubled
    ]
    return problems


def _misplaced_interrupted_steps(conn: Connection) -> list[str]:
    """Interrupted steps out of place: each is the last step of an ``interrupted`` run (the
    step its cancel cut short)."""
    steps, runs = step_executions.c, agent_runs.c
    strays = conn.execute(
        select(steps.id, steps.run_id, steps.step_index, runs.status, runs.step_count)
        .join(agent_runs, runs.id == steps.run_id)
        .where(
            steps.interrupted == true(),
            or_(
                runs.status != AgentStatus.INTERRUPTED.value,
                steps.step_index != runs.step_count - 1,
            ),
        )
    ).all()
    return [
        f"step {s.step_index} of run {s.run_id} ({s.status}, {s.step_count} steps) is flagged "
        "interrupted: only the last step of an interrupted run is"
        for s in strays
    ]


def count_rows(conn: Connection) -> dict[str, tuple[int, int]]:
    """Each table's rows, and how many of them carry a checksum, by table name."""
    counted: dict[str, tuple[int, int]] = {}
    for name in COVERED:
        table = metadata.tables[name]
        rows, sealed_rows = conn.execute(select(func.count(), func.count(table.c.checksum))).one()
        counted[name] = (rows, sealed_rows)
    return counted
