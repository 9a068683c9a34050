"""Messages as input items of OpenAI's Responses API, and back: the one reading and writing of
that format, for the ``OpenAIResponses`` provider and for ``Messages.from_openai`` and
``Messages.to_openai(api="responses")``.

A user, system or tool message is one item; an assistant message is the items one model turn
gives: its reasoning items (kept whole in its metadata, ``REASONING_ITEMS``), its message item
and its ``function_call`` items, in that order. The ids of an assistant's message and call
items are kept in its metadata too, so they go back as they came.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pydantic import JsonValue

from ._chat_format import json_arguments
from ._format_reading import (
    as_mapping,
    check_keys,
    named_results,
    not_understood,
    require,
    text_of,
)
from ._ids import new_id
from ._message import Message, Role, ToolCall

REASONING_ITEMS = "reasoning_items"
"""The metadata key of an assistant message that keeps the reasoning items the model returned,
encrypted content and all, so they are sent back with the next requests: nothing is stored at
OpenAI (``store: false``), and a resumed run has them from the ledger."""
OUTPUT_MESSAGE_ID = "output_message_id"
"""The metadata key of an assistant message read from a Responses ``message`` item with an id
(``msg_...``): the item goes back whole, with its id."""
FUNCTION_CALL_IDS = "function_call_ids"
"""The metadata key of an assistant message whose ``function_call`` items had ids
(``fc_...``): each item's id by its ``call_id``, to go back with the call."""

_ROLES = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER}
_INPUT_PARTS = {"input_text": "text", "text": "text"}
_OUTPUT_PARTS = {"output_text": "text", "refusal": "refusal", "text": "text"}
_MESSAGE_KEYS = frozenset({"type", "role", "content", "id", "status"})
_CALL_KEYS = frozenset({"type", "call_id", "name", "arguments", "id", "status"})
_OUTPUT_KEYS = frozenset({"type", "call_id", "output", "id", "status"})


def input_items(message: Message, *, unencrypted_reasoning: bool = False) -> list[dict[str, Any]]:
    """The input items of one message, in the order the model produced them. Reasoning items
    without encrypted content are left out unless ``unencrypted_reasoning``: a request that
    stores nothing (``store: false``) cannot refer to them."""
    if message.role is Role.TOOL:
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content,
            }
        ]
    if message.role is not Role.ASSISTANT:
        return [{"role": message.role.value, "content": message.content}]
    items = _reasoning(message, unencrypted_reasoning)
    if message.content:
        items.append(_assistant_item(message))
    ids = message.metadata.get(FUNCTION_CALL_IDS)
    items.extend(
        function_call_item(c, ids.get(c.id) if isinstance(ids, dict) else None)
        for c in message.tool_calls
    )
    return items


def _reasoning(message: Message, unencrypted: bool) -> list[dict[str, Any]]:
    """The reasoning items kept with an assistant message, to send back unchanged; one without
    encrypted content (a stream cut before the item was whole) is left out unless asked for:
    without stored state the API cannot read it."""
    kept = message.metadata.get(REASONING_ITEMS)
    items = [dict(i) for i in kept if isinstance(i, dict)] if isinstance(kept, list) else []
    return [i for i in items if unencrypted or i.get("encrypted_content")]


def _assistant_item(message: Message) -> dict[str, Any]:
    """The assistant's text: the output message item it came as (with its id), or else the
    plain form."""
    item_id = message.metadata.get(OUTPUT_MESSAGE_ID)
    if not isinstance(item_id, str):
        return {"role": "assistant", "content": message.content}
    text = {"type": "output_text", "text": message.content, "annotations": []}
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [text],
    }


def function_call_item(call: ToolCall, item_id: JsonValue = None) -> dict[str, Any]:
    """A call as the API takes it back (with the id of its item when one is kept). Arguments
    that were not JSON go back as ``{}``; the error result quotes the text."""
    item = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": json.dumps(dict(call.arguments), ensure_ascii=False),
    }
    return item | {"id": item_id} if isinstance(item_id, str) else item


def tool_call_from_item(item: Mapping[str, Any]) -> ToolCall:
    """A ``function_call`` item as a call (an id is made for one that has none)."""
    arguments, raw = json_arguments(item.get("arguments"))
    return ToolCall(
        id=item.get("call_id") or f"call_{new_id()}",
        name=item["name"],
        arguments=arguments,
        raw_arguments=raw,
    )


