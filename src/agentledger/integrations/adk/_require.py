"""Google's ADK comes with the ``adk`` extra (see :mod:`.._extra`), from 2.10: the first whose
session service has the hooks ``LedgerSessionService`` commits an event through."""

from __future__ import annotations

from .._extra import require

LIBRARY = "Google ADK (2.10 or newer)"

require(
    ("google.adk.sessions", "google.genai.types"),
    library=LIBRARY,
    what="agentledger.integrations.adk (LedgerSessionService)",
    extra="adk",
)


def _check_version() -> None:
    from google.adk.sessions import BaseSessionService

    from ...errors import ConfigurationError

    if not hasattr(BaseSessionService, "_commit_event_to_session"):
        raise ConfigurationError(
            "agentledger.integrations.adk needs google-adk 2.10 or newer, and the one installed "
            "is older: upgrade it: pip install --upgrade 'agentledger[adk]'"
        )


_check_version()
