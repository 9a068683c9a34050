"""Recorded runs as spans: the ledger's rows (runs, steps, tool executions, with their real
start and end times) turned into the spans the live tracer emits, with ids derived from the
rows' ids, so that exporting the same runs twice gives the same spans."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum

from ..._values import StepExecution, ToolExecution
from ...ledger import AgentRun
from . import _attributes as at
from . import _semconv as sc


class Kind(IntEnum):
    """Span kinds, numbered as OTLP numbers them."""

    INTERNAL = 1
    CLIENT = 3


@dataclass(frozen=True)
class SpanRecord:
    """One finished span, ready to encode."""

    name: str
    kind: Kind
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    start: datetime
    end: datetime
    attributes: at.Attributes
    error: str | None = None
    """The status message of a span whose status is ``ERROR``; None when it is unset."""


def trace_id(root_run_id: str) -> bytes:
    """The trace id of a run tree: 16 bytes of a hash of its root run's id."""
    return _hashed(f"trace {root_run_id}", 16)


def span_id(kind: str, row_id: str) -> bytes:
    """The span id of the row ``row_id`` (a run, a step, a tool execution)."""
    return _hashed(f"{kind} {row_id}", 8)


def _hashed(text: str, size: int) -> bytes:
    return hashlib.sha256(f"agentledger {text}".encode()).digest()[:size]


def tree_spans(
    runs: Sequence[AgentRun], steps: dict[str, tuple[StepExecution, ...]], *, content: bool
) -> list[SpanRecord]:
    """The spans of one run tree: ``runs`` (the root first, then its subagent runs), with each
    run's ``steps``. A subagent's run is a child of the tool call that spawned it."""
    spawned_by: dict[str, bytes] = {}
    spans: list[SpanRecord] = []
    for run in sorted(runs, key=lambda r: (r.depth, r.started_at, r.id)):
        parent = spawned_by.get(run.id) or (
            span_id("run", run.parent_run_id) if run.parent_run_id else None
        )
        spans.append(run_span(run, parent))
        for execution in steps.get(run.id, ()):
            spans.extend(step_spans(run, execution, content=content))
            for tool in execution.step.tool_executions:
                if tool.child_run_id is not None:
                    spawned_by[tool.child_run_id] = span_id("tool", tool.id)
    return spans


def run_span(run: AgentRun, parent: bytes | None) -> SpanRecord:
    failed = at.run_failed(run.status, run.stop_reason)
    attributes = at.run_start_attributes(
        run_id=run.id,
        agent_name=run.agent_name,
        conversation_id=run.conversation_id,
        parent_run_id=run.parent_run_id,
        root_run_id=run.root_run_id,
        depth=run.depth,
    ) | at.run_end_attributes(
        status=run.status,
        stop_reason=run.stop_reason,
        usage=run.usage,
        cost_usd=run.cost_usd,
        model=run.model,
        step_count=run.step_count,
        error=run.error,
    )
    return SpanRecord(
        name=f"{sc.INVOKE_AGENT} {run.agent_name}",
        kind=Kind.INTERNAL,
        trace_id=trace_id(run.root_run_id),
        span_id=span_id("run", run.id),
        parent_span_id=parent,
        start=run.started_at,
        end=run.finished_at or run.heartbeat_at,
        attributes=attributes,
        error=(run.error or run.status.value) if failed else None,
    )


def step_spans(run: AgentRun, execution: StepExecution, *, content: bool) -> list[SpanRecord]:
    """The ``chat`` span of a step's model call, then an ``execute_tool`` span per tool call.
    The model call ends where the first tool starts (the step's end, when none ran)."""
    step = execution.step
    tools = step.tool_executions
    answered = min((step.finished_at, *(t.started_at for t in tools)))
    attributes = at.chat_start_attributes(
        conversation_id=run.conversation_id,
        run_id=run.id,
        step_index=execution.step_index,
        request_model=step.model,
        provider=None,
    ) | at.chat_end_attributes(
        usage=step.usage, model=step.model, finish_reason=step.finish_reason, cost_usd=step.cost_usd
    )
    attributes[sc.STEP_ID] = step.id
    if step.error is not None:
        attributes[sc.ERROR_TYPE] = at.error_type(step.error)
    if content:
        attributes |= at.content_attributes(
            step.input_messages, step.assistant_message, step.finish_reason
        )
    chat = SpanRecord(
        name=at.chat_name(step.model),
        kind=Kind.CLIENT,
        trace_id=trace_id(run.root_run_id),
        span_id=span_id("step", step.id),
        parent_span_id=span_id("run", run.id),
        start=step.started_at,
        end=answered,
        attributes=attributes,
        error=step.error,
    )
    return [chat, *(tool_span(run, execution, t, content=content) for t in tools)]


def tool_span(
    run: AgentRun, execution: StepExecution, tool: ToolExecution, *, content: bool
) -> SpanRecord:
    attributes = at.tool_start_attributes(
        tool.tool_call,
        conversation_id=run.conversation_id,
        run_id=run.id,
        step_index=execution.step_index,
    ) | at.tool_end_attributes(tool, content=content)
    attributes[sc.STEP_ID] = execution.step.id
    return SpanRecord(
        name=at.tool_name(tool.tool_call),
        kind=Kind.INTERNAL,
        trace_id=trace_id(run.root_run_id),
        span_id=span_id("tool", tool.id),
        parent_span_id=span_id("run", run.id),
        start=tool.started_at,
        end=tool.finished_at,
        attributes=attributes,
        error=tool.error if tool.is_error else None,
    )


def trees(runs: Iterable[AgentRun]) -> list[list[AgentRun]]:
    """``runs`` grouped by run tree, the root first in each, oldest tree first; only the trees
    whose root is among ``runs`` and has ended (a running run's spans are not over yet)."""
    grouped: dict[str, list[AgentRun]] = {}
    for run in runs:
        grouped.setdefault(run.root_run_id, []).append(run)
    roots = [
        r
        for r in (next((x for x in g if x.id == root), None) for root, g in grouped.items())
        if r is not None and r.finished_at is not None
    ]
    roots.sort(key=lambda r: (r.started_at, r.id))
    return [sorted(grouped[r.id], key=lambda x: (x.depth, x.started_at, x.id)) for r in roots]
