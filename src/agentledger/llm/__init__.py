"""The model side: the provider-neutral request/response types, the ``LLM`` protocol and the
scripted test double."""

from ._scripted import ScriptedLLM, ScriptItem
from ._types import LLM, InferenceRequest, InferenceResponse, ModelSettings

__all__ = [
    "LLM",
    "InferenceRequest",
    "InferenceResponse",
    "ModelSettings",
    "ScriptItem",
    "ScriptedLLM",
]
