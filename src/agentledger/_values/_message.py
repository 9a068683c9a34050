"""One message: who it is from (``Role``), what it says, the tool calls it makes (``ToolCall``)
or the call it answers. An immutable value; collections of them are in ``_messages``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    model_validator,
)

from ._ids import new_id, utc_now

TOOL_ERROR_KEY = "is_error"
"""The metadata key of a ``tool`` message whose result is an error (the tool raised, or its
arguments were refused): a provider that can say so (Anthropic's ``is_error``) tells the model."""


class Role(StrEnum):
    """Who a message is from. A ``StrEnum``: ``Role.USER == "user"``."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(BaseModel):
    """A model's request to call one tool: ``arguments`` as the model sent them.

    ``raw_arguments`` is set only when the model's arguments were not a JSON object (providers
    send them as text): it keeps that text, ``arguments`` is then empty, and the call is
    answered with an error result that asks the model for valid JSON.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    name: str
    arguments: Mapping[str, JsonValue] = Field(default_factory=dict)
    raw_arguments: str | None = None


def _none_as_empty(value: object) -> object:
    return "" if value is None else value


def _as_tuple(calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


ToolCalls = Annotated[Sequence[ToolCall], AfterValidator(_as_tuple)]
"""Tool calls as any sequence going in (a list is fine), stored as a tuple."""


class Message(BaseModel):
    """One message of a conversation or of an execution trace.

    Tool calls are a field of their own (``tool_calls``), never hidden in ``metadata``; a tool
    result is a ``tool`` message whose ``tool_call_id`` names the call it answers.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    role: Role
    content: Annotated[str, BeforeValidator(_none_as_empty)] = ""
    name: str | None = None
    tool_calls: ToolCalls = ()
    tool_call_id: str | None = None
    reasoning: str | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    id: str = Field(default_factory=new_id)
    created_at: datetime = Field(default_factory=utc_now)
    interrupted: bool = False
    """An answer cut short: the part of a streamed answer the user was shown before the run
    was cancelled (or its process died), kept as it was shown."""

    @model_validator(mode="after")
    def _check_shape(self) -> Message:
        if self.role is Role.TOOL and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.tool_calls and self.role is not Role.ASSISTANT:
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role} ones")
        return self

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role=Role.SYSTEM, content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(role=Role.USER, content=content)

    @classmethod
    def assistant(cls, content: str = "", *, tool_calls: Iterable[ToolCall] = ()) -> Message:
        return cls(role=Role.ASSISTANT, content=content, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, name: str | None = None) -> Message:
        return cls(role=Role.TOOL, content=content, tool_call_id=tool_call_id, name=name)

    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)

    def is_tool_trace(self) -> bool:
        """True for a tool result or an assistant message that calls tools."""
        return self.role is Role.TOOL or bool(self.tool_calls)
