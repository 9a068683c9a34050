"""Messages, ordered collections of them, and the sectioned message store.

Everything here is an immutable value: "changing" a collection or a store returns a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, overload

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    JsonValue,
    model_validator,
)
from pydantic_core import core_schema

from ._ids import new_id, utc_now


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


MessageLike = Message | Iterable[Message]


class Messages:
    """An immutable, ordered collection of messages, held in ``root`` (a tuple).

    ``Messages(iterable)`` takes messages; as a field of a pydantic model it validates from any
    sequence of messages (or their dicts) and serializes as a list. It is not a pydantic model
    itself: its validation is built only where a model that holds it is.
    """

    __slots__ = ("root",)
    root: tuple[Message, ...]

    def __init__(self, root: Iterable[Message] = ()) -> None:
        messages = tuple(root)
        for message in messages:
            if not isinstance(message, Message):
                raise TypeError(
                    f"Messages holds Message values, not {type(message).__name__}: build each "
                    "with Message(...) or Message.user(...)"
                )
        object.__setattr__(self, "root", messages)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Messages is immutable: append_messages and filter return new ones")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Messages is immutable")

    def __copy__(self) -> Messages:
        return self  # immutable: a copy would be the same messages

    def __deepcopy__(self, memo: dict[int, Any]) -> Messages:
        return self  # so is a deep copy (pydantic deep-copies a field's default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Messages) and self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"Messages({list(self.root)!r})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        sequence = handler.generate_schema(tuple[Message, ...])
        from_sequence = core_schema.no_info_after_validator_function(cls._wrap, sequence)
        return core_schema.json_or_python_schema(
            json_schema=from_sequence,
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(cls), from_sequence]
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(
                _root, return_schema=sequence
            ),
        )

    @classmethod
    def of(cls, *messages: Message) -> Messages:
        return cls._wrap(messages)

    @classmethod
    def from_string(cls, text: str, role: Role | str = Role.USER) -> Messages:
        """One message of ``role`` holding ``text``."""
        return cls._wrap((Message(role=Role(role), content=text),))

    @classmethod
    def _wrap(cls, messages: tuple[Message, ...]) -> Messages:
        """``messages`` (already a tuple of messages) as a collection, without checking them."""
        wrapped = object.__new__(cls)
        object.__setattr__(wrapped, "root", messages)
        return wrapped

    def append(self, message: Message) -> Messages:
        return self._wrap((*self.root, message))

    def append_messages(self, messages: MessageLike) -> Messages:
        if isinstance(messages, Message):
            return self.append(messages)
        added = messages.root if isinstance(messages, Messages) else tuple(messages)
        return self._wrap(self.root + added) if added else self

    def filter(self, predicate: Callable[[Message], bool]) -> Messages:
        return self._wrap(tuple(m for m in self.root if predicate(m)))

    def is_empty(self) -> bool:
        return not self.root

    def first(self) -> Message | None:
        return self.root[0] if self.root else None

    def last(self) -> Message | None:
        return self.root[-1] if self.root else None

    def to_string(self, separator: str = "\n") -> str:
        """The non-empty contents, joined: readable text, not a wire format."""
        return separator.join(m.content for m in self.root if m.content)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.root)

    def __len__(self) -> int:
        return len(self.root)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Messages: ...
    def __getitem__(self, index: int | slice) -> Message | Messages:
        if isinstance(index, slice):
            return self._wrap(self.root[index])
        return self.root[index]

    def __add__(self, other: Messages) -> Messages:
        return self.append_messages(other)


def _root(messages: Messages) -> tuple[Message, ...]:
    return messages.root


EMPTY_MESSAGES = Messages()


class MessageStore(BaseModel):
    """An immutable map of named sections, each a :class:`Messages`.

    The agent uses four: ``summary`` and ``buffer`` (context compaction), ``messages`` (the
    conversation) and ``execution_buffer`` (the trace of the run in progress). Any other name
    is a section too.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    sections: dict[str, Messages] = Field(default_factory=dict)

    def section(self, name: str) -> Section:
        return Section(self, name)

    def with_section(self, name: str, messages: MessageLike) -> MessageStore:
        if not isinstance(messages, Messages):
            messages = EMPTY_MESSAGES.append_messages(messages)
        return MessageStore.model_construct(sections={**self.sections, name: messages})

    def select(self, *names: str) -> Messages:
        """The sections named, concatenated in the order given; missing ones are empty."""
        selected: tuple[Message, ...] = ()
        for name in names:
            section = self.sections.get(name)
            if section is not None:
                selected += section.root
        return Messages._wrap(selected)

    def names(self) -> tuple[str, ...]:
        return tuple(self.sections)


@dataclass(frozen=True, slots=True)
class Section:
    """A view of one section of a store. Changes return a new :class:`MessageStore`."""

    store: MessageStore
    name: str

    def messages(self) -> Messages:
        return self.store.sections.get(self.name, EMPTY_MESSAGES)

    def is_empty(self) -> bool:
        return self.messages().is_empty()

    def append_messages(self, messages: MessageLike) -> MessageStore:
        return self.store.with_section(self.name, self.messages().append_messages(messages))

    def append_message(self, message: Message) -> MessageStore:
        return self.append_messages(message)

    def set_messages(self, messages: MessageLike) -> MessageStore:
        return self.store.with_section(self.name, messages)

    def clear(self) -> MessageStore:
        return self.store.with_section(self.name, EMPTY_MESSAGES)
