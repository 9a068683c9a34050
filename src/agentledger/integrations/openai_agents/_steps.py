"""A batch's trace steps as the ledger's values: an ``AgentStep`` per model call, its tool
calls and their outputs as tool executions (queryable in ``tool_executions``), and every trace
item's JSON in the step's metadata (what ``get_items(separate_trace=False)`` reads back)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from ..._agents_sdk_items import (
    AGENT_KEY,
    ITEMS_KEY,
    Item,
    StepItems,
    function_calls,
    kept_item,
    output_text,
    reasoning_of,
    text_of,
)
from ..._values import (
    AgentStep,
    ContinuationOutcome,
    Message,
    Role,
    StepExecution,
    StepType,
    StopReason,
    ToolCall,
    ToolExecution,
    Usage,
)

DECIDED_BY = "openai_agents"
"""The ``decided_by`` of the steps a session records: the SDK's runner decided, not ours."""


@dataclass(frozen=True)
class ModelCall:
    """What the SDK reported of one model call (``RunHooks.on_llm_end``): its usage, the
    agent that made it and its model's name."""

    usage: Usage
    agent_name: str | None = None
    model: str | None = None


def usage_of(sdk_usage: Any) -> Usage:
    """The SDK's ``Usage`` in the ledger's terms (cached prompt tokens are cache reads)."""
    inputs = getattr(sdk_usage, "input_tokens_details", None)
    outputs = getattr(sdk_usage, "output_tokens_details", None)
    return Usage(
        input_tokens=getattr(sdk_usage, "input_tokens", 0) or 0,
        output_tokens=getattr(sdk_usage, "output_tokens", 0) or 0,
        cache_read_tokens=getattr(inputs, "cached_tokens", 0) or 0,
        cache_write_tokens=getattr(inputs, "cache_write_tokens", 0) or 0,
        reasoning_tokens=getattr(outputs, "reasoning_tokens", 0) or 0,
    )


def step_execution(
    index: int, last: bool, items: StepItems, call: ModelCall | None, now: datetime
) -> StepExecution:
    """Step ``index`` of a batch, the last one deciding that the batch ended."""
    outcome = ContinuationOutcome(
        should_continue=not last,
        stop_reason=StopReason.COMPLETED if last else None,
        decided_by=DECIDED_BY,
    )
    return StepExecution(step_index=index, step=_step(items, call, now), outcome=outcome)


def _step(items: StepItems, call: ModelCall | None, now: datetime) -> AgentStep:
    trace = items.trace
    calls = function_calls([item for _, item in trace])
    executions = _executions(calls, [item for _, item in items.outputs], now)
    answered = {e.tool_call.id for e in executions}
    results = {e.tool_call.id: e.result for e in executions}
    metadata: dict[str, JsonValue] = {ITEMS_KEY: [kept_item(n, i, results) for n, i in trace]}
    if call is not None and call.agent_name is not None:
        metadata[AGENT_KEY] = call.agent_name
    assistant = Message(
        role=Role.ASSISTANT,
        content="\n".join(text_of(item) for item in items.answers),
        tool_calls=[c for c in calls.values() if c.id in answered],
        reasoning=reasoning_of([item for _, item in trace]),
        metadata=metadata,
    )
    return AgentStep(
        step_type=StepType.TOOL_USE if executions else StepType.RESPONSE,
        assistant_message=assistant,
        tool_executions=tuple(executions),
        usage=call.usage if call is not None else Usage(),
        model=call.model if call is not None else None,
        started_at=now,
        finished_at=now,
    )


def _executions(
    calls: dict[str, ToolCall], outputs: list[Item], now: datetime
) -> list[ToolExecution]:
    """A tool execution for each function call whose output is in the same step."""
    executions = []
    for item in outputs:
        call = calls.get(str(item.get("call_id")))
        if item.get("type") == "function_call_output" and call is not None:
            executions.append(
                ToolExecution(
                    tool_call=call,
                    arguments=dict(call.arguments) if call.raw_arguments is None else None,
                    result=output_text(item),
                    started_at=now,
                    finished_at=now,
                )
            )
    return executions
