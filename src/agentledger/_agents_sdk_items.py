"""How the OpenAI Agents SDK's session items map onto the ledger: pure code over their JSON.

No part of the SDK is imported here: ``LedgerSession`` (the ``openai-agents`` extra) and
``agentledger import`` of a ``SQLiteSession`` file (which needs no SDK) both read items so.

A batch of items (one ``add_items`` call) is split into the conversation (user and assistant
messages) and the execution trace (function calls and their outputs, reasoning, handoffs,
hosted tool calls, anything else), grouped into steps: a step is what one model call produced
(its messages, reasoning and tool calls) followed by the outputs of those calls. Every item
keeps its JSON exactly as the SDK gave it, under the keys below, so that reading it back gives
what went in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from ._values import Role, ToolCall, check_storable
from .errors import UsageError

SESSION_KEY = "openai_agents_session"
"""In a run's metadata: the id of the session whose ``add_items`` (or removal) it recorded."""
ITEM_KEY = "openai_agents_item"
"""In a conversation message's metadata: the SDK item it was, exactly."""
INDEX_KEY = "openai_agents_index"
"""In a conversation message's metadata: its position in its run's batch."""
RUN_KEY = "openai_agents_run"
"""In a conversation message's metadata: the run that added it (the row's ``run_id``, which
the ``Message`` values the ledger reads back do not carry)."""
ITEMS_KEY = "openai_agents_items"
"""In a step's metadata: its trace items, each ``{"index": n, "item": {...}}``; a call's output
whose text the step's tool execution holds is kept as ``{"index": n, "item": {..., "output":
null}, "output_in": "tool_executions"}`` (:func:`kept_item`, :func:`rebuilt_item`)."""
OUTPUT_IN = "output_in"
"""In an entry of :data:`ITEMS_KEY`: where the item's ``output`` is kept instead."""
AGENT_KEY = "openai_agents_agent"
"""In a step's metadata: the SDK agent whose model call it was, when the hooks said so."""
REMOVED_KEY = "openai_agents_removed"
"""In a run's metadata: the items ``pop_item`` took out of the session (their keys)."""
CLEARED_KEY = "openai_agents_cleared"
"""In a run's metadata: ``clear_session`` took every earlier item out of the session."""
COMPACTION_KEY = "openai_agents_compaction"
"""In a run's metadata: its batch holds a ``compaction`` item (what ``responses.compact``
returns in place of the items it compacted), which the model must see again."""

BRANCH_KEY = "openai_agents_branch"
"""In a conversation's metadata: the session branch it holds (the session's own conversation,
without it, holds ``main``)."""
FORKED_FROM_KEY = "openai_agents_forked_from"
"""In a branch's conversation's metadata: what it was forked from, ``{"conversation": id,
"runs": n, "before": key, "turn": n}`` (the items of that conversation after its first ``runs``
runs, up to the user message ``before``, which begins turn ``turn``)."""
BRANCH_DELETED_KEY = "openai_agents_branch_deleted"
"""In a run's metadata: ``delete_branch`` took the run's branch out of the session (its rows
stay)."""

Item = dict[str, JsonValue]
Indexed = tuple[int, Item]

_CONVERSATION_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT}


def stored_items(items: Sequence[Any]) -> list[Item]:
    """The batch as the ledger keeps it: each item as JSON, checked before anything is
    written, so that a batch the ledger cannot hold is refused whole and loses nothing."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        raise UsageError(
            f"add_items takes a list of items, not {type(items).__name__}: wrap a single item "
            "in a list; nothing was stored"
        )
    return [_stored(item, n, len(items)) for n, item in enumerate(items)]


def _stored(item: Any, n: int, count: int) -> Item:
    what = f"item {n} of the {count} given to add_items"
    if not isinstance(item, Mapping):
        raise UsageError(
            f"{what} is a {type(item).__name__}, not an item: the session stores the SDK's "
            "items as JSON objects (dicts, as `Runner` and `ItemHelpers` make them); nothing "
            "was stored"
        )
    try:
        text = json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"{what} cannot be stored as JSON ({exc}); give its values as JSON types "
            "(call model_dump(mode='json') on SDK objects); nothing was stored"
        ) from exc
    check_storable(
        item,
        what,
        what_to_do="strip or escape such characters before adding it; nothing was stored",
    )
    stored: Item = json.loads(text)
    return stored


def conversation_role(item: Item) -> Role | None:
    """The role of an item that belongs to the conversation (a user or assistant message),
    else None: the item is trace."""
    if item.get("type", "message") != "message":
        return None
    role = item.get("role")
    return _CONVERSATION_ROLES.get(role) if isinstance(role, str) else None


def text_of(item: Item) -> str:
    """The readable text of a message item: its content, or its text parts joined."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    texts = [_part_text(part) for part in parts]
    return "\n".join(t for t in texts if t)


