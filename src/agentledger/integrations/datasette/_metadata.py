"""The metadata: the schema's documentation, and the canned queries read from their files."""

from __future__ import annotations

from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from ...ledger.schema import TableDoc, documentation

CANNED_QUERIES = (
    "conversation",
    "run_trace",
    "run_tree",
    "expensive_runs",
    "slowest_tools",
    "search",
)
"""The canned queries, in the order Datasette lists them: ``queries/NAME.sql`` each."""

DEFAULT_DATABASE = "agentledger"
"""Datasette's name for ``agentledger.db`` (it names a database by its file's stem)."""

_UNDOCUMENTED = (
    TableDoc(
        name="conversation_messages_fts",
        description="Full-text search on SQLite: an FTS5 table holding a copy of each "
        "conversation message's text, kept in step by triggers (the search query uses it).",
        columns={
            "content": "the message's text (conversation_messages.content)",
            "message_id": "the message (conversation_messages.id)",
            "conversation_id": "its conversation (conversation_messages.conversation_id)",
        },
    ),
    TableDoc(
        name="tool_executions_fts",
        description="Full-text search over the trace on SQLite: an FTS5 table holding a copy "
        "of each tool execution's arguments (their JSON text) and result, kept in step by "
        "triggers (agentledger search uses it).",
        columns={
            "arguments": "the call's arguments (tool_executions.arguments)",
            "result": "what the tool returned (tool_executions.result)",
            "tool_execution_id": "the tool execution (tool_executions.id)",
            "run_id": "its run (tool_executions.run_id)",
        },
    ),
    TableDoc(
        name="agentledger_version",
        description="The ledger's schema revision: Alembic's version table, named apart so "
        "the ledger can share a database with an application's own migrations.",
        columns={"version_num": "the newest revision applied (agentledger db current)"},
    ),
)
"""The tables ``schema/README.md`` names without a section of their own: what it says of
them, where the metadata needs it table by table. A section there takes their place."""


class CannedQuery(BaseModel):
    """One canned query: its SQL file's first comment line is its title, the comment lines
    after it its description, the rest its SQL."""

    model_config = ConfigDict(frozen=True)

    name: str
    title: str
    description: str
    sql: str

    def metadata(self) -> dict[str, str]:
        return {"title": self.title, "description": self.description, "sql": self.sql}


def canned_queries() -> list[CannedQuery]:
    """The canned queries, in :data:`CANNED_QUERIES` order."""
    folder = resources.files(__package__).joinpath("queries")
    return [
        _query(name, folder.joinpath(f"{name}.sql").read_text("utf-8")) for name in CANNED_QUERIES
    ]


def _query(name: str, text: str) -> CannedQuery:
    lines = text.splitlines()
    header = [line.removeprefix("--").strip() for line in lines if line.startswith("--")]
    sql = "\n".join(line for line in lines if not line.startswith("--")).strip()
    return CannedQuery(
        name=name, title=header[0], description=" ".join(header[1:]).strip(), sql=sql
    )


def datasette_metadata(database: str = DEFAULT_DATABASE) -> dict[str, Any]:
    """Datasette's metadata for the ledger Datasette names ``database`` (the file's stem:
    ``ledger`` for ``ledger.db``): a description of every table and column, and the canned
    queries."""
    return {
        "title": "agentledger",
        "description": "An agent's ledger: the conversations as their users saw them, and "
        "every run, step and tool call behind them.",
        "databases": {
            database: {
                "description": "The tables are documented column by column in the schema's "
                "README; the queries below answer the usual questions.",
                "tables": {t.name: _table(t) for t in _tables()},
                "queries": {q.name: q.metadata() for q in canned_queries()},
            }
        },
    }


def _tables() -> list[TableDoc]:
    documented = documentation()
    return [*documented.values(), *(t for t in _UNDOCUMENTED if t.name not in documented)]


def _table(doc: TableDoc) -> dict[str, Any]:
    return {"description": doc.description, "columns": dict(doc.columns)}
