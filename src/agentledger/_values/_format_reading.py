"""What reading messages in a provider's format needs, whatever the format.

Each item is taken as a mapping (a dict as the SDK takes it, or one of the SDK's own pydantic
objects, dumped as the API would send it). What a :class:`Message` cannot hold is refused with
an error that names the item and says what to do: content is never dropped unread. Keys that
carry nothing (``None``, empty) are let through, so an SDK object's unset fields pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ..errors import UsageError
from ._message import Message, Role


def as_mapping(item: object, where: str) -> Mapping[str, Any]:
    """``item`` as a mapping: a dict as it is, an SDK's pydantic object dumped as JSON."""
    if isinstance(item, BaseModel):
        dumped: dict[str, Any] = item.model_dump(mode="json", exclude_none=True, by_alias=True)
        return dumped
    if isinstance(item, Mapping):
        return item
    raise not_understood(
        where, f"is a {type(item).__name__}", "pass each as a dict, as the SDK takes it"
    )


def not_understood(where: str, what: str, todo: str) -> UsageError:
    """The error for a shape the reading does not understand: which item, what is wrong with
    it, what to do; and that nothing was read (a reading is all or nothing)."""
    return UsageError(f"{where} {what}: {todo} (none of the messages was read).")


def check_keys(item: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    """Refuses a key the reading does not know, unless its value carries nothing."""
    unknown = sorted(str(k) for k, v in item.items() if k not in known and not _empty(v))
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise not_understood(
            where,
            f"has {names}, which a Message has no place for",
            "leave it out of the messages given, or keep it apart",
        )


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


def text_field(item: Mapping[str, Any], key: str, where: str) -> str:
    """``item[key]`` as text: a string (or nothing, read as empty)."""
    value = item.get(key)
    if value is None or isinstance(value, str):
        return value or ""
    raise not_understood(where, f"has a {key!r} that is not text", f"give {key!r} as a string")


def text_of(content: object, where: str, parts: Mapping[str, str]) -> str:
    """Content as one text: a string, nothing, or a list of parts, each of a type ``parts``
    maps to the key of its text (joined as they are sent: one after the other). A part of
    another type (an image, a file, audio) is refused: a message's content is text."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, Sequence):
        raise not_understood(
            where, "has content that is neither text nor a list of parts", "give it as either"
        )
    texts = []
    for index, given in enumerate(content):
        part_at = f"{where}, content part {index}"
        part = as_mapping(given, part_at)
        key = parts.get(str(part.get("type")))
        if key is None:
            raise not_understood(
                part_at,
                f"is of type {part.get('type')!r}",
                f"a Message holds text only ({' or '.join(map(repr, parts))} parts): keep "
                "images, files and audio apart from the messages",
            )
        check_keys(part, frozenset({"type", key, "cache_control", "logprobs"}), part_at)
        texts.append(text_field(part, key, part_at))
    return "".join(texts)


def require(item: Mapping[str, Any], key: str, where: str) -> str:
    """A text field that must be there and not empty (an id, a name)."""
    value = item.get(key)
    if isinstance(value, str) and value:
        return value
    raise not_understood(where, f"has no {key!r}", f"give its {key!r} as a string")


def named_results(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The messages, each tool result named after the tool whose call it answers (the formats
    leave the name out of a result; the agent's own results carry it)."""
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    return tuple(_named(m, names) for m in messages)


def _named(message: Message, names: Mapping[str, str]) -> Message:
    name = names.get(message.tool_call_id or "")
    if message.role is not Role.TOOL or message.name is not None or name is None:
        return message
    return message.model_copy(update={"name": name})
