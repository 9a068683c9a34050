"""LangGraph's checkpoints kept in an agentledger ledger: :class:`LedgerSaver`.

``graph = builder.compile(checkpointer=LedgerSaver(ledger))``: each thread is a conversation of
the ledger and each invocation a run, its messages rows (the human input and the answer in the
conversation, model calls as steps with their usage, tool calls as tool executions); its
checkpoints, other channel values and pending writes are rows of the ledger's checkpoint
tables, which refer to the message rows, forgotten with the conversation. Needs the
``langgraph`` extra (``pip install 'agentledger[langgraph]'``).

:func:`imported_checkpoint` decodes a checkpoint another saver wrote into turns recorded the
same way: what ``agentledger import`` reads a ``SqliteSaver`` file with.
"""

from . import _require  # noqa: F401 (before the modules that import LangGraph)
from ._imported import ImportedCheckpoint, ImportedTurn, imported_checkpoint
from ._saver import LedgerSaver

__all__ = ["ImportedCheckpoint", "ImportedTurn", "LedgerSaver", "imported_checkpoint"]
