"""What changed in a ledger since a reader last looked (``Ledger.changes_since``): the
conversations and runs whose rows were written, found by their change stamps (``change_seq``,
``schema/README.md`` "Change tracking") through the index every stamped table has on them.

A reader keeps the stamp each answer gives and asks again with it. The mark is read before the
rows (:data:`CHANGE_MARK_SQL`), so a change committed while the rows are read is found
again next time, never missed: an id may come twice, a change never goes unseen.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..errors import LedgerOpenError
from ._scope import Scope
from ._sql import Reads, in_scope, scope_params

CHANGE_MARK_SQL = {
    "sqlite": "SELECT change_seq + 1 FROM agentledger_changes",
    "postgresql": "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
}
"""The ledger's *mark*, by dialect: the lowest stamp a change not yet committed can get. On
SQLite, the counter stamps come from plus one (one writer at a time: stamps grow in commit
order); on PostgreSQL, where a stamp is the writing transaction's id, the ``xmin`` of the
reader's snapshot (every transaction below it has ended). Read before the rows: a reader that
then reads the rows stamped at or above its previous mark misses no change."""


class ChangedSince(BaseModel):
    """What changed since a stamp: the conversations whose row or messages were written, and
    the runs whose row, steps or tool executions were, in the reader's scope; and whether rows
    were deleted (a conversation forgotten: the log of deletions keeps no tenant, so this is
    told in every scope). ``stamp`` is what to ask with next time."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    stamp: int
    conversation_ids: frozenset[str] = frozenset()
    run_ids: frozenset[str] = frozenset()
    deleted: bool = False

    def __bool__(self) -> bool:
        """Whether anything changed: a conversation or run named, or rows deleted."""
        return bool(self.conversation_ids or self.run_ids or self.deleted)


_DELETED = "SELECT 1 FROM agentledger_deletions WHERE change_seq >= :since LIMIT 1"


def _changed_conversations(scope: Scope) -> str:
    return (
        f"SELECT id FROM conversations WHERE change_seq >= :since {in_scope(scope)}"
        "UNION SELECT c.id FROM conversation_messages m JOIN conversations c "
        f"ON c.id = m.conversation_id WHERE m.change_seq >= :since {in_scope(scope, 'c')}"
    )


def _changed_runs(scope: Scope) -> str:
    """The runs written since, and those whose steps or tool executions were (a step is
    committed with its tool executions; a tool execution is not rewritten alone today, but a
    writer outside the library may)."""
    written_below = " ".join(
        f"UNION SELECT r.id FROM {table} t JOIN agent_runs r ON r.id = t.run_id "
        f"WHERE t.change_seq >= :since {in_scope(scope, 'r')}"
        for table in ("step_executions", "tool_executions")
    )
    return f"SELECT id FROM agent_runs WHERE change_seq >= :since {in_scope(scope)}{written_below}"


def changes(reads: Reads, scope: Scope, since: int | None) -> ChangedSince:
    """The ledger's mark, then what changed at or above ``since`` (``None``: the mark alone,
    to start from)."""
    found = reads.rows(CHANGE_MARK_SQL[reads.dialect], {})
    if not found or None in found[0].values():
        raise LedgerOpenError(
            "the ledger has no row in agentledger_changes (made by revision 0008): it was "
            "damaged. Restore it from a backup."
        )
    stamp = int(next(iter(found[0].values())))
    if since is None:
        return ChangedSince(stamp=stamp)
    params = {"since": since, **scope_params(scope)}
    return ChangedSince(
        stamp=stamp,
        conversation_ids=frozenset(
            r["id"] for r in reads.rows(_changed_conversations(scope), params)
        ),
        run_ids=frozenset(r["id"] for r in reads.rows(_changed_runs(scope), params)),
        deleted=bool(reads.rows(_DELETED, {"since": since})),
    )
