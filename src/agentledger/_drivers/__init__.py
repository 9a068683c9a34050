"""Drivers: how one step of a run asks the model and runs the tools it called.

:class:`ToolCallingDriver` uses the provider's native tool calling (the default);
:class:`ReActDriver` asks models without it for one JSON decision per step over plain chat.
Both implement the ``Driver`` protocol and take their steps from what the ``StepRequest`` hands
them alone: of the loop, they import only those two (:mod:`agentledger._loop._driver`).
"""

from ._react import ACTION_FORM, ANSWER_FORM, ReActDriver, plain_chat, react_instructions
from ._tool_calling import ToolCallingDriver

__all__ = [
    "ACTION_FORM",
    "ANSWER_FORM",
    "ReActDriver",
    "ToolCallingDriver",
    "plain_chat",
    "react_instructions",
]