def reasoning_summary(items: Iterable[Mapping[str, Any]]) -> str | None:
    """The summaries of reasoning items, as the step's reasoning."""
    summaries = [s.get("text") or "" for i in items for s in i.get("summary") or ()]
    return "\n\n".join(s for s in summaries if s) or None


def is_responses_input(items: Iterable[object]) -> bool:
    """Whether the items are Responses input items: some item has a ``type`` (a Chat
    Completions message never has)."""
    return any(_type_of(i) is not None for i in items)


def _type_of(item: object) -> object:
    return item.get("type") if isinstance(item, Mapping) else getattr(item, "type", None)


def messages_from_items(items: Iterable[object]) -> tuple[Message, ...]:
    """Responses input items (dicts, or the SDK's item objects such as a response's
    ``output``) as messages: the items of one model turn make one assistant message."""
    reader = _TurnReader()
    for index, item in enumerate(items):
        reader.read(item, f"Responses input item {index}")
    return named_results(reader.done())


class _TurnReader:
    """Reads items in order, gathering each model turn's items (reasoning, then its message,
    then its calls) into one assistant message."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.reasoning: list[dict[str, Any]] = []
        self.text: tuple[str, str | None] | None = None
        self.calls: list[tuple[ToolCall, str | None]] = []

    def read(self, given: object, where: str) -> None:
        item = as_mapping(given, where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            self._reasoning(item)
        elif kind == "function_call":
            self._call(item, f"{where} (function_call)")
        elif kind == "function_call_output":
            self._output(item, f"{where} (function_call_output)")
        elif kind == "message":
            self._message(item, f"{where} (role {item.get('role')!r})")
        else:
            raise not_understood(
                where,
                f"is of type {kind!r}",
                "a Message holds message, function_call, function_call_output and reasoning "
                "items: keep built-in tools' items (web search, file search, computer use, "
                "custom tools) and item references apart",
            )

    def _reasoning(self, item: Mapping[str, Any]) -> None:
        if self.text is not None or self.calls:
            self._end_turn()
        self.reasoning.append(dict(item))

    def _call(self, item: Mapping[str, Any], where: str) -> None:
        check_keys(item, _CALL_KEYS, where)
        require(item, "call_id", where)
        require(item, "name", where)
        self.calls.append((tool_call_from_item(item), _item_id(item)))

    def _output(self, item: Mapping[str, Any], where: str) -> None:
        check_keys(item, _OUTPUT_KEYS, where)
        self._end_turn()
        content = text_of(item.get("output"), where, _INPUT_PARTS)
        self.messages.append(Message.tool(content, tool_call_id=require(item, "call_id", where)))

    def _message(self, item: Mapping[str, Any], where: str) -> None:
        check_keys(item, _MESSAGE_KEYS, where)
        role = item.get("role")
        if role == "assistant":
            if self.text is not None or self.calls:
                self._end_turn()
            self.text = (text_of(item.get("content"), where, _OUTPUT_PARTS), _item_id(item))
            return
        found = _ROLES.get(str(role))
        if found is None:
            raise not_understood(
                where, "has no role agentledger knows", "give system, developer, user or assistant"
            )
        self._end_turn()
        content = text_of(item.get("content"), where, _INPUT_PARTS)
        self.messages.append(Message(role=found, content=content))

    def _end_turn(self) -> None:
        """The assistant message of the items gathered, if any."""
        if self.text is None and not self.calls and not self.reasoning:
            return
        text, message_id = self.text or ("", None)
        metadata: dict[str, JsonValue] = {}
        if self.reasoning:
            metadata[REASONING_ITEMS] = cast(list[JsonValue], self.reasoning)
        if message_id is not None:
            metadata[OUTPUT_MESSAGE_ID] = message_id
        ids: dict[str, JsonValue] = {c.id: i for c, i in self.calls if i is not None}
        if ids:
            metadata[FUNCTION_CALL_IDS] = ids
        self.messages.append(
            Message(
                role=Role.ASSISTANT,
                content=text,
                tool_calls=[c for c, _ in self.calls],
                reasoning=reasoning_summary(self.reasoning),
                metadata=metadata,
            )
        )
        self.reasoning, self.text, self.calls = [], None, []

    def done(self) -> Sequence[Message]:
        self._end_turn()
        return self.messages


def _item_id(item: Mapping[str, Any]) -> str | None:
    item_id = item.get("id")
    return item_id if isinstance(item_id, str) and item_id else None
