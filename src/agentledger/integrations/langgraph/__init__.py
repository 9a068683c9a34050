"""LangGraph's checkpoints kept in an agentledger ledger: :class:`LedgerSaver`.

``graph = builder.compile(checkpointer=LedgerSaver(ledger))``: each thread is a conversation of
the ledger, its checkpoints, channel values and pending writes rows of the ledger's checkpoint
tables, forgotten with the conversation. Needs the
``langgraph`` extra (``pip install 'agentledger[langgraph]'``).
"""

from . import _require  # noqa: F401 (before the modules that import LangGraph)
from ._saver import LedgerSaver

__all__ = ["LedgerSaver"]
