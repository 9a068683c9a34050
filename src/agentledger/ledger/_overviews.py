"""A listing of conversations with what a person looks for first in each: its title or first
message, how many turns it has, its last run (agent, status, who recorded it), when it was last
active and what its runs cost, subagents included. One page at a time, in the order of
``Ledger.conversations`` (most recently updated first), continued from the last row shown
(keyset paging: the ``updated_at`` index finds the next page at once however deep it is).

A page is read in four statements whatever its length: the conversations (each checked against
its checksum), then for those only their details, their last runs (checked too) and their
costs. The counts and sums are read as the database computes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from .._values import AgentStatus
from ._arguments import member, row_limit
from ._columns import ConversationKind
from ._queries import SEEN_SQL
from ._row_mapping import Row
from ._scope import Scope
from ._sql import Reads, columns, in_scope, listed, scope_params, select_rows, time_param
from .checksums import check_row

PREVIEW_LENGTH = 200
"""How much of a first user message an overview holds, when the conversation has no title."""


class ConversationOverview(BaseModel):
    """A conversation as a listing shows it (``Ledger.conversation_overviews``).

    ``turns`` counts what the user said; ``cost_usd`` and ``fully_priced`` are those of every
    run of the conversation's run trees, its subagents' included (``None``: no step was
    priced). The ``last_run_*`` fields describe its latest run, ``None`` when it has none;
    ``recorded_by`` is that run's ``metadata["recorded_by"]`` (the recording API, LangGraph,
    an import), ``None`` for the agent loop's own runs."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    kind: ConversationKind
    title: str | None
    first_message: str | None
    tenant_id: str | None
    owner_id: str | None
    created_at: datetime
    updated_at: datetime
    last_active_at: datetime
    turns: int
    cost_usd: float | None
    fully_priced: bool
    last_run_id: str | None = None
    agent_name: str | None = None
    status: AgentStatus | None = None
    recorded_by: str | None = None
    run_metadata: dict[str, JsonValue] = Field(default_factory=dict)


_SAID = f"m.conversation_id = c.id AND m.role = 'user' AND m.section IN ({SEEN_SQL})"
_LAST_RUN = (
    "SELECT r.{column} FROM agent_runs r WHERE r.conversation_id = c.id "
    "ORDER BY r.started_at DESC, r.id DESC LIMIT 1"
)
_DETAILS = (
    "SELECT c.id AS id, "
    f"(SELECT COUNT(*) FROM conversation_messages m WHERE {_SAID}) AS turns, "
    f"(SELECT substr(m.content, 1, {PREVIEW_LENGTH}) FROM conversation_messages m "
    f"WHERE {_SAID} ORDER BY m.seq LIMIT 1) AS first_message, "
    f"({_LAST_RUN.format(column='id')}) AS last_run_id "
    "FROM conversations c WHERE c.id IN ({ids})"
)
_COSTS = (
    "SELECT top.conversation_id AS id, SUM(r.cost_usd) AS cost_usd, "
    "MIN(CASE WHEN r.fully_priced THEN 1 ELSE 0 END) AS fully_priced "
    "FROM agent_runs top JOIN agent_runs r ON r.root_run_id = top.id "
    "WHERE top.conversation_id IN ({ids}) GROUP BY top.conversation_id"
)


@dataclass(frozen=True)
class OverviewFilter:
    """Which conversations a listing holds (``Ledger.conversation_overviews`` says each), and
    where its page begins: after ``after``, the ``(updated_at, id)`` of the page before's last
    row (``None``: at the top)."""

    kind: ConversationKind | str | None = ConversationKind.MAIN
    agent_name: str | None = None
    status: AgentStatus | str | None = None
    after: tuple[datetime, str] | None = None

    def conditions(self, dialect: str) -> tuple[str, dict[str, Any]]:
        """Each as ``AND ...`` over the conversations ``c``, with its parameters."""
        sql, params = "", {}
        if self.kind is not None:
            sql += "AND c.kind = :kind "
            params["kind"] = member(ConversationKind, self.kind, "kind").value
        if self.agent_name is not None:
            sql += (
                "AND EXISTS (SELECT 1 FROM agent_runs r WHERE r.conversation_id = c.id "
                "AND r.agent_name = :agent_name) "
            )
            params["agent_name"] = self.agent_name
        if self.status is not None:
            sql += f"AND ({_LAST_RUN.format(column='status')}) = :status "
            params["status"] = member(AgentStatus, self.status, "status").value
        if self.after is not None:
            sql += "AND (c.updated_at < :after OR (c.updated_at = :after AND c.id < :after_id)) "
            params["after"] = time_param(dialect, self.after[0])
            params["after_id"] = self.after[1]
        return sql, params


