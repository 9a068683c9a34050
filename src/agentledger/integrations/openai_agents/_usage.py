"""A session's usage per session, per turn and per tool, as the SDK's ``AdvancedSQLiteSession``
reports it, read from the rows the ledger already has: each run's token totals (the sums of
its steps, one step per model call) and its tool executions.

The SDK's session keeps usage in a table of its own, written by ``store_run_usage(result)``
after each ``Runner.run``. The ledger records each model call's usage on the step that holds
its output, when ``Runner.run`` is given ``hooks=session.hooks``; storing the run's total as
well would count it twice, so ``store_run_usage`` stores nothing (it checks the hooks were
there).

A turn is what the SDK calls one: it begins with a user message of the branch. A run belongs
to the turn of its first item still in the branch, so a turn popped whole takes its usage with
it, as the SDK drops its usage row. A branch's usage is that of its own runs: the turns it was
forked with count in the branch they were run in (the SDK does not copy usage to a branch
either); its tool usage counts the calls of every turn it shows, as the SDK's does.

Everything here runs in a worker thread (the session's async methods hand it over).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ...errors import UsageError
from ...ledger import AgentRun
from ._branches import find, live
from ._view import Branch, BranchedSession, Entry


def session_usage(session: BranchedSession, branch_id: str | None) -> dict[str, int] | None:
    """The usage of the turns of one branch, or of every branch of the session."""
    branches = [find(session, branch_id)] if branch_id else [b for b, _ in live(session)]
    turns = [runs for b in branches for runs in _turns(session, b).values()]
    if not turns:
        return None
    totals = _usage_of([run for runs in turns for run in runs])
    return {
        "requests": totals["requests"],
        "input_tokens": totals["input_tokens"],
        "output_tokens": totals["output_tokens"],
        "total_tokens": totals["total_tokens"],
        "total_turns": len(turns),
    }


def turn_usage(
    session: BranchedSession, user_turn_number: int | None, branch_id: str | None
) -> list[dict[str, Any]] | dict[str, Any]:
    """The usage of each turn of a branch, or of one turn (``{}`` when it has none)."""
    turns = _turns(session, _branch(session, branch_id))
    if user_turn_number is not None:
        runs = turns.get(user_turn_number)
        return _usage_of(runs) if runs else {}
    return [{"user_turn_number": n, **_usage_of(runs)} for n, runs in sorted(turns.items())]


def tool_usage(session: BranchedSession, branch_id: str | None) -> list[tuple[str, int, int]]:
    """``(tool name, calls, turn)`` for each tool each turn of the branch called."""
    branch = _branch(session, branch_id)
    entries = session._entries(branch.conversation_id, every_item=True)
    turn_of = _turn_of_runs(entries)
    calling = dict.fromkeys(e.run_id for e in entries if e.item.get("type") == "function_call")
    counted: Counter[tuple[int, str]] = Counter()
    for run_id in calling:
        for execution in session.ledger.tool_executions(run_id):
            counted[turn_of[run_id], execution.tool_call.name] += 1
    return [(name, count, turn) for (turn, name), count in sorted(counted.items())]


def check_recorded(session: BranchedSession, result: Any) -> None:
    """Refuse, with what to do, a run whose tokens the current turn's rows do not hold: its
    model calls were recorded without the hooks, and their usage is not in the ledger."""
    usage = getattr(getattr(result, "context_wrapper", None), "usage", None)
    if not (getattr(usage, "input_tokens", 0) or getattr(usage, "output_tokens", 0)):
        return
    turns = _turns(session, session._branch)
    latest = turns[max(turns)] if turns else []
    if latest and not any(run.input_tokens or run.output_tokens for run in latest):
        raise UsageError(
            "the model calls of this turn were recorded without their usage: pass "
            "hooks=session.hooks to Runner.run, and the session records each call's usage on "
            "its step (store_run_usage has nothing to add to that)"
        )


def _branch(session: BranchedSession, branch_id: str | None) -> Branch:
    return session._branch if branch_id is None else find(session, branch_id)


def _turn_of_runs(entries: list[Entry]) -> dict[str, int]:
    """The turn of each run with items in a branch (``entries``, every item of it): that
    of its first item there."""
    turn, turns = 0, dict[str, int]()
    for entry in entries:
        turn += entry.item.get("role") == "user"
        turns.setdefault(entry.run_id, turn)
    return turns


def _turns(session: BranchedSession, branch: Branch) -> dict[int, list[AgentRun]]:
    """The branch's own runs that made model calls, by turn."""
    turn_of = _turn_of_runs(session._entries(branch.conversation_id, every_item=True))
    turns: dict[int, list[AgentRun]] = {}
    for run in session._runs(branch.conversation_id):
        if run.step_count and run.id in turn_of:
            turns.setdefault(turn_of[run.id], []).append(run)
    return turns


def _usage_of(runs: list[AgentRun]) -> dict[str, Any]:
    """The runs' usage in the SDK's terms (the ledger's cache reads are its cached tokens)."""
    inputs, outputs = sum(r.input_tokens for r in runs), sum(r.output_tokens for r in runs)
    return {
        "requests": sum(r.step_count for r in runs),
        "input_tokens": inputs,
        "output_tokens": outputs,
        "total_tokens": inputs + outputs,
        "input_tokens_details": {
            "cached_tokens": sum(r.cache_read_tokens for r in runs),
            "cache_write_tokens": sum(r.cache_write_tokens for r in runs),
        },
        "output_tokens_details": {"reasoning_tokens": sum(r.reasoning_tokens for r in runs)},
    }