def _part_text(part: JsonValue) -> str:
    if not isinstance(part, dict):
        return ""
    text = part.get("text", part.get("refusal"))
    return text if isinstance(text, str) else ""


def reasoning_of(items: Sequence[Item]) -> str | None:
    """The reasoning summaries of a step's reasoning items, joined."""
    texts = [
        _part_text(part)
        for item in items
        if item.get("type") == "reasoning"
        for part in _as_list(item.get("summary"))
    ]
    joined = "\n".join(t for t in texts if t)
    return joined or None


def _as_list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def is_tool_output(item: Item) -> bool:
    """Whether the item answers a call (``function_call_output`` and its kin): it ends the
    step of the model call that asked for it, rather than beginning a new one."""
    kind = item.get("type")
    return isinstance(kind, str) and kind.endswith(("_output", "_response"))


@dataclass
class StepItems:
    """One model call's items in a batch, then the outputs of its calls, by batch index."""

    produced: list[Indexed] = field(default_factory=list)
    outputs: list[Indexed] = field(default_factory=list)

    @property
    def trace(self) -> list[Indexed]:
        """The step's items that are not conversation messages, in batch order."""
        indexed = sorted([*self.produced, *self.outputs], key=lambda pair: pair[0])
        return [(n, item) for n, item in indexed if conversation_role(item) is None]

    @property
    def answers(self) -> list[Item]:
        return [item for _, item in self.produced if conversation_role(item) is Role.ASSISTANT]


@dataclass(frozen=True)
class Batch:
    """A batch split: conversation messages (with their roles) and trace steps."""

    messages: list[tuple[int, Item, Role]]
    steps: list[StepItems]


def is_compaction(item: Item) -> bool:
    """Whether ``item`` is the model's compacted memory of earlier items: trace by kind, but
    part of what every later model call is sent."""
    return item.get("type") == "compaction"


def split_batch(items: Sequence[Item]) -> Batch:
    """Split a batch into the conversation and the steps of the trace. A user message ends
    the step in progress; an item a model produces after outputs begins a new one."""
    messages: list[tuple[int, Item, Role]] = []
    steps: list[StepItems] = []
    current: StepItems | None = None
    for n, item in enumerate(items):
        role = conversation_role(item)
        if role is not None:
            messages.append((n, item, role))
        if role is Role.USER:
            current = None
        elif is_tool_output(item):
            current = current or _began(steps)
            current.outputs.append((n, item))
        else:
            if current is None or current.outputs:
                current = _began(steps)
            current.produced.append((n, item))
    return Batch(messages, steps)


def _began(steps: list[StepItems]) -> StepItems:
    steps.append(StepItems())
    return steps[-1]


def call_arguments(item: Item) -> tuple[dict[str, JsonValue], str | None]:
    """A function call's arguments as a JSON object, or (when they are not one) empty with
    the raw text kept."""
    raw = item.get("arguments")
    if not isinstance(raw, str):
        return {}, None if raw is None else json.dumps(raw)
    try:
        parsed = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        return {}, raw
    return (parsed, None) if isinstance(parsed, dict) else ({}, raw)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def output_text(item: Item) -> str:
    """A call output as text: a string as it is, structured output as its JSON."""
    output = item.get("output")
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False)


def function_calls(items: Sequence[Item]) -> dict[str, ToolCall]:
    """The function calls among ``items``, by call id."""
    calls = {}
    for item in items:
        call_id, name = item.get("call_id"), item.get("name")
        if item.get("type") == "function_call" and isinstance(call_id, str):
            arguments, raw = call_arguments(item)
            calls[call_id] = ToolCall(
                id=call_id, name=str(name), arguments=arguments, raw_arguments=raw
            )
    return calls


def kept_item(n: int, item: Item, results: Mapping[str, str]) -> Item:
    """The entry of :data:`ITEMS_KEY` for the step's item ``n``: a function call's output
    left to the tool execution that holds the same text (``results``, by call id), so that a
    long result is stored once; any other item whole."""
    output, call_id = item.get("output"), item.get("call_id")
    if (
        item.get("type") == "function_call_output"
        and isinstance(output, str)
        and isinstance(call_id, str)
        and results.get(call_id) == output
    ):
        return {"index": n, "item": {**item, "output": None}, OUTPUT_IN: "tool_executions"}
    return {"index": n, "item": item}


def rebuilt_item(entry: Item, results: Mapping[str, str]) -> tuple[int, Item] | None:
    """The step's item an entry of :data:`ITEMS_KEY` keeps, with its index in the batch; None
    for an entry that is not one (a hand-edited row), or whose output's tool execution is
    gone."""
    item, index = entry.get("item"), entry.get("index")
    if not isinstance(item, dict) or not isinstance(index, int):
        return None
    if entry.get(OUTPUT_IN) != "tool_executions":
        return index, item
    result = results.get(str(item.get("call_id")))
    return None if result is None else (index, {**item, "output": result})
