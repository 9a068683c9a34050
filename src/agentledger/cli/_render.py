"""Terminal views shared by the command line and the demo. The commands import this module in
their bodies: it loads rich."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.tree import Tree

from ..values import MCP_SERVER_KEY, MCP_TOOL_KEY, terminal_text


def plain(text: str) -> Text:
    """Text from the ledger as a terminal shows it: never read as markup (a title or a
    message may hold ``[red]`` or ``[link=...]``), and its control characters written as
    escapes (:func:`~agentledger.values.terminal_text`), so data cannot drive the terminal."""
    return Text(terminal_text(text))


def quoted(text: str) -> str:
    """Text from the ledger to put inside markup: as :func:`plain` shows it."""
    return escape(terminal_text(text))


def id_column(table: Table, header: str, shown: Iterable[str]) -> None:
    """A column of ids as ``Ledger.short_ids`` shows them (what a person can type for each):
    never wrapped nor cut, however narrow the terminal."""
    width = max((len(header), *(len(s) for s in shown)))
    table.add_column(header, no_wrap=True, min_width=width)


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
        f"{cost(own.cost_usd)} · {ms(record.duration_ms)}"
    )
    if node.children:
        label += (
            f" · with subagents: {counted(total.steps, 'step')}, {total.usage.input_tokens} in / "
            f"{total.usage.output_tokens} out{cost(total.cost_usd)}"
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
            leaf = item.add(
                f"{mark} {name} · {ms(tool.duration_ms)} → {quoted(preview(tool.result))}"
            )
            if verbose and tool.is_error:
                _add_failure(leaf, tool)
            child = children.get(tool.child_run_id or "")
            if child is not None:
                _add_steps(leaf.add(run_label(child, short)), ledger, child, short, verbose)
        answer = step.final_response()
        if answer is not None:
            item.add(f"[green]answer:[/green] {quoted(preview(answer.content))}")


def _server(tool: Any) -> str:
    """`` (MCP git)`` for a tool an MCP server gave, `` (MCP git: status)`` when the agent
    offered it under another name; empty for the agent's own tools."""
    server, name = tool.metadata.get(MCP_SERVER_KEY), tool.metadata.get(MCP_TOOL_KEY)
    if not isinstance(server, str):
        return ""
    renamed = isinstance(name, str) and name != tool.tool_name
    return f" (MCP {server}: {name})" if renamed else f" (MCP {server})"


def _decided(execution: Any) -> str:
    """`` · criterion: why`` the run went on or stopped after the step; the step's error is
    printed under it, not here again (older ledgers copied it into the outcome)."""
    outcome = execution.outcome
    if outcome is None or not outcome.decided_by:
        return ""
    detail = outcome.detail if outcome.detail != execution.step.error else ""
    return f" · {outcome.decided_by}: {detail}" if detail else f" · {outcome.decided_by}"


def _add_failure(leaf: Tree, tool: Any) -> None:
    """What a failed tool call said in full and, when its tool raised, where: the kept end of
    the traceback, as plain text (a traceback is no markup)."""
    from ..loop import TRACEBACK_KEY

    leaf.add(Text(terminal_text(tool.error or tool.result), style="red"))
    traceback = tool.metadata.get(TRACEBACK_KEY)
    if isinstance(traceback, str):
        leaf.add(Text(terminal_text(traceback.rstrip("\n")), style="dim"))


def cost(value: float | None) -> str:
    return "" if value is None else f" · ${value:.4f}"


def ms(value: float | None) -> str:
    if value is None:
        return "…"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def preview(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
