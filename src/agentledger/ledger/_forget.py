"""Forgetting: deleting conversations, with every row that came from them, on request.

``Ledger.forget``, ``forget_owner`` and ``forget_inactive`` choose main conversations (in the
handle's scope), then take along everything below them: their messages in every section, their
runs with their steps, tool executions, buffer rows and compactions, and the subagent runs those
runs spawned, with the subagents' own conversations, down the whole tree. All of it goes in one
write transaction, which also writes one ``forget_log`` row (ids, the time, counts: never any
content) and refuses, deleting nothing, while a run holds any of the conversations. A stored
conversation of another conversation that shares their entries (a fork) keeps what it wrote
itself: its history then begins after what was forgotten (``release_forks``).

What deleting leaves behind, per backend:

- SQLite: the ledger's connections write with ``PRAGMA secure_delete`` on (see ``_engine``), so
  the bytes of a deleted row are overwritten, not left in free space. The full-text indexes
  (the messages', the trace's) keep a deleted row's terms in their older segments until they are
  merged: the forgetting transaction merges them all (FTS5's ``optimize``, whose time grows with
  the index). After the
  commit the write-ahead log is checkpointed and truncated, best effort: a reader in progress
  can keep it (``Forgotten.checkpointed`` is then False) and the text stays in the ``-wal``
  file until the next checkpoint.
- PostgreSQL: the deleted rows stay in the tables' files as dead tuples until ``VACUUM`` (or
  autovacuum) reclaims them; no query sees them.

The change-tracking triggers (revision 0008) log every deleted row's id in
``agentledger_deletions``, so an analytics cache drops the rows at its next sync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Table,
    and_,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
)

from .._values import new_id
from ..errors import ConversationBusyError, UsageError
from ._connection_reads import ConnectionReads
from ._engine import Database
from ._lookup import id_by_prefix, not_found
from ._scope import Scope
from ._stored_conversations import release_forks
from .tables import (
    ADK_SESSION_TABLES,
    GRAPH_TABLES,
    LEDGER_TABLES,
    STORE_TABLES,
    ConversationKind,
    adk_events,
    adk_sessions,
    adk_states,
    agent_runs,
    context_compactions,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    forget_log,
    step_executions,
    stored_entries,
    stored_records,
    tool_executions,
)

FORGOTTEN_TABLES = (
    *(table.name for table in (*LEDGER_TABLES, *GRAPH_TABLES, *STORE_TABLES, *ADK_SESSION_TABLES)),
    adk_states.name,
)
"""The tables a forgetting deletes from (every table of a conversation's rows, and the state an
agent framework keeps for an owner it forgets), as ``Forgotten.counts`` lists them."""

_CHUNK = 500
"""Ids bound per statement (SQLite and PostgreSQL both cap a statement's parameters)."""

_OPTIMIZE_SEARCH = {
    "conversation_messages": (
        "INSERT INTO conversation_messages_fts(conversation_messages_fts) VALUES('optimize')"
    ),
    "tool_executions": "INSERT INTO tool_executions_fts(tool_executions_fts) VALUES('optimize')",
}
"""FTS5 merges every segment of an index into one, dropping the deleted rows' terms: the
messages' index, and the trace's (the tool executions' arguments and results)."""


class Forgotten(BaseModel):
    """What a forgetting deleted (or, for a dry run, would delete)."""

    model_config = ConfigDict(frozen=True)

    conversation_ids: tuple[str, ...]
    """Every conversation deleted: those chosen, then their subagents' conversations."""
    counts: dict[str, int]
    """Rows deleted, by table (every table of :data:`FORGOTTEN_TABLES`, zeros included)."""
    dry_run: bool
    """True: nothing was deleted or logged; ``counts`` says what would have gone."""
    log_id: str | None
    """The id of the ``forget_log`` row that records it (``None`` for a dry run)."""
    reason: str
    """As ``forget_log.reason`` holds it: ``conversation``, ``owner`` or ``inactive since
    <ISO time>``."""
    checkpointed: bool | None = None
    """SQLite: whether the write-ahead log was checkpointed and emptied after the commit.
    False: a reader kept it, and the deleted text may remain in the ``-wal`` file until the
    next checkpoint (the next forgetting, or ``PRAGMA wal_checkpoint(TRUNCATE)``). ``None`` on
    PostgreSQL and for a dry run."""

    @property
    def rows(self) -> int:
        """How many rows went, every table together."""
        return sum(self.counts.values())


Choose = Callable[[Connection, Scope], list[str]]
"""Picks the main conversations to forget, in a transaction and a scope."""


@dataclass(frozen=True)
class _Tree:
    """The conversations and runs a forgetting deletes."""

    conversation_ids: list[str]
    run_ids: list[str]
    """Deepest first: a run is deleted before the run that spawned it."""


# --- choosing the conversations ---------------------------------------------------------------


def conversation_ids(given: object) -> list[str]:
    """``forget``'s argument as a list of ids: one id, or several (any iterable of them);
    :class:`UsageError` for anything else, or for none."""
    if not isinstance(given, str | Iterable):
        raise UsageError(f"forget() takes a conversation id or an iterable of ids, not {given!r}")
    ids: list[str] = []
    for one in [given] if isinstance(given, str) else given:
        if not isinstance(one, str) or not one:
            raise UsageError(f"a conversation id is a non-empty text, not {one!r}")
        ids.append(one)
    if not ids:
        raise UsageError("forget() needs a conversation id, or several: none was given")
    return ids


def given_conversations(given: Sequence[str]) -> Choose:
    """The conversations ``given`` (ids or unique prefixes), each in the scope and a main
    conversation."""

    def choose(conn: Connection, scope: Scope) -> list[str]:
        return list(dict.fromkeys(_main_conversation(conn, scope, g) for g in given))

    return choose


def owner_conversations(owner_id: str) -> Choose:
    """Every main conversation of ``owner_id`` in the scope."""
    Scope(owner_id=owner_id)  # the same checks as a scope's owner

    def choose(conn: Connection, scope: Scope) -> list[str]:
        return _main_ids(
            conn, and_(scope.where(conversations), conversations.c.owner_id == owner_id)
        )

    return choose


def inactive_conversations(cutoff: datetime) -> Choose:
    """Every main conversation in the scope with no activity since ``cutoff``: not updated, no
    message written and no run of it started, beating or ending since (its subagents' runs
    happen within its own)."""

    def choose(conn: Connection, scope: Scope) -> list[str]:
        quiet = and_(
            scope.where(conversations),
            conversations.c.updated_at < cutoff,
            ~exists().where(
                conversation_messages.c.conversation_id == conversations.c.id,
                conversation_messages.c.created_at >= cutoff,
            ),
            ~exists().where(
                agent_runs.c.conversation_id == conversations.c.id,
                or_(
                    agent_runs.c.started_at >= cutoff,
                    agent_runs.c.heartbeat_at >= cutoff,
                    agent_runs.c.finished_at >= cutoff,
                ),
            ),
        )
        return _main_ids(conn, quiet)

    return choose


def _main_ids(conn: Connection, condition: ColumnElement[bool]) -> list[str]:
    query = (
        select(conversations.c.id)
        .where(condition, conversations.c.kind == ConversationKind.MAIN.value)
        .order_by(conversations.c.id)
    )
    return list(conn.execute(query).scalars())


def _main_conversation(conn: Connection, scope: Scope, given: str) -> str:
    """The full id of the conversation ``given`` (an id or a unique prefix) in the scope:
    :class:`NotFoundError` when there is none, as for an id that does not exist;
    :class:`UsageError` for a subagent's conversation, which goes with its main one."""
    row = _conversation(conn, scope, given)
    if row is None:
        full_id = id_by_prefix(ConnectionReads(conn), "conversation", given)
        row = _conversation(conn, scope, full_id)
    if row is None:
        raise not_found("conversation", given)
    if row.kind != ConversationKind.MAIN.value:
        raise UsageError(
            f"conversation {row.id} is a subagent's (run {row.parent_run_id} spawned it): it is "
            f"forgotten with the conversation of that run, {_main_of(conn, row.parent_run_id)}. "
            "Forget that one."
        )
    return str(row.id)


def _conversation(conn: Connection, scope: Scope, conversation_id: str) -> Any:
    query = select(conversations.c.id, conversations.c.kind, conversations.c.parent_run_id)
    return conn.execute(
        query.where(conversations.c.id == conversation_id, scope.where(conversations))
    ).first()


def _main_of(conn: Connection, run_id: str | None) -> str:
    """The main conversation of the run tree ``run_id`` belongs to."""
    root = select(agent_runs.c.root_run_id).where(agent_runs.c.id == run_id).scalar_subquery()
    found = conn.execute(
        select(agent_runs.c.conversation_id).where(agent_runs.c.id == root)
    ).scalar()
    return str(found) if found is not None else "(unknown)"


# --- what goes with them ------------------------------------------------------------------------


def _tree(conn: Connection, chosen: list[str]) -> _Tree:
    """``chosen`` and everything below them: their runs, the subagent runs those spawned and
    the subagents' conversations, down to the last level."""
    conversation_ids = list(chosen)
    depths: dict[str, int] = {}
    new_conversations, new_runs = list(chosen), list[str]()
    while new_conversations or new_runs:
        found = _select_in(
            conn,
            select(agent_runs.c.id, agent_runs.c.depth, agent_runs.c.conversation_id),
            (agent_runs.c.conversation_id, new_conversations),
            (agent_runs.c.parent_run_id, new_runs),
        )
        runs = [r for r in found if r.id not in depths]
        depths.update((r.id, r.depth) for r in runs)
        new_runs = [r.id for r in runs]
        spawned = _select_in(
            conn, select(conversations.c.id), (conversations.c.parent_run_id, new_runs)
        )
        below = {r.conversation_id for r in runs} | {c.id for c in spawned}
        new_conversations = sorted(below - set(conversation_ids))
        conversation_ids += new_conversations
    deepest_first = sorted(depths, key=lambda r: (-depths[r], r))
    return _Tree(conversation_ids, deepest_first)


def _select_in(conn: Connection, query: Any, *wheres: tuple[Any, list[str]]) -> list[Any]:
    """The rows of ``query`` whose column is one of its ids, for each ``(column, ids)``."""
    rows: list[Any] = []
    for column, ids in wheres:
        for chunk in _chunks(ids):
            rows += conn.execute(query.where(column.in_(chunk))).all()
    return rows


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield list(ids[start : start + _CHUNK])


def _check_free(conn: Connection, conversation_ids: list[str], now: datetime) -> None:
    """Refuse while a run holds any of the conversations: a lease not expired yet. On
    PostgreSQL the rows are locked first, so that no run takes a lease before the deletion."""
    held: list[Any] = []
    for chunk in _chunks(conversation_ids):
        query = select(
            conversations.c.id, conversations.c.lease_run_id, conversations.c.lease_expires_at
        ).where(conversations.c.id.in_(chunk))
        if conn.dialect.name == "postgresql" and _writing(conn):
            query = query.with_for_update()
        held += [
            r
            for r in conn.execute(query)
            if r.lease_expires_at is not None and r.lease_expires_at > now
        ]
    if held:
        raise ConversationBusyError(
            "nothing was forgotten: a run holds "
            + ", ".join(f"conversation {r.id} (run {r.lease_run_id})" for r in held)
            + ". Wait for the run to finish and forget again; if its process died, "
            "`agentledger recover` (or Ledger.recover) frees the conversation once its lease "
            "expires."
        )


def _writing(conn: Connection) -> bool:
    """Whether ``conn`` is in a write transaction (a dry run's read locks nothing)."""
    return conn.get_execution_options().get("agentledger_write") is True


# --- deleting -----------------------------------------------------------------------------------


def _deletions(tree: _Tree) -> list[tuple[Table, Any, list[str]]]:
    """What to delete, children before their parents (the foreign keys are checked at the end
    of every statement): ``(table, column, ids)``."""
    conversation_ids, run_ids = tree.conversation_ids, tree.run_ids
    return [
        *((table, table.c.thread_id, conversation_ids) for table in reversed(GRAPH_TABLES)),
        (adk_events, adk_events.c.conversation_id, conversation_ids),
        (adk_sessions, adk_sessions.c.id, conversation_ids),
        (stored_entries, stored_entries.c.conversation_id, conversation_ids),
        (stored_records, stored_records.c.id, conversation_ids),
        (context_compactions, context_compactions.c.conversation_id, conversation_ids),
        (tool_executions, tool_executions.c.run_id, run_ids),
        (step_executions, step_executions.c.run_id, run_ids),
        (execution_buffer_rows, execution_buffer_rows.c.run_id, run_ids),
        (conversation_messages, conversation_messages.c.conversation_id, conversation_ids),
        (agent_runs, agent_runs.c.id, run_ids),
        (conversations, conversations.c.id, conversation_ids),
    ]


def _delete(conn: Connection, tree: _Tree, *, dry_run: bool) -> dict[str, int]:
    """Delete the tree's rows (a dry run counts them); how many, by table."""
    counts = dict.fromkeys(FORGOTTEN_TABLES, 0)
    for table, column, ids in _deletions(tree):
        for chunk in _chunks(ids):
            if dry_run:
                counting = select(func.count()).select_from(table).where(column.in_(chunk))
                counted = conn.execute(counting).scalar()
            else:
                counted = conn.execute(delete(table).where(column.in_(chunk))).rowcount
            counts[table.name] += int(counted or 0)
    if not dry_run and conn.dialect.name == "sqlite":
        for indexed, optimize in _OPTIMIZE_SEARCH.items():
            if counts[indexed]:
                conn.exec_driver_sql(optimize)
    return counts


def _delete_owner_state(conn: Connection, scope: Scope, owner_id: str, *, dry_run: bool) -> int:
    """Delete the state an agent framework's sessions keep for ``owner_id`` (ADK's ``user:``
    state, of each app in the scope); how many rows (a dry run counts them)."""
    where = adk_states.c.owner_id == owner_id
    if scope.tenant_id is not None:
        where = where & (adk_states.c.tenant_id == scope.tenant_id)
    if dry_run:
        return int(
            conn.execute(select(func.count()).select_from(adk_states).where(where)).scalar() or 0
        )
    return int(conn.execute(delete(adk_states).where(where)).rowcount or 0)


def _log(
    conn: Connection,
    scope: Scope,
    *,
    owner_id: str | None,
    reason: str,
    tree: _Tree,
    counts: dict[str, int],
    now: datetime,
) -> str:
    """The ``forget_log`` row: ids, the time and counts, never any content."""
    log_id = new_id()
    conn.execute(
        insert(forget_log),
        {
            "id": log_id,
            "forgotten_at": now,
            "tenant_id": scope.tenant_id,
            "owner_id": owner_id if owner_id is not None else scope.owner_id,
            "reason": reason,
            "conversation_ids": list(tree.conversation_ids),
            "counts": counts,
        },
    )
    return log_id


# --- the whole operation ------------------------------------------------------------------------


def forget_chosen(
    database: Database,
    choose: Choose,
    *,
    reason: str,
    owner_id: str | None = None,
    dry_run: bool = False,
) -> Forgotten:
    """Forget the conversations ``choose`` picks, and everything below them, in one write
    transaction (a dry run reads only), then empty SQLite's write-ahead log."""
    scope = database.scope

    def work(conn: Connection) -> Forgotten:
        now = database.clock()
        tree = _tree(conn, choose(conn, scope))
        _check_free(conn, tree.conversation_ids, now)
        if not dry_run:
            release_forks(conn, tree.conversation_ids)
        counts = _delete(conn, tree, dry_run=dry_run)
        if owner_id is not None:
            counts[adk_states.name] = _delete_owner_state(conn, scope, owner_id, dry_run=dry_run)
        log_id = None
        if not dry_run:
            log_id = _log(
                conn, scope, owner_id=owner_id, reason=reason, tree=tree, counts=counts, now=now
            )
        ids = tuple(tree.conversation_ids)
        return Forgotten(
            conversation_ids=ids, counts=counts, dry_run=dry_run, log_id=log_id, reason=reason
        )

    if dry_run:
        return database.read("counting what forgetting would delete", work)
    done = database.write("forgetting conversations", work)
    if database.engine.dialect.name != "sqlite":
        return done
    return done.model_copy(update={"checkpointed": checkpoint(database.engine)})


def checkpoint(engine: Engine) -> bool:
    """Copy SQLite's write-ahead log into the database file and truncate it, waiting for the
    readers in progress up to the busy timeout; whether it was done (False: a reader kept it)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            busy, _log_frames, _done = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            cursor.close()
    finally:
        raw.close()
    return not busy


def inactive_since(older_than: timedelta, now: datetime) -> datetime:
    """The moment ``older_than`` before ``now``; :class:`UsageError` unless it is positive."""
    if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
        raise UsageError(
            f"older_than must be a positive timedelta (such as timedelta(days=90)), not "
            f"{older_than!r}"
        )
    try:
        return now - older_than
    except OverflowError:
        raise UsageError(
            f"older_than {older_than} reaches back before the year 1: give a shorter time"
        ) from None
