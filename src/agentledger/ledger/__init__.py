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

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._access import file_to_read, read_only_uri
from ._changes import ChangedSince
from ._columns import ConversationKind
from ._failures import EngineSettings
from ._graph_values import (
    ChannelValue,
    CheckpointKey,
    CheckpointQuery,
    MessageRow,
    PendingWrite,
    StoredCheckpoint,
)
from ._overviews import ConversationOverview
from ._queries import ConversationTurn
from ._reader import LedgerReader
from ._scope import TENANT_SETTING, Scope
from ._search import SearchHit, TraceHit, search_snippet
from ._turn_windows import TurnWindow
from ._urls import normalize_url, sqlite_path

if _TYPE_CHECKING:
    from .._recording import AsyncTurn, AsyncTurnStep, Turn, TurnStep
    from ._adk_events import PartText, StoredEvent
    from ._adk_sessions import (
        AdkSessions,
        Append,
        Appended,
        SessionKey,
        StateDelta,
        StoredSession,
    )
    from ._forget import Forgotten
    from ._graph_checkpoints import GraphCheckpoints
    from ._ledger import DEFAULT_LEASE_SECONDS, Ledger
    from ._stored_conversations import StoredConversations, StoredEntry, StoredRecord
    from ._tree_model import RunTree
    from ._writes import LedgerRecorder
    from .tables import AgentRun, Conversation

_LAZY = {
    "AdkSessions": "agentledger.ledger._adk_sessions",
    "Append": "agentledger.ledger._adk_sessions",
    "Appended": "agentledger.ledger._adk_sessions",
    "SessionKey": "agentledger.ledger._adk_sessions",
    "StateDelta": "agentledger.ledger._adk_sessions",
    "StoredEvent": "agentledger.ledger._adk_events",
    "PartText": "agentledger.ledger._adk_events",
    "StoredSession": "agentledger.ledger._adk_sessions",
    "AgentRun": "agentledger.ledger.tables",
    "AsyncTurn": "agentledger._recording",
    "AsyncTurnStep": "agentledger._recording",
    "Conversation": "agentledger.ledger.tables",
    "DEFAULT_LEASE_SECONDS": "agentledger.ledger._ledger",
    "Forgotten": "agentledger.ledger._forget",
    "GraphCheckpoints": "agentledger.ledger._graph_checkpoints",
    "Ledger": "agentledger.ledger._ledger",
    "LedgerRecorder": "agentledger.ledger._writes",
    "RunTree": "agentledger.ledger._tree_model",
    "StoredConversations": "agentledger.ledger._stored_conversations",
    "StoredEntry": "agentledger.ledger._stored_conversations",
    "StoredRecord": "agentledger.ledger._stored_conversations",
    "Turn": "agentledger._recording",
    "TurnStep": "agentledger._recording",
}
"""Public names loaded when first used: each loads SQLAlchemy (``from agentledger.ledger import
Ledger``), which :class:`LedgerReader` and the other names do without."""

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "TENANT_SETTING",
    "AdkSessions",
    "AgentRun",
    "Append",
    "Appended",
    "AsyncTurn",
    "AsyncTurnStep",
    "ChangedSince",
    "ChannelValue",
    "CheckpointKey",
    "CheckpointQuery",
    "Conversation",
    "ConversationKind",
    "ConversationOverview",
    "ConversationTurn",
    "EngineSettings",
    "Forgotten",
    "GraphCheckpoints",
    "Ledger",
    "LedgerReader",
    "LedgerRecorder",
    "MessageRow",
    "PartText",
    "PendingWrite",
    "RunTree",
    "Scope",
    "SearchHit",
    "SessionKey",
    "StateDelta",
    "StoredCheckpoint",
    "StoredConversations",
    "StoredEntry",
    "StoredEvent",
    "StoredRecord",
    "StoredSession",
    "TraceHit",
    "Turn",
    "TurnStep",
    "TurnWindow",
    "file_to_read",
    "normalize_url",
    "read_only_uri",
    "search_snippet",
    "sqlite_path",
]


def __getattr__(name: str) -> _Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