def overview_rows(
    reads: Reads, scope: Scope, wanted: OverviewFilter, limit: int
) -> list[ConversationOverview]:
    """A page of :class:`ConversationOverview` (see the module and
    ``Ledger.conversation_overviews``)."""
    row_limit(limit)
    found = _page(reads, scope, wanted, limit)
    if not found:
        return []
    ids = listed("id", [row["id"] for row in found])
    details = {row["id"]: row for row in reads.rows(_DETAILS.format(ids=ids[0]), ids[1])}
    costs = {row["id"]: row for row in reads.rows(_COSTS.format(ids=ids[0]), ids[1])}
    last_ids = [row["last_run_id"] for row in details.values() if row["last_run_id"]]
    runs = _runs(reads, last_ids)
    return [_overview(row, details[row["id"]], costs.get(row["id"]), runs) for row in found]


_ORDERED = {"sqlite": "INDEXED BY ix_conversations_updated_at ", "postgresql": ""}
"""How the page is found: on SQLite always by walking the ``updated_at`` index from where the
page begins, stopping once it is full. SQLite has no statistics unless ``ANALYZE`` ran (which
a reader cannot run), so it would otherwise take an index on a filter's column (the tenant's)
and sort every row it finds: 60 ms for a tenant of 50,000 conversations against 1 ms, and
worse as the ledger grows. PostgreSQL plans from its statistics."""


def _page(reads: Reads, scope: Scope, wanted: OverviewFilter, limit: int) -> Sequence[Row]:
    """The page's conversation rows, checked."""
    conditions, params = wanted.conditions(reads.dialect)
    sql = (
        f"SELECT {columns('conversations', 'c')} FROM conversations c {_ORDERED[reads.dialect]}"
        f"WHERE 1 = 1 {in_scope(scope, 'c')}{conditions}"
        "ORDER BY c.updated_at DESC, c.id DESC LIMIT :limit"
    )
    rows = reads.rows(sql, {**params, **scope_params(scope), "limit": limit}, "conversations")
    for row in rows:
        check_row("conversations", row)
    return rows


def _runs(reads: Reads, ids: Sequence[str]) -> dict[str, Row]:
    """The runs ``ids``, checked, by id."""
    if not ids:
        return {}
    names, params = listed("id", ids)
    rows = reads.rows(select_rows("agent_runs") + f"WHERE id IN ({names})", params, "agent_runs")
    for row in rows:
        check_row("agent_runs", row)
    return {row["id"]: row for row in rows}


def _overview(
    row: Row, details: Row, costs: Row | None, runs: Mapping[str, Row]
) -> ConversationOverview:
    last = runs.get(details["last_run_id"] or "")
    moments = [row["updated_at"]]
    if last is not None:
        moments += [m for m in (last["finished_at"], last["heartbeat_at"]) if m is not None]
    return ConversationOverview(
        id=row["id"],
        kind=row["kind"],
        title=row["title"],
        first_message=details["first_message"],
        tenant_id=row["tenant_id"],
        owner_id=row["owner_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_active_at=max(moments),
        turns=details["turns"],
        cost_usd=costs["cost_usd"] if costs is not None else None,
        fully_priced=bool(costs["fully_priced"]) if costs is not None else True,
        **_last_run(last),
    )


def _last_run(last: Row | None) -> dict[str, Any]:
    """The overview's fields that describe the conversation's last run (none: no run)."""
    if last is None:
        return {}
    metadata = last["metadata"] or {}
    recorded_by = metadata.get("recorded_by")
    return {
        "last_run_id": last["id"],
        "agent_name": last["agent_name"],
        "status": last["status"],
        "recorded_by": recorded_by if isinstance(recorded_by, str) else None,
        "run_metadata": metadata,
    }
