"""Terminal views shared by the command line and the demo. The commands import this module in
their bodies: it loads rich."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:
    from rich.tree import Tree

    from .._values import Spend

from .._values import MCP_SERVER_KEY, MCP_TOOL_KEY, cost_text, terminal_text


def plain(text: str) -> Text:
    """Text from the ledger as a terminal shows it: never read as markup (a title or a
    message may hold ``[red]`` or ``[link=...]``), and its control characters written as
    escapes (:func:`~agentledger._values.terminal_text`), so data cannot drive the terminal."""
    return Text(terminal_text(text))


def quoted(text: str) -> str:
    """Text from the ledger to put inside markup: as :func:`plain` shows it."""
    return escape(terminal_text(text))


def run_tree_view(ledger: Any, node: Any, *, verbose: bool = False) -> Tree:
    """A run tree (``Ledger.run_tree``) as a terminal tree: each run with its own and its
    subtree's usage, its steps and tool calls, and each subagent run under the call that
    started it. Runs are shown by their short ids (``Ledger.short_ids``). ``verbose`` adds,
    under each failed tool call, its whole error and the traceback of what it raised."""
    from rich.tree import Tree  # only the trees need it, not the listings

    short = ledger.short_ids((n.run.id for n in node.walk()), of="run")
    root = Tree(run_label(node, short))
    _add_steps(root, ledger, node, short, verbose)
    return root


def run_label(node: Any, short: dict[str, str]) -> str:
    record, own, total = node.run, node.exclusive, node.inclusive
    label = (
        f"[bold]run {quoted(short[record.id])}[/bold] · {quoted(record.agent_name)} · "
        f"{status_text(record.status, record.stop_reason)} · {counted(own.steps, 'step')} · "
        f"{own.usage.input_tokens} in / {own.usage.output_tokens} out"
        f"{cost(own)} · {ms(record.duration_ms)}"
    )
    if node.children:
        label += (
            f" · with subagents: {counted(total.steps, 'step')}, {total.usage.input_tokens} in / "
            f"{total.usage.output_tokens} out{cost(total)}"
        )
    return label


def status_text(status: str, stop_reason: str | None) -> str:
    """A run's status, with why it stopped when that says more: ``stopped (steps_limit)``,
    but ``completed``, not ``completed (completed)``, and ``failed``, not ``failed (error)``."""
    if stop_reason is None or stop_reason == status or (status, stop_reason) == _FAILED:
        return str(status)
    return f"{status} ({stop_reason})"


_FAILED = ("failed", "error")


def counted(amount: int, noun: str) -> str:
    """``1 step``, ``2 steps``, ``0 steps``."""
    return f"{amount} {noun}{'' if amount == 1 else 's'}"


def _add_steps(branch: Tree, ledger: Any, node: Any, short: dict[str, str], verbose: bool) -> None:
    steps = ledger.steps(node.run.id)
    said = {e.step.error for e in steps}
    if node.run.error and node.run.error not in said:  # a run's error is its last step's
        branch.add(f"[red]{quoted(node.run.error)}[/red]")
    children = {child.run.id: child for child in node.children}
    for execution in steps:
        step = execution.step
        item = branch.add(
            f"step {execution.step_index} · {step.step_type} · {step.usage.input_tokens} in / "
            f"{step.usage.output_tokens} out · {ms(step.duration_ms)}{quoted(_decided(execution))}"
        )
        if step.error:
            item.add(f"[red]{quoted(step.error)}[/red]")
        for tool in step.tool_executions:
            mark = "[red]✗[/red]" if tool.is_error else "[green]✓[/green]"
            name = quoted(tool.tool_name + _server(tool))
            result = error_text(tool.result) if tool.is_error else tool.result
            leaf = item.add(f"{mark} {name} · {ms(tool.duration_ms)} → {quoted(preview(result))}")
            if verbose and tool.is_error:
                _add_failure(leaf, tool)
            child = children.get(tool.child_run_id or "")
            if child is not None:
                _add_steps(leaf.add(run_label(child, short)), ledger, child, short, verbose)
        answer = step.final_response()
        if step.interrupted:  # the run ended during it: what the user was shown of it
            shown = _interrupted_answer(ledger, node.run)
            if shown:
                item.add(f"[yellow]interrupted answer:[/yellow] {quoted(preview(shown))}")
        elif answer is not None:
            item.add(f"[green]answer:[/green] {quoted(preview(answer.content))}")


def _interrupted_answer(ledger: Any, run: Any) -> str | None:
    """What the user was shown of the interrupted run ``run``: its answer in the conversation,
    flagged interrupted."""
    for turn in ledger.turns(run.conversation_id):
        if turn.run_id == run.id:
            kept = [m.content for m in turn.messages if m.interrupted]
            return kept[-1] if kept else None
    return None


def _server(tool: Any) -> str:
    """`` (MCP git)`` for a tool an MCP server gave, `` (MCP git: status)`` when the agent
    offered it under another name; empty for the agent's own tools."""
    server, name = tool.metadata.get(MCP_SERVER_KEY), tool.metadata.get(MCP_TOOL_KEY)
    if not isinstance(server, str):
        return ""
    renamed = isinstance(name, str) and name != tool.tool_name
    return f" (MCP {server}: {name})" if renamed else f" (MCP {server})"


