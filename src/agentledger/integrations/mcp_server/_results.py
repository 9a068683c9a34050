"""What the MCP tools answer: JSON-ready records of the ledger's values (ids in full, times in
ISO 8601), each with a short text a person (or a model) reads."""

from __future__ import annotations

from typing import Any

from ..._values import Message, Messages, Spend, StepExecution, ToolExecution, cost_text
from ...ledger import AgentRun, Conversation, RunTree, SearchHit

Record = dict[str, Any]

PREVIEW = 200
"""Characters of a message shown in a tool's text (the structured result holds them all)."""


def conversation_record(conversation: Conversation) -> Record:
    return {
        "id": conversation.id,
        "kind": str(conversation.kind),
        "title": conversation.title,
        "parent_run_id": conversation.parent_run_id,
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
        "metadata": conversation.metadata_ or {},
    }


def message_record(message: Message) -> Record:
    record: Record = {
        "id": message.id,
        "role": str(message.role),
        "content": message.content,
        "created_at": message.created_at.isoformat(),
    }
    if message.name:
        record["name"] = message.name
    if message.tool_calls:
        record["tool_calls"] = [call.model_dump(mode="json") for call in message.tool_calls]
    if message.tool_call_id:
        record["tool_call_id"] = message.tool_call_id
    if message.reasoning:
        record["reasoning"] = message.reasoning
    if message.interrupted:
        record["interrupted"] = True
    return record


def hit_record(hit: SearchHit) -> Record:
    return {
        "conversation_id": hit.conversation_id,
        "seq": hit.seq,
        "section": hit.section,
        "run_id": hit.run_id,
        "message": message_record(hit.message),
    }


def run_record(run: AgentRun) -> Record:
    return {
        "id": run.id,
        "conversation_id": run.conversation_id,
        "parent_run_id": run.parent_run_id,
        "root_run_id": run.root_run_id,
        "depth": run.depth,
        "agent_name": run.agent_name,
        "model": run.model,
        "status": str(run.status),
        "stop_reason": None if run.stop_reason is None else str(run.stop_reason),
        "error": run.error,
        "started_at": run.started_at.isoformat(),
        "finished_at": None if run.finished_at is None else run.finished_at.isoformat(),
        "step_count": run.step_count,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost_usd": run.cost_usd,
    }


def spend_record(spend: Spend) -> Record:
    return {
        **spend.usage.model_dump(mode="json"),
        "total_tokens": spend.usage.total_tokens,
        "cost_usd": spend.cost_usd,
        "steps": spend.steps,
        "fully_priced": spend.fully_priced,
    }


def tree_record(tree: RunTree) -> Record:
    return {
        "run": run_record(tree.run),
        "exclusive": spend_record(tree.exclusive),
        "inclusive": spend_record(tree.inclusive),
        "children": [tree_record(child) for child in tree.children],
    }


def tool_record(execution: ToolExecution) -> Record:
    return {
        "id": execution.id,
        "tool_call_id": execution.tool_call.id,
        "tool_name": execution.tool_call.name,
        "arguments": execution.tool_call.arguments,
        "result": execution.result,
        "is_error": execution.is_error,
        "error": execution.error,
        "started_at": execution.started_at.isoformat(),
        "finished_at": execution.finished_at.isoformat(),
        "child_run_id": execution.child_run_id,
    }


def step_record(execution: StepExecution) -> Record:
    step = execution.step
    return {
        "step_index": execution.step_index,
        "model": step.model,
        "finish_reason": step.finish_reason,
        "started_at": step.started_at.isoformat(),
        "finished_at": step.finished_at.isoformat(),
        "usage": step.usage.model_dump(mode="json"),
        "cost_usd": step.cost_usd,
        "error": step.error,
        "tool_executions": [tool_record(t) for t in step.tool_executions],
    }


def trace_record(run: AgentRun, steps: tuple[StepExecution, ...], trace: Messages) -> Record:
    return {
        "run": run_record(run),
        "steps": [step_record(s) for s in steps],
        "messages": [message_record(m) for m in trace],
    }


# --- texts ---------------------------------------------------------------------------------------


def transcript(messages: Messages) -> str:
    """Messages as lines ``role: content`` (a tool call as ``-> name(arguments)``)."""
    return "\n".join(_line(message) for message in messages) or "(no messages)"


def _line(message: Message) -> str:
    calls = "".join(f" -> {c.name}({c.arguments})" for c in message.tool_calls)
    return f"{message.role}: {_preview(message.content)}{calls}"


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW else flat[: PREVIEW - 1] + "…"


def hits_text(hits: list[SearchHit]) -> str:
    lines = [
        f"{h.conversation_id} #{h.seq} {h.message.role}: {_preview(h.message.content)}"
        for h in hits
    ]
    return "\n".join(lines) or "no message matches"


def runs_text(runs: list[AgentRun]) -> str:
    lines = [
        f"{r.id} {r.status} {r.agent_name} started {r.started_at.isoformat()} "
        f"conversation {r.conversation_id} steps {r.step_count}"
        for r in runs
    ]
    return "\n".join(lines) or "no runs"


def tree_text(tree: RunTree, depth: int = 0) -> str:
    spend = tree.inclusive
    line = (
        f"{'  ' * depth}{tree.run.id} {tree.run.agent_name} {tree.run.status}: "
        f"{tree.exclusive.usage.total_tokens} tokens own, {spend.usage.total_tokens} with "
        f"its subagents, {cost_text(spend.cost_usd, fully_priced=spend.fully_priced)}"
    )
    return "\n".join([line, *(tree_text(child, depth + 1) for child in tree.children)])


def query_text(result: Record) -> str:
    header = " | ".join(result["columns"])
    rows = [" | ".join("" if v is None else str(v) for v in row) for row in result["rows"]]
    more = " (truncated: more rows were left out)" if result["truncated"] else ""
    return "\n".join([header, *rows, f"({result['row_count']} rows{more})"])
