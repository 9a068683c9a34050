"""Reading back what the ledger holds: a run's steps, the state of a run in progress rebuilt
from its rows, and conversations loaded for a new run (each handle keeps the ones it loaded, and
reads only what was added since).

Every row is checked against its checksum as it is read (:mod:`agentledger.ledger.checksums`)
and every sequence for gaps, so a damaged file gives :class:`LedgerCorruptError`, never a
shorter or different answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, false, func, select

from .._values import (
    AgentState,
    AgentStatus,
    ExecutionBudget,
    MessageStore,
    new_id,
)
from ..errors import NotFoundError
from ._connection_reads import ConnectionReads
from ._engine import Database
from ._lookup import check_id
from ._queries import buffer_rows, counted_steps, load_steps, message_rows
from ._row_mapping import appended, in_sequence, store_of
from ._statements import send, statements_for
from ._stored_messages import stored_messages
from .checksums import check_row
from .tables import (
    agent_runs,
    conversation_messages,
    conversations,
    execution_buffer_rows,
)

_LAST_SEQ = select(func.max(conversation_messages.c.seq).label("last")).where(
    conversation_messages.c.conversation_id == bindparam("conversation_id")
)


def next_seq(conn: Connection, conversation_id: str) -> int:
    """The next position in a conversation."""
    (row,) = statements_for(conn.dialect).select(
        conn, _LAST_SEQ, {"conversation_id": conversation_id}
    )
    return 0 if row["last"] is None else int(row["last"]) + 1


def next_buffer_seq(conn: Connection, run_id: str) -> int:
    """The next position in a run's execution buffer."""
    column = execution_buffer_rows.c
    last = conn.execute(select(func.max(column.seq)).where(column.run_id == run_id)).scalar()
    return 0 if last is None else int(last) + 1


def rebuild_state(conn: Connection, run: Mapping[Any, Any]) -> AgentState:
    """The state of a run as the ledger holds it: the conversation, the buffer, the steps."""
    run_id = run["id"]
    check_row(agent_runs, run)
    reads = ConnectionReads(conn)
    messages = message_rows(reads, run["conversation_id"])
    buffer = buffer_rows(reads, run_id)
    steps = load_steps(reads, run_id)
    counted_steps(steps, run_id, run["step_count"])
    state = AgentState(
        conversation_id=run["conversation_id"],
        run_id=run_id,
        parent_run_id=run["parent_run_id"],
        root_run_id=run["root_run_id"],
        depth=run["depth"],
        step_executions=steps,
        status=AgentStatus.RUNNING,
        budget=ExecutionBudget.model_validate(run["budget"] or {}),
        run_started_at=run["started_at"],
    )
    return state.with_message_store(store_of([*messages, *buffer]))


# --- conversations loaded for a new run -----------------------------------------------------------

_HEAD = select(
    conversations.c.id,
    select(func.max(conversation_messages.c.seq))
    .where(conversation_messages.c.conversation_id == bindparam("conversation_id"))
    .scalar_subquery()
    .label("last_seq"),
    select(func.max(conversation_messages.c.seq))
    .where(
        conversation_messages.c.conversation_id == bindparam("conversation_id"),
        conversation_messages.c.in_context.is_(false()),
    )
    .scalar_subquery()
    .label("replaced"),
).where(conversations.c.id == bindparam("conversation_id"))
"""A conversation, if it exists, the position of its last message, and that of the last
message a summary replaced."""
_HEADS_IN_SCOPE = {
    (True, False): _HEAD.where(conversations.c.tenant_id == bindparam("tenant")),
    (False, True): _HEAD.where(conversations.c.owner_id == bindparam("owner")),
    (True, True): _HEAD.where(
        conversations.c.tenant_id == bindparam("tenant"),
        conversations.c.owner_id == bindparam("owner"),
    ),
}
""":data:`_HEAD` in a scope (by whether it has a tenant, an owner), built once like it."""
_MESSAGES_AFTER = (
    select(conversation_messages)
    .where(
        conversation_messages.c.conversation_id == bindparam("conversation_id"),
        conversation_messages.c.seq > bindparam("after"),
    )
    .order_by(conversation_messages.c.seq)
)


