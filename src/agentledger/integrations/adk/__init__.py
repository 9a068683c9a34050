"""Google ADK's sessions kept in an agentledger ledger: :class:`LedgerSessionService`.

``Runner(app_name=..., agent=..., session_service=LedgerSessionService(ledger))``: each session
is a conversation of the ledger (the app its tenant, the user its owner), its events rows of
the ledger in order, its state (the app's, the user's and the session's) in the ledger, each
event's state delta applied in the transaction that stores the event. Needs the ``adk`` extra
(``pip install 'agentledger[adk]'``).
"""

from . import _require  # noqa: F401 (before the modules that import ADK)
from ._service import LedgerSessionService

__all__ = ["LedgerSessionService"]
