"""Ordered collections of messages, and the sectioned message store.

A collection reads and writes the shapes the provider SDKs hold messages in (``from_openai``,
``to_openai``, ``from_anthropic``, ``to_anthropic``) with the code the HTTP providers send
with: one module per format beside this one.

Everything here is an immutable value: "changing" a collection or a store returns a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import core_schema

from ..errors import UsageError
from ._anthropic_format import anthropic_system, anthropic_turns, messages_from_anthropic
from ._chat_format import chat_message, messages_from_chat
from ._message import Message, Role
from ._responses_format import input_items, is_responses_input, messages_from_items

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
    def from_openai(cls, items: Iterable[object], *, api: OpenAIApi | None = None) -> Messages:
        """Messages in an OpenAI SDK's shape: Chat Completions messages (``api="chat"``) or
        Responses input items (``api="responses"``), as dicts or as the SDK's own objects (a
        response's ``output`` items, a completion's ``message``). Without ``api`` the items
        say which: Responses items have a ``type``, Chat Completions messages none (a plain
        ``{"role", "content"}`` reads the same either way). A ``developer`` message is a
        system one. What a message cannot hold (an image, a built-in tool's item, a key
        this reading does not know) raises ``UsageError`` naming the item: nothing is
        dropped unread."""
        given = list(items)
        if _openai_api(api, is_responses_input(given)) == "responses":
            return cls._wrap(messages_from_items(given))
        return cls._wrap(messages_from_chat(given))

    def to_openai(self, *, api: OpenAIApi = "chat") -> list[dict[str, Any]]:
        """The messages as the OpenAI SDK's create call takes them: ``messages=`` of
        ``client.chat.completions.create`` (``api="chat"``), or ``input=`` of
        ``client.responses.create`` (``api="responses"``, the system messages as ``system``
        items, the reasoning items kept with an assistant message sent back as they came).
        The same code writes what ``OpenAIChat`` and ``OpenAIResponses`` send."""
        if _openai_api(api, False) == "responses":
            return [i for m in self.root for i in input_items(m, unencrypted_reasoning=True)]
        return [chat_message(m) for m in self.root]

    @classmethod
    def from_anthropic(cls, messages: Iterable[object], system: object = None) -> Messages:
        """Messages in the Anthropic SDK's shape: the ``messages`` turns of
        ``client.messages.create`` (dicts, or the SDK's objects, such as a response's
        ``content`` blocks) and its ``system`` (text or text blocks), which comes first as
        a system message. Each block of a user turn is a message (a ``tool_result`` a tool
        message, ``is_error`` kept); an assistant turn is one message, its thinking, server
        tool and unknown blocks kept whole. An image or a document raises ``UsageError``
        naming the block: nothing is dropped unread."""
        return cls._wrap(messages_from_anthropic(messages, system))

    def to_anthropic(self) -> dict[str, Any]:
        """The messages as ``client.messages.create`` takes them, to pass with ``**``:
        ``{"messages": [...turns...]}``, with ``"system"`` (the system messages' text, joined
        by blank lines) when there is any. The same code writes what ``AnthropicMessages``
        sends (without its cache marks)."""
        request: dict[str, Any] = {"messages": anthropic_turns(self.root)}
        system = anthropic_system(self.root)
        return request if system is None else {"system": system} | request

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


OpenAIApi = Literal["chat", "responses"]
"""The two OpenAI APIs whose message shapes ``Messages`` reads and writes."""
_OPENAI_APIS: dict[object, OpenAIApi] = {"chat": "chat", "responses": "responses"}


def _openai_api(api: object, responses: bool) -> OpenAIApi:
    """The API named, or the one the items look like."""
    if api is None:
        return "responses" if responses else "chat"
    found = _OPENAI_APIS.get(api)
    if found is None:
        raise UsageError(f"api={api!r} is not an OpenAI API: pass api='chat' or api='responses'")
    return found


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
