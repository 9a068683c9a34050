"""Change stamps set by the library as it writes; the triggers stamp what anyone else writes.

Revision ID: 0009
Revises: 0008

Revision 0008 stamps every row inserted or updated on SQLite with two statements in a trigger
(raise the counter, then update the row just written with it): for the library's dozens of
rows a turn, the largest part of a turn's statements. From this revision the library gives
its rows their stamp itself: the first stamped write of a transaction raises the counter once
(``UPDATE agentledger_changes ... RETURNING``) and every row the transaction writes carries that
stamp. A stamp still grows in commit order (one writer at a time on SQLite) and a reader that
saw the counter at ``n`` has still seen every row stamped ``n`` or less.

The insert triggers now stamp only a row inserted without one (``WHEN new.change_seq IS NULL``:
SQL written by hand, a tool of another kind); the update triggers already stamp only an update
that leaves the stamp as it was, and the delete triggers are unchanged. PostgreSQL's triggers
set the stamp before every write (the writing transaction's id): nothing changes there. No row
is rewritten; the downgrade restores 0008's insert triggers.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "conversations",
    "conversation_messages",
    "agent_runs",
    "step_executions",
    "tool_executions",
    "context_compactions",
)


def _insert_trigger(table: str, when: str) -> str:
    return f"""CREATE TRIGGER {table}_change_insert AFTER INSERT ON {table}{when}
BEGIN
    UPDATE agentledger_changes SET change_seq = change_seq + 1;
    UPDATE {table} SET change_seq = (SELECT change_seq FROM agentledger_changes)
    WHERE rowid = new.rowid;
END"""


def _replace_insert_triggers(when: str) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        op.execute(f"DROP TRIGGER {table}_change_insert")
        op.execute(_insert_trigger(table, when))


def upgrade() -> None:
    _replace_insert_triggers("\nWHEN new.change_seq IS NULL")


def downgrade() -> None:
    _replace_insert_triggers("")