@dataclass(frozen=True)
class _Loaded:
    """A conversation as loaded: its store, from ``start`` (after what summaries replaced) up
    to ``last_seq``."""

    last_seq: int
    start: int
    store: MessageStore


class ConversationLoader:
    """Loads conversations for new runs, keeping the ones it loaded (least recently used
    dropped first). Conversations only grow, so a load reads only the rows added since the
    last one: loading stays as cheap at a thousand turns as at ten. What a summary replaced
    comes before everything still in the context: a load starts after it, and a compaction
    since the last load makes it read the context again."""

    def __init__(self, database: Database, size: int = 256) -> None:
        self.database = database
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()
        scope = database.scope
        self._head = (
            _HEAD
            if scope.everything
            else _HEADS_IN_SCOPE[scope.tenant_id is not None, scope.owner_id is not None]
        )

    def scoped(self, database: Database) -> ConversationLoader:
        """A loader for a scoped handle's ``database`` sharing what this one keeps: its head
        query keeps to the scope, so what is kept is only served for a conversation in it."""
        loader = ConversationLoader(database, self._size)
        loader._loaded, loader._lock = self._loaded, self._lock
        return loader

    def load(self, conversation_id: str | None) -> AgentState:
        """The conversation's committed messages in the context, as a state ready for a new
        run (a new conversation when ``conversation_id`` is None)."""
        if conversation_id is None:
            return AgentState.empty(conversation_id=new_id())
        check_id("conversation", conversation_id)
        what = f"loading conversation {conversation_id}"
        loaded = self.database.read(what, lambda conn: self._read(conn, conversation_id))
        self._keep(conversation_id, loaded)
        return AgentState.empty(conversation_id=conversation_id).with_message_store(loaded.store)

    def _read(self, conn: Connection, conversation_id: str) -> _Loaded:
        sql = statements_for(conn.dialect)
        scope = self.database.scope
        values = {"conversation_id": conversation_id, "tenant": scope.tenant_id}
        head = sql.select(conn, self._head, {**values, "owner": scope.owner_id})
        if not head:
            raise NotFoundError(
                f"no conversation {conversation_id!r} in this ledger "
                "(see `agentledger conversations`)"
            )
        last_seq = -1 if head[0]["last_seq"] is None else int(head[0]["last_seq"])
        start = 0 if head[0]["replaced"] is None else int(head[0]["replaced"]) + 1
        loaded = self._kept(conversation_id)
        if loaded is None or loaded.last_seq > last_seq or loaded.start != start:
            loaded = _Loaded(start - 1, start, MessageStore())
        if loaded.last_seq < last_seq:
            after = {"conversation_id": conversation_id, "after": loaded.last_seq}
            what = f"conversation {conversation_id}"
            if conn.dialect.name == "sqlite":  # from the stored values (a cold load's path)
                compiled = sql.of(_MESSAGES_AFTER)
                sent = send(conn, compiled.sql, compiled.params(after))
                sections = stored_messages(compiled, sent, loaded.last_seq + 1, what)
                store = appended(loaded.store, sections)
            else:
                rows = sql.select(conn, _MESSAGES_AFTER, after)
                store = store_of(in_sequence(rows, "seq", loaded.last_seq + 1, what), loaded.store)
            loaded = _Loaded(last_seq, start, store)
        return loaded

    def _kept(self, conversation_id: str) -> _Loaded | None:
        with self._lock:
            entry = self._loaded.get(conversation_id)
            if entry is not None:
                self._loaded.move_to_end(conversation_id)
            return entry

    def _keep(self, conversation_id: str, entry: _Loaded) -> None:
        with self._lock:
            self._loaded[conversation_id] = entry
            self._loaded.move_to_end(conversation_id)
            while len(self._loaded) > self._size:
                self._loaded.popitem(last=False)
