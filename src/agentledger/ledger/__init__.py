"""The SQL ledger: conversations, runs, steps and tool executions in SQLite or PostgreSQL.

``Ledger.open(url)`` connects and migrates; ``AgentBuilder().with_ledger(ledger)`` records every
``Agent.run`` in it (through ``ledger.recorder``). The tables are public API
(``schema/README.md``); their SQLModel classes are :mod:`agentledger.ledger.tables`, and
:class:`Conversation` and :class:`AgentRun` are the rows ``Ledger`` returns. Migrations are
plain functions in :mod:`agentledger.ledger.migrate`; row checksums are
:mod:`agentledger.ledger.checksums`. ``Ledger.open(url, read_only=True)`` only reads;
:func:`read_only_uri` and :func:`file_to_read` let other SQLite readers read a ledger without
writing it or leaving files beside it. ``ledger.scoped(tenant_id=..., owner_id=...)`` is a
handle kept to one tenant's (and owner's) conversations; its :class:`Scope` says which.

This package imports the values and the recorder interface, never the loop, a driver or a
provider.
"""

from ._access import file_to_read, read_only_uri
from ._engine import EngineSettings, normalize_url, sqlite_path
from ._forget import Forgotten
from ._ledger import DEFAULT_LEASE_SECONDS, Ledger
from ._run_tree import RunTree
from ._scope import TENANT_SETTING, Scope
from ._search import SearchHit
from ._writes import LedgerRecorder
from .tables import AgentRun, Conversation, ConversationKind

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "TENANT_SETTING",
    "AgentRun",
    "Conversation",
    "ConversationKind",
    "EngineSettings",
    "Forgotten",
    "Ledger",
    "LedgerRecorder",
    "RunTree",
    "Scope",
    "SearchHit",
    "file_to_read",
    "normalize_url",
    "read_only_uri",
    "sqlite_path",
]
