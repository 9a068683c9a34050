"""The OpenAI Agents SDK comes with the ``openai-agents`` extra, not with the base install."""

from __future__ import annotations

from ...errors import ConfigurationError

INSTALL = "pip install 'agentledger[openai-agents]'"


def require_sdk() -> None:
    """Raise :class:`ConfigurationError` naming the extra when the SDK cannot be imported."""
    try:
        import agents  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            "agentledger.integrations.openai_agents needs the OpenAI Agents SDK, which comes "
            f"with the openai-agents extra. Install it: {INSTALL}"
        ) from exc
