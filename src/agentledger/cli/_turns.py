"""``agentledger show CONVERSATION --trace``: the conversation beside its trace, turn by turn.

Each turn is the messages one run wrote (``Ledger.turns``) under a line naming the run: what
the user said, then what the run did (each tool call with its arguments and its result, the
errors, the subagent runs it started), then its answer, flagged when it was cut short. The
calls and results are cut to the terminal's width; ``--full`` prints them whole. Also how
``show`` prints one message, with or without the trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._values import Role
from ._app import console, time_text
from ._json import message_record, step_record

if TYPE_CHECKING:
    from rich.console import Console

    from .._values import Message, StepExecution, ToolExecution
    from ..ledger import ConversationTurn
    from ._app import Reading

INDENT = 2
"""What the trace lines are indented by (``  → `` and ``  ← ``)."""
_SAID = (Role.USER, Role.SYSTEM)


def print_message(out: Console, message: Message, summarized: set[str]) -> None:
    """A message as ``show`` prints it: its role, when, whether a summary replaced it or it
    was cut short, then its text."""
    from ._render import plain

    style = {"user": "bold cyan", "system": "bold magenta"}.get(message.role, "bold green")
    note = " [dim](summarized)[/dim]" if message.id in summarized else ""
    # An answer cut short (its run was cancelled, or its process died): said so, at once.
    cut = " [bold yellow](interrupted)[/bold yellow]" if message.interrupted else ""
    when = time_text(message.created_at)
    out.print(f"[{style}]{message.role}[/{style}]{cut} [dim]{when}[/dim]{note}")
    out.print(plain(message.content))
    out.print()


def print_turns(
    ledger: Reading,
    conversation_id: str,
    turns: list[ConversationTurn],
    summarized: set[str],
    *,
    full: bool,
) -> None:
    """Each turn of a conversation with its run's trace between what was said and what was
    answered (see the module)."""
    from ._render import plain

    out = console()
    out.rule(plain(f"conversation {conversation_id} · beside its trace"))
    traces = {t.run_id: ledger.steps(t.run_id) for t in turns if t.run_id is not None}
    children = [t.child_run_id for steps in traces.values() for t in _tools(steps)]
    short = ledger.short_ids([*traces, *(c for c in children if c is not None)], of="run")
    for turn in turns:
        steps = traces.get(turn.run_id, ()) if turn.run_id is not None else ()
        out.rule(_heading(ledger, turn.run_id, short), style="dim")
        for message in turn.messages:
            if message.role in _SAID:
                print_message(out, message, summarized)
        _print_trace(out, ledger, turn.run_id, steps, short, full=full)
        for message in turn.messages:
            if message.role not in _SAID:
                print_message(out, message, summarized)
    if not turns:
        out.print("(no messages yet)", style="dim", markup=False)


def _tools(steps: tuple[StepExecution, ...]) -> Iterator[ToolExecution]:
    for execution in steps:
        yield from execution.step.tool_executions


def _heading(ledger: Reading, run_id: str | None, short: dict[str, str]) -> Any:
    from ._render import counted, plain, status_text

    if run_id is None:
        return plain("written by no run")
    run = ledger.run(run_id)
    return plain(
        f"run {short[run.id]} · {run.agent_name} · {status_text(run.status, run.stop_reason)} "
        f"· {counted(run.step_count, 'step')}"
    )


def _print_trace(
    out: Console,
    ledger: Reading,
    run_id: str | None,
    steps: tuple[StepExecution, ...],
    short: dict[str, str],
    *,
    full: bool,
) -> None:
    from ._streaming import say

    if run_id is None:
        return
    width = None if full else max(out.width - INDENT, 20)
    lines = list(trace_lines(steps, width, short))
    error = ledger.run(run_id).error
    if error and not any(e.step.error == error for e in steps):  # a run's error is its step's
        lines.append((f"  error: {error}", "red"))
    for line, style in lines:
        say(out, line, style)
    if lines:
        say(out, "")


def trace_lines(
    steps: tuple[StepExecution, ...], width: int | None, short: dict[str, str]
) -> Iterator[tuple[str, str]]:
    """The lines of a run's trace, each with its style: every tool call and its result, the
    subagent run a call started, and each step's error; each line cut to ``width``."""
    from ._render import preview
    from ._streaming import call_line, result_line

    for execution in steps:
        step = execution.step
        for tool in step.tool_executions:
            yield call_line(tool.tool_call, width), "yellow"
            style = "red" if tool.is_error else "dim"
            yield result_line(tool.result, is_error=tool.is_error, limit=width), style
            if tool.child_run_id is not None:
                child = short.get(tool.child_run_id, tool.child_run_id)
                yield f"    subagent run {child} (agentledger trace {child})", "dim"
        if step.error:
            error = step.error if width is None else preview(step.error, width)
            yield f"  error: {error}", "red"


def turn_records(
    ledger: Reading, turns: list[ConversationTurn], conversation_id: str, summarized: set[str]
) -> Iterator[dict[str, Any]]:
    """``show --trace --json``: one object per turn, its run's id, its messages (as ``show
    --json`` prints them) and its run's steps (as ``trace --json`` does)."""
    for turn in turns:
        steps = ledger.steps(turn.run_id) if turn.run_id is not None else ()
        yield {
            "conversation_id": conversation_id,
            "run_id": turn.run_id,
            "messages": [message_record(conversation_id, m, summarized) for m in turn.messages],
            "steps": [step_record(e) for e in steps],
        }
