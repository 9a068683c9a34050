"""LangGraph comes with the ``langgraph`` extra (see :mod:`.._extra`)."""

from __future__ import annotations

from .._extra import require

require(
    ("langgraph.checkpoint.base", "langchain_core.messages"),
    library="LangGraph",
    what="agentledger.integrations.langgraph (LedgerSaver)",
    extra="langgraph",
)
