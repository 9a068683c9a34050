"""Messages as OpenAI's Chat Completions API takes them, and back: the one reading and writing
of that format, for the ``OpenAIChat`` provider and for ``Messages.from_openai`` and
``Messages.to_openai(api="chat")``.

The format has no ids of messages, and no reasoning an API takes back: a message's id and
reasoning are not written (servers that send reasoning as ``reasoning_content`` or
``reasoning`` have it read). Tool call ids, names and arguments and tool results go both ways.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import JsonValue

from ._format_reading import (
    as_mapping,
    check_keys,
    named_results,
    not_understood,
    require,
    text_field,
    text_of,
)
from ._ids import new_id
from ._message import Message, Role, ToolCall

_ROLES = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER}
_KEYS = {
    Role.SYSTEM: frozenset({"role", "content", "name"}),
    Role.USER: frozenset({"role", "content", "name"}),
    Role.ASSISTANT: frozenset(
        {"role", "content", "name", "tool_calls", "refusal", "reasoning_content", "reasoning"}
    ),
    Role.TOOL: frozenset({"role", "content", "tool_call_id"}),
}
_TEXT_PARTS = {"text": "text"}
_ASSISTANT_PARTS = {"text": "text", "refusal": "refusal"}


def chat_message(message: Message) -> dict[str, Any]:
    """One message as Chat Completions takes it (a name is sent for a user only)."""
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [chat_tool_call(c) for c in message.tool_calls]
    if message.name and message.role is Role.USER:
        wire["name"] = message.name
    return wire


def chat_tool_call(call: ToolCall) -> dict[str, Any]:
    """A call as the API takes it back. Arguments that were not JSON go back as ``{}`` (a
    server may refuse invalid JSON in the history); the error result quotes the text."""
    arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def tool_call_from_chat(wire: Mapping[str, Any]) -> ToolCall:
    """A function call as the API sends it (an id is made for a server that sends none)."""
    function = wire["function"]
    arguments, raw = json_arguments(function.get("arguments"))
    return ToolCall(
        id=wire.get("id") or f"call_{new_id()}",
        name=function["name"],
        arguments=arguments,
        raw_arguments=raw,
    )


def json_arguments(value: object) -> tuple[dict[str, JsonValue], str | None]:
    """Parsed arguments, or empty ones and the text when it is not a JSON object."""
    if isinstance(value, dict):  # some servers send an object, not text
        return value, None
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}, None
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
        return {}, text
    return (parsed, None) if isinstance(parsed, dict) else ({}, text)


def chat_reasoning(message: Mapping[str, Any]) -> str | None:
    """The reasoning a server sends beside the content (DeepSeek, vLLM, Ollama, ...)."""
    return message.get("reasoning_content") or message.get("reasoning") or None


def messages_from_chat(items: Iterable[object]) -> tuple[Message, ...]:
    """Chat Completions messages (dicts, or the SDK's message objects) as messages."""
    return named_results([_message(item, index) for index, item in enumerate(items)])


def _message(given: object, index: int) -> Message:
    where = f"Chat Completions message {index}"
    item = as_mapping(given, where)
    role = _role(item.get("role"), where)
    where = f"{where} (role {item['role']!r})"
    check_keys(item, _KEYS[role], where)
    if role is Role.TOOL:
        content = text_of(item.get("content"), where, _TEXT_PARTS)
        return Message.tool(content, tool_call_id=require(item, "tool_call_id", where))
    if role is Role.ASSISTANT:
        return _assistant(item, where)
    content = text_of(item.get("content"), where, _TEXT_PARTS)
    return Message(role=role, content=content, name=item.get("name") or None)


def _role(role: object, where: str) -> Role:
    if role in ("assistant", "tool"):
        return Role(role)
    found = _ROLES.get(str(role))
    if role is None:
        raise not_understood(
            where,
            "has no role",
            "give each message its role (Responses input items are read with api='responses')",
        )
    if found is None:
        raise not_understood(
            where,
            f"has the role {role!r}",
            "give system, developer, user, assistant or tool messages (a 'function' message "
            "is the API's old form: give its result as a 'tool' message)",
        )
    return found


def _assistant(item: Mapping[str, Any], where: str) -> Message:
    """An assistant message; a refusal is its content, as the provider reads one."""
    content = text_of(item.get("content"), where, _ASSISTANT_PARTS)
    calls = item.get("tool_calls") or ()
    return Message(
        role=Role.ASSISTANT,
        content=content or text_field(item, "refusal", where),
        name=item.get("name") or None,
        tool_calls=[_given_call(c, f"{where}, tool call {n}") for n, c in enumerate(calls)],
        reasoning=chat_reasoning(item),
    )


def _given_call(given: object, where: str) -> ToolCall:
    """A call of a history: its id is what its result names, so it must have one."""
    call = as_mapping(given, where)
    if call.get("type", "function") != "function" or not isinstance(call.get("function"), dict):
        raise not_understood(
            where,
            f"is a call of type {call.get('type')!r}",
            "a Message holds function calls (JSON arguments) only",
        )
    check_keys(call, frozenset({"id", "type", "function"}), where)
    require(call, "id", where)
    function = call["function"]
    check_keys(function, frozenset({"name", "arguments"}), where)
    require(function, "name", where)
    return tool_call_from_chat(call)
