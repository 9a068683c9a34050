"""The model side: the HTTP providers (:class:`OpenAIChat`, :class:`OpenAIResponses`,
:class:`AnthropicMessages`) with their retry policy, the price table, and :class:`ScriptedLLM`,
the scripted test double.

The provider-neutral request and response types and the ``LLM`` protocol are values
(:mod:`agentledger._values`); they are re-exported here. The HTTP providers load httpx, so they
are imported when first used: ``import agentledger.llm`` stays light.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from .._values import (
    LLM,
    AsyncLLM,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    Price,
    PriceTable,
    StreamingLLM,
    StreamItem,
)
from ._scripted import ScriptedLLM, ScriptItem

if _TYPE_CHECKING:
    from ._anthropic import AnthropicMessages
    from ._http import DEFAULT_TIMEOUT, HttpProvider
    from ._openai import OpenAIChat
    from ._responses import OpenAIResponses
    from ._retries import RetryPolicy

_LAZY = {
    "DEFAULT_TIMEOUT": "._http",
    "AnthropicMessages": "._anthropic",
    "HttpProvider": "._http",
    "OpenAIChat": "._openai",
    "OpenAIResponses": "._responses",
    "RetryPolicy": "._retries",
}

__all__ = [
    "DEFAULT_TIMEOUT",
    "LLM",
    "AnthropicMessages",
    "AsyncLLM",
    "HttpProvider",
    "InferenceDelta",
    "InferenceRequest",
    "InferenceResponse",
    "ModelSettings",
    "OpenAIChat",
    "OpenAIResponses",
    "Price",
    "PriceTable",
    "RetryPolicy",
    "ScriptItem",
    "ScriptedLLM",
    "StreamItem",
    "StreamingLLM",
]


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
