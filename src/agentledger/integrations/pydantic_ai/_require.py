"""pydantic-ai comes with the ``pydantic-ai`` extra (see :mod:`.._extra`)."""

from __future__ import annotations

from .._extra import require

require(
    ("pydantic_ai.conversation_store",),
    library="pydantic-ai (2.66 or newer)",
    what="agentledger.integrations.pydantic_ai (LedgerConversationStore)",
    extra="pydantic-ai",
)
