"""Mapping between the values and the ledger's rows, in both directions.

Each fact has one column. A step's assistant message is its row's ``message_id``, ``content``,
``reasoning`` and ``metadata``; its tool calls are its tool rows (``tool_call_id``,
``tool_name``, ``arguments``, and ``metadata.raw_arguments`` for arguments that were not JSON),
counted by ``tool_call_count``. Reading a step back builds each call once, from its tool row,
and hands the same object to the message and to the execution.

It imports no SQLAlchemy: :class:`~agentledger.ledger.LedgerReader` reads rows into values
through it as the ledger does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from .._values import (
    EMPTY_MESSAGES,
    AgentState,
    AgentStatus,
    AgentStep,
    Compaction,
    ContinuationOutcome,
    ExecutionBudget,
    Message,
    MessageStore,
    Role,
    Spend,
    StepExecution,
    StepType,
    StopReason,
    ToolCall,
    ToolExecution,
    Usage,
)
from ..errors import LedgerCorruptError
from ._columns import USAGE_COLUMNS, usage_of
from .checksums import check_row

Row = Mapping[Any, Any]
DAMAGED = "The database file is damaged; restore it from a backup, and see `agentledger db verify`."


def in_sequence(rows: Sequence[Row], key: str, start: int, what: str) -> Sequence[Row]:
    """``rows``, after checking that their ``key`` counts up from ``start`` with no gap: a row
    an index lost in a damaged file shows as a gap instead of a shorter answer."""
    for expected, row in enumerate(rows, start):
        if row[key] != expected:
            raise LedgerCorruptError(
                f"{what}: the row at {key} {expected} is missing (the next one read is at "
                f"{row[key]}). {DAMAGED}"
            )
    return rows


def usage_columns(usage: Usage) -> dict[str, int]:
    return {name: getattr(usage, name) for name in USAGE_COLUMNS}


# --- messages ---------------------------------------------------------------------------------


def tool_calls_json(calls: Sequence[ToolCall]) -> list[Any] | None:
    return [_tool_call_json(call) for call in calls] if calls else None


def _tool_call_json(call: ToolCall) -> dict[str, Any]:
    dumped = call.model_dump(mode="json")
    if call.raw_arguments is None:
        del dumped["raw_arguments"]
    return dumped


def message_columns(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "role": message.role.value,
        "content": message.content,
        "name": message.name,
        "tool_calls": tool_calls_json(message.tool_calls),
        "tool_call_id": message.tool_call_id,
        "reasoning": message.reasoning,
        "metadata": message.metadata or None,
        "created_at": message.created_at,
    }


def message_of(row: Row) -> Message:
    """A message from its row, in ``conversation_messages`` or ``execution_buffer_rows``."""
    check_row("conversation_messages" if "conversation_id" in row else "execution_buffer_rows", row)
    values = {
        "role": row["role"],  # a Role: the column's type reads it as one
        "content": row["content"] or "",
        "name": row["name"],
        "tool_calls": row["tool_calls"] or (),
        "tool_call_id": row["tool_call_id"],
        "reasoning": row["reasoning"],
        "metadata": row["metadata"] or {},
        "id": row["id"],
        "created_at": row["created_at"],
        "interrupted": bool(row.get("interrupted", False)),  # buffer rows have no such column
    }
    if row["checksum"] is None:
        return Message.model_validate(values)  # written by hand: check it
    # The row is exactly what the ledger wrote from a validated message: build it again
    # without validating it twice (a cold load of a long conversation is mostly this).
    values["tool_calls"] = tuple(tool_call_of(c) for c in values["tool_calls"])
    return rebuilt(Message, values)


M = TypeVar("M", bound=BaseModel)


def built(model: type[M], row: Row, /, **fields: Any) -> M:
    """An instance of ``model`` holding ``fields``, read from ``row``: unvalidated when the row
    carries a checksum (checked before: the ledger wrote it from validated values, and it reads
    back intact), validated when it has none (written by hand). Validating builds the model's
    validator, the first time: more than the whole read of a short trace costs."""
    return model.model_construct(**fields) if row["checksum"] is not None else model(**fields)


def rebuilt(model: type[M], values: dict[str, Any]) -> M:
    """An instance of ``model`` holding ``values``, every field given, unvalidated: what
    ``model_construct`` makes, restored as pickle restores an instance (``__new__``, then
    ``__setstate__``) from the state of a first one (:func:`_state`) holding ``values`` as
    its fields. A quarter of ``model_construct``'s cost and half a copy's, which a cold load
    of a long conversation feels. Only for values the ledger wrote from a validated instance,
    read back intact."""
    state = (_STATES.get(model) or _state(model)).copy()
    state[_FIELDS] = values
    instance = model.__new__(model)
    instance.__setstate__(state)
    return instance


_FIELDS = "__dict__"
"""Where an instance's pickled state holds its fields: in its ``__dict__``, as pydantic keeps
them (``model_construct`` sets it)."""
_STATES: dict[type[BaseModel], dict[str, Any]] = {}


def _state(model: type[BaseModel]) -> dict[str, Any]:
    """The pickled state (``__getstate__``) of an instance of ``model`` with every field set
    (to None), made once. The instances :func:`rebuilt` makes share its parts but the fields:
    only a frozen model's, without private attributes or extra fields, whose parts pydantic
    never changes once an instance is made."""
    first = model.model_construct(**dict.fromkeys(model.model_fields))
    state = first.__getstate__()
    config = model.model_config
    shareable = config.get("frozen") and config.get("extra") != "allow"
    if not shareable or model.__private_attributes__ or state.get(_FIELDS) is not vars(first):
        raise TypeError(
            f"{model.__name__} cannot be rebuilt from a shared state: it is not frozen, has "
            "private attributes or extra fields, or this pydantic keeps its fields elsewhere "
            "than in the __dict__ of its pickled state"
        )
    _STATES[model] = state
    return state


def tool_call_of(stored: Mapping[str, Any]) -> ToolCall:
    return rebuilt(
        ToolCall,
        {
            "id": stored["id"],
            "name": stored["name"],
            "arguments": stored.get("arguments") or {},
            "raw_arguments": stored.get("raw_arguments"),
        },
    )


def store_of(rows: Iterable[Mapping[Any, Any]], base: MessageStore | None = None) -> MessageStore:
    """``base`` (or an empty store) with message rows (conversation or buffer rows) appended
    to their sections; the messages a summary took out of the context are left out."""
    sections: dict[str, list[Message]] = {}
    for row in rows:
        if row.get("in_context", True) is False:
            continue  # replaced by a summary: kept in the ledger, out of the model's context
        sections.setdefault(row["section"], []).append(message_of(row))
    return appended(base or MessageStore(), sections)


def appended(store: MessageStore, sections: dict[str, list[Message]]) -> MessageStore:
    for name, messages in sections.items():
        store = store.section(name).append_messages(messages)
    return store


# --- steps and their tools ----------------------------------------------------------------------


def step_columns(run_id: str, execution: StepExecution) -> dict[str, Any]:
    step, outcome = execution.step, execution.outcome
    assistant = step.assistant_message
    return {
        "id": step.id,
        "run_id": run_id,
        "step_index": execution.step_index,
        "step_type": step.step_type.value,
        "model": step.model,
        "finish_reason": step.finish_reason,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
        "duration_ms": step.duration_ms,
        **usage_columns(step.usage),
        "cost_usd": step.cost_usd,
        "should_continue": outcome.should_continue if outcome else False,
        "stop_reason": outcome.stop_reason.value if outcome and outcome.stop_reason else None,
        "decided_by": outcome.decided_by if outcome else None,
        "outcome_detail": outcome.detail if outcome else None,
        "final_response_required": outcome.final_response_required if outcome else False,
        "error": step.error,
        "message_id": assistant.id if assistant else None,
        "content": assistant.content if assistant else None,
        "tool_call_count": len(step.tool_executions),
        "reasoning": assistant.reasoning if assistant else None,
        "metadata": (assistant.metadata or None) if assistant else None,
        "interrupted": step.interrupted,
    }


def tool_columns(
    run_id: str, step_id: str, step_index: int, position: int, e: ToolExecution
) -> dict[str, Any]:
    return {
        "id": e.id,
        "run_id": run_id,
        "step_id": step_id,
        "step_index": step_index,
        "position": position,
        "tool_call_id": e.tool_call.id,
        "tool_name": e.tool_call.name,
        "arguments": dict(e.tool_call.arguments),
        "validated_arguments": e.arguments,
        "result": e.result,
        "is_error": e.is_error,
        "error": e.error,
        "started_at": e.started_at,
        "finished_at": e.finished_at,
        "duration_ms": e.duration_ms,
        "child_run_id": e.child_run_id,
        "metadata": _tool_metadata(e),
    }


SUBTREE_KEY = "subtree"
"""Where a spawn tool execution keeps its subagent's spend, in ``tool_executions.metadata``."""