def _decided(execution: Any) -> str:
    """`` · went on: 1 tool call`` or `` · stopped: the model answered``: what the run did
    after the step, and why; the step's error is printed under it, not here again (older
    ledgers copied it into the outcome)."""
    outcome = execution.outcome
    if outcome is None or not outcome.decided_by:
        return ""
    detail = outcome.detail if outcome.detail != execution.step.error else ""
    went = "went on" if outcome.should_continue else "stopped"
    return f" · {went}: {because(outcome.decided_by, detail)}"


def because(decided_by: str, detail: str) -> str:
    """Why a run went on or stopped, in words: the criterion's own ``detail`` (``1 tool
    call``, ``10 of 10 steps``), with the limit or the user's criterion that decided when the
    detail does not say it (``10 of 10 steps (step limit)``)."""
    named = _CRITERIA.get(decided_by, decided_by)
    if not detail:
        return named or decided_by.replace("_", " ")
    return f"{detail} ({named})" if named else detail


_CRITERIA = {
    "tool_calls": "",
    "error": "",
    "deadline": "",
    "steps_limit": "step limit",
    "token_limit": "token limit",
    "cost_limit": "cost limit",
    "time_limit": "time limit",
    "finish_reason": "the model's finish reason",
}
"""The built-in criteria (:mod:`agentledger._core`) in words; empty for those whose detail
says it all (``the model answered``, ``1 tool call``). A criterion of the user's is shown by
its name."""


def error_text(result: str) -> str:
    """A failed tool call's result without the ``Error: `` the model is shown before it: where
    it is printed, the call is already marked as failed."""
    return result.removeprefix("Error: ")


def _add_failure(leaf: Tree, tool: Any) -> None:
    """What a failed tool call said in full and, when its tool raised, where: the kept end of
    the traceback, as plain text (a traceback is no markup)."""
    from .._loop import TRACEBACK_KEY

    leaf.add(Text(terminal_text(tool.error or tool.result), style="red"))
    traceback = tool.metadata.get(TRACEBACK_KEY)
    if isinstance(traceback, str):
        leaf.add(Text(terminal_text(traceback.rstrip("\n")), style="dim"))


def cost(spend: Spend) -> str:
    """`` · $0.0012``, `` · unpriced``, `` · $0.0012 + unpriced`` (:func:`cost_text`); nothing
    when no step called a model."""
    if spend.cost_usd is None and spend.fully_priced:
        return ""
    return f" · {cost_text(spend.cost_usd, fully_priced=spend.fully_priced)}"


def ms(value: float | None) -> str:
    if value is None:
        return "…"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def preview(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
