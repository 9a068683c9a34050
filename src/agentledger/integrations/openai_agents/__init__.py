"""The OpenAI Agents SDK's session, kept in an agentledger ledger: :class:`LedgerSession`.

``Runner.run(agent, text, session=LedgerSession("user-42", ledger))`` keeps the conversation
in ``conversation_messages`` and the tool calls, their outputs and the reasoning in the runs'
steps and tool executions. Needs the ``openai-agents`` extra
(``pip install 'agentledger[openai-agents]'``).
"""

from ._sdk import require_sdk as _require_sdk

_require_sdk()  # before the modules that import the SDK

from ..._agents_sdk_items import (  # noqa: E402 (after the check above)
    AGENT_KEY,
    BRANCH_DELETED_KEY,
    BRANCH_KEY,
    CLEARED_KEY,
    FORKED_FROM_KEY,
    INDEX_KEY,
    ITEM_KEY,
    ITEMS_KEY,
    REMOVED_KEY,
    RUN_KEY,
    SESSION_KEY,
)
from ._session import AGENT_NAME, LedgerSession  # noqa: E402 (after the check above)

__all__ = [
    "AGENT_KEY",
    "AGENT_NAME",
    "BRANCH_DELETED_KEY",
    "BRANCH_KEY",
    "CLEARED_KEY",
    "FORKED_FROM_KEY",
    "INDEX_KEY",
    "ITEMS_KEY",
    "ITEM_KEY",
    "REMOVED_KEY",
    "RUN_KEY",
    "SESSION_KEY",
    "LedgerSession",
]
