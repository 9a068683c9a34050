"""``--json``: the rows a command prints, as JSON Lines for ``jq`` and scripts.

One object per row, on a line of its own; ids in full, times in ISO 8601 (UTC), numbers as
numbers, and nothing else on standard output (notes go to standard error). The keys of a
ledger's row are its table's column names (``schema/README.md``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .._values import Message, StepExecution, ToolExecution
    from ._app import Reading

F = TypeVar("F", bound=Callable[..., Any])

JSON_HELP = (
    "Print the rows as JSON Lines instead: one object per line, ids in full, times in "
    "ISO 8601, numbers as numbers (for jq and scripts)."
)


def json_option(command: F) -> F:
    """The ``--json`` flag, handed to the command as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(command)


def print_json_lines(rows: Iterable[object]) -> None:
    for row in rows:
        click.echo(json.dumps(plain(row), ensure_ascii=False))


def table_row(row: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """A ledger row (``Conversation``, ``AgentRun``, or the reader's record of one) by its
    table's column names, without the checksum, its metadata last."""
    data = dict(row) if isinstance(row, Mapping) else row.model_dump()
    data.pop("checksum", None)
    if "metadata_" in data:
        data["metadata"] = data.pop("metadata_")
    elif "metadata" in data:
        data["metadata"] = data.pop("metadata")
    return data


def message_record(conversation_id: str, message: Message, summarized: set[str]) -> dict[str, Any]:
    """A message as ``show --json`` prints it: its conversation, its fields, and whether a
    summary replaced it in the model's context."""
    return {
        "conversation_id": conversation_id,
        **message.model_dump(),
        "summarized": message.id in summarized,
    }


def run_records(ledger: Reading, tree: Any) -> Iterator[dict[str, Any]]:
    """``trace --json``: each run of the tree, depth first, with its own (``exclusive``) and
    its subtree's (``inclusive``) usage and its steps."""
    for node in tree.walk():
        yield {
            **table_row(node.run),
            "exclusive": node.exclusive,
            "inclusive": node.inclusive,
            "steps": [step_record(e) for e in ledger.steps(node.run.id)],
        }


def step_record(execution: StepExecution) -> dict[str, Any]:
    """A step as ``step_executions`` holds it (without the messages sent to the model), with
    its tool executions and its answer."""
    step, outcome = execution.step, execution.outcome
    answer = step.final_response()
    return {
        "step_index": execution.step_index,
        "step_type": step.step_type,
        "model": step.model,
        "finish_reason": step.finish_reason,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
        "duration_ms": step.duration_ms,
        "usage": step.usage,
        "cost_usd": step.cost_usd,
        "error": step.error,
        "interrupted": step.interrupted,
        "should_continue": None if outcome is None else outcome.should_continue,
        "stop_reason": None if outcome is None else outcome.stop_reason,
        "decided_by": None if outcome is None else outcome.decided_by,
        "tool_executions": [tool_record(t) for t in step.tool_executions],
        "answer": None if answer is None else answer.content,
    }


def tool_record(tool: ToolExecution) -> dict[str, Any]:
    return {
        "tool_call_id": tool.tool_call.id,
        "tool_name": tool.tool_name,
        "arguments": tool.tool_call.arguments,
        "result": tool.result,
        "is_error": tool.is_error,
        "error": tool.error,
        "started_at": tool.started_at,
        "finished_at": tool.finished_at,
        "duration_ms": tool.duration_ms,
        "child_run_id": tool.child_run_id,
    }


def plain(value: Any) -> Any:
    """``value`` as what ``json.dumps`` writes: models and dataclasses as objects, times in
    ISO 8601 (a time without a zone is UTC, as every time agentledger keeps), decimals as
    numbers."""
    from pydantic import BaseModel  # loaded already by what the command printed

    if isinstance(value, BaseModel):
        return plain(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(item) for item in value]
    return _scalar(value)


def _scalar(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Enum):
        return value.value
    return value
