"""The SQL ledger: conversations, runs, steps and tool executions in SQLite or PostgreSQL.

``Ledger.open(url)`` connects and migrates; ``AgentBuilder().with_ledger(ledger)`` records every
``Agent.run`` in it. The tables are public API (``schema/README.md``).
"""

from ._engine import EngineSettings
from ._ledger import DEFAULT_LEASE_SECONDS, Ledger
from .records import ConversationRecord, RunRecord, RunTree, SearchHit

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "ConversationRecord",
    "EngineSettings",
    "Ledger",
    "RunRecord",
    "RunTree",
    "SearchHit",
]
