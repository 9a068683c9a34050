"""Analytics in a scope: only the rows of one tenant, of one owner, or of both.

``Analytics.open(url, tenant_id=..., owner_id=...)`` keeps every view, method, export and
report to the scope by narrowing the tables the views read (``ledger.<table>``), never the
views themselves, so the SQL files stay one for every scope. The tenant keeps each table's
rows by its own ``tenant_id`` (every ledger table has one since revision 0010); the owner
keeps conversations, runs and the forget log by their ``owner_id``, and the other tables by
their conversation (messages, compactions) or their run (steps, tool calls, buffer rows).

Over the ledger itself, the ledger is attached as :data:`SOURCE` and ``ledger`` is an
in-memory database of views, one per table of :data:`TABLES`, each the scope's rows of the
ledger's table; the ledger's other tables (the full-text index, the change bookkeeping) are
not given at all. A cache (``_cache``) copies the scope's rows only, read through the same
conditions, run by the ledger's own database.

On PostgreSQL the tenant also travels in the connection: the scanner's libpq connection
starts with ``agentledger.tenant_id`` set (:func:`libpq_target`), the setting the ledger's
row-level security policies compare every row with, so a role subject to them sees the
tenant's rows, and only those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..ledger import TENANT_SETTING, Scope
from ..ledger.migrate import VERSION_TABLE
from ._duckdb import identifier, quoted

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

WHOLE_LEDGER = Scope()
"""No scope: every row."""
SOURCE = "scoped_source"
"""The name the ledger is attached under when ``ledger`` holds the scoped views."""

_OWNED = ("conversations", "agent_runs", "forget_log")
"""The tables with an ``owner_id`` of their own."""
_BY_CONVERSATION = ("conversation_messages", "context_compactions")
"""The tables whose owner is their conversation's."""
_BY_RUN = ("execution_buffer_rows", "step_executions", "tool_executions")
"""The tables whose owner is their run's."""
TABLES = (VERSION_TABLE, *_OWNED, *_BY_CONVERSATION, *_BY_RUN)
"""The ledger's tables a scoped ``Analytics`` gives (the version table whole)."""

Namer = Callable[[str], str]
"""How the SQL a condition runs in names one of the ledger's tables."""


def describe(scope: Scope) -> str:
    """The scope in words: ``tenant 'acme', owner 'ann'``, or ``the whole ledger``."""
    parts = [
        f"{name} {value!r}"
        for name, value in (("tenant", scope.tenant_id), ("owner", scope.owner_id))
        if value is not None
    ]
    return ", ".join(parts) or "the whole ledger"


def condition(scope: Scope, table: str, name: Namer) -> str:
    """The ``WHERE`` condition keeping ``table``'s rows to ``scope``, in SQL that SQLite,
    PostgreSQL and DuckDB all read; ``name`` names the tables a subquery reads."""
    parts = []
    if scope.tenant_id is not None and table != VERSION_TABLE:
        parts.append(f"tenant_id = {quoted(scope.tenant_id)}")
    if scope.owner_id is not None and table != VERSION_TABLE:
        parts.append(_owner_condition(scope, table, name))
    return " AND ".join(parts) or "1 = 1"


def _owner_condition(scope: Scope, table: str, name: Namer) -> str:
    assert scope.owner_id is not None
    if table in _OWNED:
        return f"owner_id = {quoted(scope.owner_id)}"
    parent, key = (
        ("conversations", "conversation_id")
        if table in _BY_CONVERSATION
        else ("agent_runs", "run_id")
    )
    return f"{key} IN (SELECT id FROM {name(parent)} WHERE {condition(scope, parent, name)})"


def scoped_ledger(scope: Scope, name: str, *, postgres: bool) -> list[str]:
    """The statements that make ``name`` an in-memory database of the views of ``scope``'s rows
    of the ledger attached as :data:`SOURCE` (none for the whole ledger, attached as ``name``
    itself)."""
    if scope.everything:
        return []
    return [f"ATTACH ':memory:' AS {name}", *view_statements(scope, postgres=postgres, into=name)]


def view_statements(scope: Scope, *, postgres: bool, into: str) -> list[str]:
    """The statements that make the database ``into`` (attached already) hold, for each of
    :data:`TABLES`, a view of the scope's rows of the ledger attached as :data:`SOURCE`."""
    schema = "public" if postgres else "main"

    def name(table: str) -> str:
        return f"{SOURCE}.{schema}.{identifier(table)}"

    return [
        f"CREATE OR REPLACE VIEW {into}.main.{identifier(table)} AS "
        f"SELECT * FROM {name(table)} WHERE {condition(scope, table, name)}"
        for table in TABLES
    ]


def libpq_target(url: URL, tenant_id: str | None) -> str:
    """``url`` (a PostgreSQL URL) as the libpq URI the scanner connects with; with
    ``tenant_id``, its connections start with ``agentledger.tenant_id`` set to it.

    The setting goes in libpq's ``options`` (``-c name=value``, after any options the URL
    gives), with backslashes and spaces escaped by a backslash (libpq splits the options on
    spaces), then percent-encoded: libpq decodes ``%20``, but would keep the ``+`` that
    SQLAlchemy writes for a space in a query."""
    given = url.query.get("options")
    options = [given] if isinstance(given, str) else list(given or ())
    if tenant_id is not None:
        escaped = tenant_id.replace("\\", "\\\\").replace(" ", "\\ ")
        options.append(f"-c {TENANT_SETTING}={escaped}")
    rest = url.difference_update_query(["options"]).render_as_string(hide_password=False)
    if not options:
        return rest
    encoded = quote(" ".join(options), safe="")
    return f"{rest}{'&' if '?' in rest else '?'}options={encoded}"
