"""The OpenAI Agents SDK comes with the ``openai-agents`` extra, not with the base install."""

from __future__ import annotations

from .._extra import require


def require_sdk() -> None:
    """Raise :class:`ConfigurationError` naming the extra when the SDK cannot be imported."""
    require(
        ("agents",),
        library="The OpenAI Agents SDK",
        what="agentledger.integrations.openai_agents",
        extra="openai-agents",
    )
