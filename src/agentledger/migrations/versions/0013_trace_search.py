"""Full-text search over the trace: the arguments and the result of every tool execution
(``Ledger.search(..., trace=True)``, ``agentledger search``).

Revision ID: 0013
Revises: 0012

As revision 0002 does for conversation messages. SQLite: an FTS5 table holding its own copy of
each tool execution's arguments (their JSON text) and result, keyed by the execution's id and
kept in step by triggers, filled here with the executions already recorded. PostgreSQL: a GIN
index over the tsvector of the first 100,000 characters of the arguments' text and the result,
the bound revision 0011 gives the messages' index (a tsvector over 1 MB is refused).

Nothing else changes: no column, no checksum (the index is derived from the rows, and
forgetting a conversation deletes its tool executions, whose triggers delete their entries).
This revision copies what it runs; it imports nothing of the live package.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_SEARCH = (
    """CREATE VIRTUAL TABLE tool_executions_fts USING fts5(
    arguments, result, tool_execution_id UNINDEXED, run_id UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER tool_executions_fts_insert AFTER INSERT ON tool_executions
BEGIN
    INSERT INTO tool_executions_fts (arguments, result, tool_execution_id, run_id)
    VALUES (new.arguments, new.result, new.id, new.run_id);
END""",
    """CREATE TRIGGER tool_executions_fts_delete AFTER DELETE ON tool_executions
BEGIN
    DELETE FROM tool_executions_fts WHERE tool_execution_id = old.id;
END""",
    """CREATE TRIGGER tool_executions_fts_update
AFTER UPDATE OF arguments, result ON tool_executions
BEGIN
    UPDATE tool_executions_fts SET arguments = new.arguments, result = new.result
    WHERE tool_execution_id = old.id;
END""",
)
_SQLITE_BACKFILL = (
    "INSERT INTO tool_executions_fts (arguments, result, tool_execution_id, run_id) "
    "SELECT arguments, result, id, run_id FROM tool_executions ORDER BY rowid"
)
_POSTGRESQL_SEARCH = (
    "CREATE INDEX tool_executions_fts ON tool_executions USING gin (to_tsvector('simple', "
    "left(coalesce(arguments::text, '') || ' ' || result, 100000)))"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _SQLITE_SEARCH:
            op.execute(statement)
        op.execute(_SQLITE_BACKFILL)
    else:
        op.execute(_POSTGRESQL_SEARCH)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER tool_executions_fts_{trigger}")
        op.execute("DROP TABLE tool_executions_fts")
    else:
        op.execute("DROP INDEX tool_executions_fts")
