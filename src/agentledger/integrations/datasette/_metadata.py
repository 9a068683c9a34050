"""The metadata: the schema's documentation, and the canned queries read from their files."""

from __future__ import annotations

from dataclasses import dataclass
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
    "ids",
)
"""The canned queries, in the order Datasette lists them: ``queries/NAME.sql`` each."""

DEFAULT_DATABASE = "agentledger"
"""Datasette's name for ``agentledger.db`` (it names a database by its file's stem)."""
HIDDEN_TABLES = ("agentledger_changes", "agentledger_deletions", "agentledger_version")
"""The ledger's own bookkeeping, which Datasette lists apart, under its hidden tables (it
hides the full-text index's tables by itself)."""


@dataclass(frozen=True)
class Link:
    """A column a canned query adds after its own: the page of the query ``query`` for the id
    in the column ``column``, given as its parameter ``param``."""

    name: str
    column: str
    query: str
    param: str

    def sql(self, database: str) -> str:
        """The link as SQL: an absolute URL, which Datasette shows as a link, built from the
        request's Host header (and X-Forwarded-Proto behind a proxy) with Datasette's magic
        parameters; none for an id a URL would have to escape."""
        value = f"listed.{self.column}"
        page = f"/{_path_name(database)}/{self.query}?{self.param}="
        return (
            f"CASE WHEN {value} GLOB '*[^A-Za-z0-9._-]*' THEN NULL ELSE "
            f"coalesce(nullif(:_header_x_forwarded_proto, ''), 'http') || '://' || "
            f":_header_host || '{page}' || {value} END AS {self.name}"
        )


_TRACE = Link("trace", "run_id", "run_trace", "run_id")
_TREE = Link("tree", "run_id", "run_tree", "run_id")
_CONVERSATION = Link("messages", "conversation_id", "conversation", "conversation_id")
LINKS = {
    "conversation": (_TRACE,),
    "run_trace": (Link("subagent_trace", "child_run_id", "run_trace", "run_id"),),
    "run_tree": (_TRACE,),
    "expensive_runs": (_TREE, _TRACE, _CONVERSATION),
    "search": (_CONVERSATION, _TRACE),
    "ids": (_TREE, _TRACE, _CONVERSATION),
}
"""The links each canned query adds: from a run's id to its trace and its tree, from a
conversation's id to its messages."""


def _path_name(database: str) -> str:
    """``database`` as Datasette writes it in a URL (tilde-encoded, a space as ``+``)."""
    safe = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
    return "".join(
        chr(b) if chr(b) in safe else "+" if b == ord(" ") else f"~{b:02X}"
        for b in database.encode("utf-8")
    )


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
    after it its description, the rest its SQL (which runs in the ``sqlite3`` shell as it is).

    Served, its SQL is hidden until asked for (``hide_sql``), and the links of
    :data:`LINKS` follow its columns."""

    model_config = ConfigDict(frozen=True)

    name: str
    title: str
    description: str
    sql: str

    def metadata(self, database: str = DEFAULT_DATABASE) -> dict[str, Any]:
        """The query as Datasette's metadata has it, for the database Datasette names
        ``database``."""
        return {
            "title": self.title,
            "description": self.description,
            "sql": self.linked_sql(database),
            "hide_sql": True,
        }

    def linked_sql(self, database: str = DEFAULT_DATABASE) -> str:
        """The SQL with the query's links (:data:`LINKS`) as columns after its own."""
        links = LINKS.get(self.name, ())
        if not links:
            return self.sql
        inner = "\n".join(f"    {line}" if line else "" for line in self.sql.splitlines())
        added = "".join(f",\n    {link.sql(database)}" for link in links)
        return f"SELECT\n    listed.*{added}\nFROM (\n{inner}\n) AS listed"


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
                "queries": {q.name: q.metadata(database) for q in canned_queries()},
            }
        },
    }


def _tables() -> list[TableDoc]:
    documented = documentation()
    return [*documented.values(), *(t for t in _UNDOCUMENTED if t.name not in documented)]


def _table(doc: TableDoc) -> dict[str, Any]:
    hidden = {"hidden": True} if doc.name in HIDDEN_TABLES else {}
    return {"description": doc.description, "columns": dict(doc.columns), **hidden}
