"""pydantic-ai's conversation store kept in an agentledger ledger: :class:`LedgerConversationStore`.

``store = LedgerConversationStore(ledger)``; ``conversation = await store.load(id) or
Conversation(conversation_id=id)``; ``result = await agent.run(prompt,
conversation=conversation)``; ``await store.save(result)``. A pydantic-ai conversation is a
conversation of the ledger; its record and entry tree are rows of the ledger's
``stored_records`` and ``stored_entries``, forgotten with it. Needs the ``pydantic-ai`` extra
(``pip install 'agentledger[pydantic-ai]'``).
"""

from . import _require  # noqa: F401 (before the modules that import pydantic-ai)
from ._store import LedgerConversationStore

__all__ = ["LedgerConversationStore"]