RAW_ARGUMENTS_KEY = "raw_arguments"
"""Where a tool execution keeps the model's arguments when they were not a JSON object
(:attr:`ToolCall.raw_arguments`), in ``tool_executions.metadata``."""


def _tool_metadata(e: ToolExecution) -> dict[str, Any] | None:
    metadata = dict(e.metadata)
    if e.subtree is not None:
        metadata[SUBTREE_KEY] = e.subtree.model_dump(mode="json")
    if e.tool_call.raw_arguments is not None:
        metadata[RAW_ARGUMENTS_KEY] = e.tool_call.raw_arguments
    return metadata or None


def tool_execution_of(row: Row) -> ToolExecution:
    check_row("tool_executions", row)
    metadata = row["metadata"] or {}
    call = tool_call_of(
        {
            "id": row["tool_call_id"],
            "name": row["tool_name"],
            "arguments": row["arguments"],
            "raw_arguments": metadata.get(RAW_ARGUMENTS_KEY),
        }
    )
    return built(
        ToolExecution,
        row,
        id=row["id"],
        tool_call=call,
        arguments=row["validated_arguments"],
        result=row["result"],
        is_error=row["is_error"],
        error=row["error"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        child_run_id=row["child_run_id"],
        subtree=_spend_of(metadata[SUBTREE_KEY], row) if SUBTREE_KEY in metadata else None,
        metadata={k: v for k, v in metadata.items() if k not in (SUBTREE_KEY, RAW_ARGUMENTS_KEY)},
    )


def _spend_of(stored: Any, row: Row) -> Spend:
    """A subagent's spend as a spawn's tool row keeps it (``Spend.model_dump(mode="json")``):
    built as :func:`built` builds values, when it has every field a spend has."""
    if (
        isinstance(stored, dict)
        and stored.keys() == Spend.model_fields.keys()
        and isinstance(stored["usage"], dict)
        and stored["usage"].keys() == set(USAGE_COLUMNS)
    ):
        fields = {**stored, "usage": usage_of(stored["usage"])}
        return built(Spend, row, **fields)
    return Spend.model_validate(stored)


def step_execution_of(row: Row, tools: Iterable[Row]) -> StepExecution:
    """A step rebuilt from its row and its tool rows: the assistant message and the tool
    executions share each tool call (what the model saw as input is not stored, so
    ``input_messages`` is empty)."""
    check_row("step_executions", row)
    what = f"the tool executions of step {row['id']}"
    tool_rows = in_sequence(list(tools), "position", 0, what)
    if len(tool_rows) != row["tool_call_count"]:
        raise LedgerCorruptError(
            f"step {row['id']} called {row['tool_call_count']} tool(s) but the ledger holds "
            f"{len(tool_rows)} tool execution(s) for it. {DAMAGED}"
        )
    executions = tuple(tool_execution_of(t) for t in tool_rows)
    step = built(
        AgentStep,
        row,
        id=row["id"],
        step_type=StepType(row["step_type"]),
        input_messages=EMPTY_MESSAGES,  # not stored (and no default is copied)
        assistant_message=_assistant_of(row, executions),
        tool_executions=executions,
        usage=usage_of(row),
        cost_usd=row["cost_usd"],
        model=row["model"],
        finish_reason=row["finish_reason"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        error=row["error"],
        interrupted=row["interrupted"],
    )
    outcome = built(
        ContinuationOutcome,
        row,
        should_continue=row["should_continue"],
        stop_reason=StopReason(row["stop_reason"]) if row["stop_reason"] else None,
        decided_by=row["decided_by"] or "",
        detail=row["outcome_detail"] or "",
        final_response_required=row["final_response_required"],
    )
    return built(StepExecution, row, step_index=row["step_index"], step=step, outcome=outcome)


def _assistant_of(row: Row, executions: Sequence[ToolExecution]) -> Message | None:
    if row["message_id"] is None:
        return None
    return built(
        Message,
        row,
        id=row["message_id"],
        role=Role.ASSISTANT,
        content=row["content"] or "",
        tool_calls=tuple(e.tool_call for e in executions),
        reasoning=row["reasoning"],
        metadata=row["metadata"] or {},
        created_at=row["finished_at"],
    )


# --- runs and conversations ---------------------------------------------------------------------


def run_columns_at_end(
    state: AgentState, status: AgentStatus, error: str | None, now: datetime
) -> dict[str, Any]:
    return {
        "status": status.value,
        "stop_reason": state.stop_reason.value if state.stop_reason else None,
        "error": error,
        "finished_at": now,
        "heartbeat_at": now,
        "step_count": state.step_count,
        "model": _model_of(state),
        **usage_columns(state.usage),
        "cost_usd": state.cost_usd,
        "fully_priced": state.fully_priced,
        "partial_output": None,  # an ended run streams nothing
        "partial_step_index": None,
    }


def _model_of(state: AgentState) -> str | None:
    for execution in reversed(state.step_executions):
        if execution.step.model:
            return execution.step.model
    return None


def budget_json(budget: ExecutionBudget) -> dict[str, Any]:
    return budget.model_dump(mode="json", exclude_none=True)


# --- compactions --------------------------------------------------------------------------------


def compaction_columns(compaction: Compaction) -> dict[str, Any]:
    return {
        **compaction.model_dump(exclude={"usage", "metadata"}),
        **usage_columns(compaction.usage),
        "kind": compaction.kind.value,
        "status": compaction.status.value,
        "metadata": compaction.metadata or None,
    }


def compaction_of(row: Row) -> Compaction:
    check_row("context_compactions", row)
    return Compaction.model_validate(
        {
            **{k: v for k, v in row.items() if k not in USAGE_COLUMNS and k != "checksum"},
            "usage": usage_of(row),
            "metadata": row["metadata"] or {},
        }
    )
