"""Messages as Anthropic's Messages API takes them, and back: the one reading and writing of
that format, for the ``AnthropicMessages`` provider and for ``Messages.from_anthropic`` and
``Messages.to_anthropic()``.

The system prompt travels apart from the turns. Turns alternate user and assistant: messages of
the same role in a row share one turn, a tool result is a ``tool_result`` block of a user turn
(``is_error`` when its metadata says so). An assistant turn's blocks are kept as they came:
thinking blocks (signatures and all), server tool blocks and block types this code does not
know, in their order, so they go back to the API unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

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
from ._message import TOOL_ERROR_KEY, Message, Role, ToolCall

THINKING_BLOCKS = "thinking_blocks"
"""The metadata key of an assistant message that keeps its thinking blocks, signatures and
all, so they can be sent back within the run as the API requires."""
BLOCK_ORDER = "block_order"
"""The metadata key that keeps the types of an assistant message's content blocks in the
order they came (``["thinking", "tool_use", "thinking", "tool_use"]`` for interleaved
thinking): the blocks go back to the API in that order, as it requires."""
KEPT_BLOCKS = "kept_blocks"
"""The metadata key of an assistant message that keeps whole the content blocks that are
neither its text, its thinking nor its tool calls: server tool calls and their results
(``server_tool_use``, ``web_search_tool_result``, ``code_execution_tool_result``, ...) and
any block type this client does not know yet (such a block is kept, never a failure). When
there are some, or citations, the text blocks are kept too, one by one with their
citations. They go back to the API within the run, in the order
``BLOCK_ORDER`` keeps, as the server tools require."""
_READ = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
"""The block types an assistant message reads into its fields."""
_TEXT_BLOCKS = {"text": "text"}
_USER_BLOCK_KEYS = frozenset({"type", "text", "cache_control"})
_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"})


# -- writing ------------------------------------------------------------------------------------


def anthropic_system(messages: Iterable[Message]) -> str | None:
    """The system messages' text, joined: the ``system`` the API takes apart from the turns."""
    system = [m.content for m in messages if m.role is Role.SYSTEM and m.content]
    return "\n\n".join(system) if system else None


