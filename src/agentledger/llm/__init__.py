"""The model side: the provider-neutral request/response types, the ``LLM`` protocol, the HTTP
providers (:class:`OpenAIChat`, :class:`AnthropicMessages`) with their retry policy and price
table, and the scripted test double."""

from ._anthropic import AnthropicMessages
from ._http import HttpProvider, RetryPolicy
from ._openai import OpenAIChat
from ._pricing import Price, PriceTable
from ._scripted import ScriptedLLM, ScriptItem
from ._types import LLM, InferenceRequest, InferenceResponse, ModelSettings

__all__ = [
    "LLM",
    "AnthropicMessages",
    "HttpProvider",
    "InferenceRequest",
    "InferenceResponse",
    "ModelSettings",
    "OpenAIChat",
    "Price",
    "PriceTable",
    "RetryPolicy",
    "ScriptItem",
    "ScriptedLLM",
]
