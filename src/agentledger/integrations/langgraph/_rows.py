"""A LangChain message as a ledger row and back: the row's column holds its text, and its
metadata (under :data:`RESIDUE_KEY`) every other field LangChain gives it, so that the
message read back is equal to the one LangGraph put. A message that would not come back equal
(content that is not text, fields that are not JSON) is no row: the channel keeps it
serialized."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from pydantic import JsonValue

from ..._values import ToolCall, Usage
from .._residue import kept_if_rebuilt

RESIDUE_KEY = "langchain"
"""The key, in a row's metadata, of the message's fields other than its text."""


def residue(message: BaseMessage) -> dict[str, JsonValue] | None:
    """The fields of ``message`` other than its text, as JSON that rebuilds it exactly; None
    when nothing would."""
    content = message.content
    if not isinstance(content, str):
        return None
    fields = message.model_dump()
    del fields["content"]
    return kept_if_rebuilt(message, fields, lambda kept: rebuilt(content, kept))


_CLASSES: dict[Any, type[BaseMessage]] = {
    "human": HumanMessage,
    "ai": AIMessage,
    "tool": ToolMessage,
    "system": SystemMessage,
}
"""The common kinds of message, by their ``type``: rebuilt from fields they were dumped to,
which need no validation again."""


def rebuilt(content: str, fields: dict[str, Any]) -> BaseMessage:
    """The message whose text is ``content`` and other fields ``fields`` (a :func:`residue`:
    one that does not come back equal this way is no row)."""
    data = {**fields, "content": content}
    kind = _CLASSES.get(fields["type"])
    if kind is not None:
        return kind.model_construct(**data)
    return messages_from_dict([{"type": fields["type"], "data": data}])[0]


def usage_of(message: AIMessage) -> Usage | None:
    """The tokens of the model call that wrote ``message`` (its ``usage_metadata``)."""
    spent = message.usage_metadata
    if not spent:
        return None
    given = spent.get("input_token_details") or {}
    made = spent.get("output_token_details") or {}
    return Usage(
        input_tokens=spent.get("input_tokens") or 0,
        output_tokens=spent.get("output_tokens") or 0,
        cache_read_tokens=given.get("cache_read") or 0,
        cache_write_tokens=given.get("cache_creation") or 0,
        reasoning_tokens=made.get("reasoning") or 0,
    )


def model_of(message: AIMessage) -> str | None:
    """The model that wrote ``message``, as its provider named it."""
    meta = message.response_metadata
    name = meta.get("model_name") or meta.get("model")
    return name if isinstance(name, str) else None


def finish_reason_of(message: AIMessage) -> str | None:
    reason = message.response_metadata.get("finish_reason")
    return reason if isinstance(reason, str) else None


def tool_calls_of(message: AIMessage) -> list[ToolCall] | None:
    """The tool calls of ``message`` as the ledger's, None when one has no id."""
    calls = []
    for call in message.tool_calls:
        if not call.get("id"):
            return None
        calls.append(ToolCall(id=str(call["id"]), name=call["name"], arguments=call["args"]))
    return calls
