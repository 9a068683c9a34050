"""What each MCP tool does, over a ledger handle: plain methods that return a JSON-ready record
and a text, and raise the library's errors (the server turns those into tool errors).

In a scope, every tool but ``query`` reads through ``ledger.scoped(...)``, a handle that keeps
to the scope and answers "not found" for anything outside it; ``query`` keeps to it itself
(:mod:`._sqlite_query`, :mod:`._postgres_query`). Nothing here writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from ..._values import AgentStatus, moment
from ...errors import UsageError
from ...ledger import Ledger
from ._query import QueryLimits
from ._results import (
    Record,
    conversation_record,
    hit_record,
    hits_text,
    message_record,
    query_text,
    run_record,
    runs_text,
    trace_record,
    transcript,
    tree_record,
    tree_text,
)
from ._sql import read_only_query

MAX_SEARCH_HITS = 100
MAX_RUNS_LISTED = 200
RESOURCES_LISTED = 100
"""How many conversations ``resources/list`` shows (the most recently updated); any other is
read by its URI all the same."""

CONVERSATION_URI = "agentledger://conversations/{conversation_id}"

Answer = tuple[Record, str]


@dataclass
class ServedLedger:
    """A ledger as the MCP server serves it: its handle (``ledger``), the scope it keeps to,
    and the limits of the ``query`` tool."""

    ledger: Ledger
    tenant_id: str | None = None
    owner_id: str | None = None
    limits: QueryLimits = field(default_factory=QueryLimits)
    reader: Ledger = field(init=False)
    """The handle the tools read through: the ledger, or its scoped handle in a scope."""

    def __post_init__(self) -> None:
        self.reader = self.ledger
        if self.tenant_id is not None or self.owner_id is not None:
            self.reader = self.ledger.scoped(tenant_id=self.tenant_id, owner_id=self.owner_id)

    def search_conversations(self, query: str, limit: int = 20) -> Answer:
        hits = self.reader.search(query, limit=_bounded(limit, MAX_SEARCH_HITS))
        return {"hits": [hit_record(h) for h in hits]}, hits_text(hits)

    def get_conversation(self, conversation_id: str) -> Answer:
        conversation = self.reader.conversation(conversation_id)
        messages = self.reader.history(conversation.id)
        record = {
            "conversation": conversation_record(conversation),
            "messages": [message_record(m) for m in messages],
        }
        title = conversation.title or "(untitled)"
        return record, f"conversation {conversation.id} {title}\n{transcript(messages)}"

    def conversation_json(self, conversation_id: str) -> str:
        """A conversation as its MCP resource holds it: :meth:`get_conversation`'s record."""
        record, _ = self.get_conversation(conversation_id)
        return json.dumps(record, ensure_ascii=False)

    def recent_conversations(self) -> list[Record]:
        conversations = self.reader.conversations(limit=RESOURCES_LISTED)
        return [conversation_record(c) for c in conversations]

    def get_trace(self, run_id: str) -> Answer:
        run = self.reader.run(run_id)
        steps = self.reader.steps(run.id)
        trace = self.reader.trace_messages(run.id)
        text = f"run {run.id} {run.agent_name} {run.status}\n{transcript(trace)}"
        return trace_record(run, steps, trace), text

    def list_runs(
        self,
        conversation_id: str | None = None,
        status: str | None = None,
        since: str | None = None,
        limit: int = 20,
    ) -> Answer:
        runs = self.reader.runs(
            conversation_id,
            status=_status(status),
            since=_moment(since),
            limit=_bounded(limit, MAX_RUNS_LISTED),
        )
        return {"runs": [run_record(r) for r in runs]}, runs_text(runs)

    def run_tree(self, run_id: str) -> Answer:
        tree = self.reader.run_tree(run_id)
        return tree_record(tree), tree_text(tree)

    def query(self, sql: str) -> Answer:
        found = read_only_query(
            self.ledger, sql, limits=self.limits, tenant_id=self.tenant_id, owner_id=self.owner_id
        )
        result = found.as_json()
        return result, query_text(result)


def _bounded(limit: int, most: int) -> int:
    if limit < 1:
        raise UsageError(f"limit must be at least 1, not {limit}")
    return min(limit, most)


def _status(status: str | None) -> AgentStatus | None:
    if not status:
        return None
    try:
        return AgentStatus(status)
    except ValueError:
        known = ", ".join(s.value for s in AgentStatus)
        raise UsageError(f"no run status {status!r}: give one of {known}") from None


def _moment(since: str | None) -> datetime | None:
    """``since`` (ISO 8601, UTC unless it says otherwise) as a time."""
    if not since:
        return None
    try:
        return moment(since)
    except ValueError as exc:
        raise UsageError(f"since: {exc}") from None
