"""Google's ADK comes with the ``adk`` extra (see :mod:`.._extra`)."""

from __future__ import annotations

from .._extra import require

require(
    ("google.adk.sessions", "google.genai.types"),
    library="Google ADK",
    what="agentledger.integrations.adk (LedgerSessionService)",
    extra="adk",
)
