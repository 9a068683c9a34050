"""The rows :class:`~agentledger.ledger.Ledger` returns as its tables' classes: a
:class:`Conversation` or an :class:`AgentRun`, each checked against its checksum first."""

from __future__ import annotations

from ._row_mapping import Row
from .checksums import check_row
from .tables import AgentRun, Conversation, row_of


def conversation_of(row: Row) -> Conversation:
    check_row("conversations", row)
    return row_of(Conversation, row)


def run_of(row: Row) -> AgentRun:
    check_row("agent_runs", row)
    return row_of(AgentRun, row)