def anthropic_turns(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Alternating user and assistant turns of the messages other than the system ones;
    messages of the same role in a row share one."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            continue
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role is Role.TOOL:
        result = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        return [result | {"is_error": True} if message.metadata.get(TOOL_ERROR_KEY) else result]
    assistant = message.role is Role.ASSISTANT
    kept = _kept_blocks(message) if assistant else []
    queues: dict[str, list[dict[str, Any]]] = {
        "thinking": _thinking(message) if assistant else [],
        "text": _texts(message, [b for b in kept if b["type"] == "text"]),
        "tool_use": [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
            for c in message.tool_calls
        ],
    }
    for block in kept:
        if block["type"] != "text":
            queues.setdefault(block["type"], []).append(block)
    blocks = _in_order(queues, message.metadata.get(BLOCK_ORDER))
    return [b for b in blocks if b.get("type") != "thinking" or b.get("signature")]


def _in_order(queues: dict[str, list[dict[str, Any]]], order: object) -> list[dict[str, Any]]:
    """The blocks in the order they came (thinking interleaved with tool calls, server tool
    calls before their results, must go back so); the text goes where its first block was
    unless its blocks were kept one by one. Blocks the order does not place (a message from
    before the order was kept) follow in the usual order: thinking, text, the kept blocks,
    tool calls."""
    blocks: list[dict[str, Any]] = []
    for kind in order if isinstance(order, list) else ():
        queue = queues.get("thinking" if kind == "redacted_thinking" else str(kind))
        if queue:
            blocks.append(queue.pop(0))
    last = ("thinking", "text")
    rest = [b for kind, queue in queues.items() if kind not in (*last, "tool_use") for b in queue]
    return blocks + queues["thinking"] + queues["text"] + rest + queues["tool_use"]


def _texts(message: Message, kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The text blocks kept one by one (citations and all) while they still say the
    message's content; else the content as one block."""
    if kept and "".join(str(b.get("text") or "") for b in kept) == message.content:
        return kept
    return [{"type": "text", "text": message.content}] if message.content else []


def _kept_blocks(message: Message) -> list[dict[str, Any]]:
    kept = message.metadata.get(KEPT_BLOCKS)
    blocks = [dict(b) for b in kept if isinstance(b, dict)] if isinstance(kept, list) else []
    return [b for b in blocks if isinstance(b.get("type"), str)]


def _thinking(message: Message) -> list[dict[str, Any]]:
    """The thinking blocks kept with an assistant message, to send back unchanged (a thinking
    block a stream was cut in before its signature came is left out later: the API refuses
    it)."""
    kept = message.metadata.get(THINKING_BLOCKS)
    return [dict(b) for b in kept if isinstance(b, dict)] if isinstance(kept, list) else []


# -- reading ------------------------------------------------------------------------------------


def assistant_from_blocks(content: Sequence[object]) -> Message:
    """An assistant turn's blocks as its message: the text blocks joined, the thinking as
    reasoning, the ``tool_use`` blocks as tool calls; thinking, server tool and unknown blocks
    kept whole in the metadata (``THINKING_BLOCKS``, ``KEPT_BLOCKS``, in the order
    ``BLOCK_ORDER`` says), so that an unknown block type never fails and everything goes back
    as it came."""
    blocks = [_block(b) for b in content]
    thinking = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
    texts = [b for b in blocks if b["type"] == "text"]
    metadata: dict[str, JsonValue] = {}
    if thinking:
        metadata[THINKING_BLOCKS] = cast(list[JsonValue], thinking)
    kept = _kept(blocks, texts)
    if kept:
        metadata[KEPT_BLOCKS] = kept
    if thinking or kept:
        metadata[BLOCK_ORDER] = [b["type"] for b in blocks]
    reasoning = "\n\n".join(b["thinking"] for b in thinking if b["type"] == "thinking")
    return Message(
        role=Role.ASSISTANT,
        content="".join(b["text"] for b in texts),
        tool_calls=[
            ToolCall(id=b["id"], name=b["name"], arguments=b.get("input") or {})
            for b in blocks
            if b["type"] == "tool_use"
        ],
        reasoning=reasoning or None,
        metadata=metadata,
    )


def _kept(blocks: list[dict[str, Any]], texts: list[dict[str, Any]]) -> list[JsonValue]:
    """The blocks ``KEPT_BLOCKS`` keeps: those ``assistant_from_blocks`` does not read, and
    the text blocks as they came when there are such blocks or citations."""
    others = [b for b in blocks if b["type"] not in _READ]
    whole = others or any(b.get("citations") for b in texts)
    kept = [b for b in blocks if b["type"] not in _READ or (whole and b["type"] == "text")]
    return cast(list[JsonValue], kept)


def _block(wire: object) -> dict[str, Any]:
    if not isinstance(wire, dict) or not isinstance(wire.get("type"), str):
        raise TypeError(f"a content block must be an object with a type, not {wire!r}")
    return wire


def messages_from_anthropic(turns: Iterable[object], system: object = None) -> tuple[Message, ...]:
    """Messages API turns (dicts, or the SDK's objects) and the system prompt as messages: a
    user turn's blocks each a message of their own, an assistant turn one message."""
    messages = [
        Message.system(text) for text in _system(system, "The system prompt given to Anthropic")
    ]
    for index, given in enumerate(turns):
        where = f"Anthropic message {index}"
        turn = as_mapping(given, where)
        where = f"{where} (role {turn.get('role')!r})"
        check_keys(turn, frozenset({"role", "content"}), where)
        messages.extend(_turn(turn, where))
    return named_results(messages)


def _system(system: object, where: str) -> list[str]:
    """The system prompt, a string or a list of text blocks, as the texts of system messages."""
    if system is None or isinstance(system, str):
        return [system] if system else []
    if not isinstance(system, Sequence):
        raise not_understood(where, "is neither text nor a list of text blocks", "give either")
    texts = []
    for index, block in enumerate(system):
        texts.append(text_of([block], f"{where}, block {index}", _TEXT_BLOCKS))
    return [t for t in texts if t]


def _turn(turn: Mapping[str, Any], where: str) -> list[Message]:
    content = turn.get("content")
    if turn.get("role") == "assistant":
        if content is None or isinstance(content, str):
            return [Message.assistant(content or "")]
        blocks = [_assistant_block(b, f"{where}, block {n}") for n, b in enumerate(content)]
        return [assistant_from_blocks(blocks)]
    if turn.get("role") != "user":
        raise not_understood(
            where,
            "is neither a user nor an assistant turn",
            "give the system prompt as from_anthropic(messages, system=...)",
        )
    if content is None or isinstance(content, str):
        return [Message.user(content or "")]
    return [_user_block(b, f"{where}, block {n}") for n, b in enumerate(content)]


def _assistant_block(given: object, where: str) -> dict[str, Any]:
    """An assistant block that can be read: it has a type, and a tool call its id and name
    (any other block is kept whole)."""
    block = dict(as_mapping(given, where))
    require(block, "type", where)
    if block["type"] == "tool_use":
        require(block, "id", where)
        require(block, "name", where)
        if not isinstance(block.get("input", {}), dict):
            raise not_understood(where, "has an input that is not an object", "give it as one")
    return block


def _user_block(given: object, where: str) -> Message:
    block = as_mapping(given, where)
    kind = block.get("type")
    if kind == "text":
        check_keys(block, _USER_BLOCK_KEYS, where)
        return Message.user(text_field(block, "text", where))
    if kind != "tool_result":
        raise not_understood(
            where,
            f"is a block of type {kind!r}",
            "a Message holds text and tool results from a user turn: keep images and "
            "documents apart from the messages",
        )
    check_keys(block, _RESULT_KEYS, where)
    result = Message.tool(
        text_of(block.get("content"), where, _TEXT_BLOCKS),
        tool_call_id=require(block, "tool_use_id", where),
    )
    if block.get("is_error"):
        return result.model_copy(update={"metadata": {TOOL_ERROR_KEY: True}})
    return result
