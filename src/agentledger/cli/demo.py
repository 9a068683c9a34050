"""The offline demo: a travel assistant with three tools, over three turns of one
conversation, the last one delegated to two subagents.

The model is scripted (no network), but it reads what the tools returned: each scripted step is
a function of the request, so the answers are built from the real tool results
(:mod:`._demo_script`). The turns stream as ``agentledger chat`` prints them; then the demo
shows the clean conversation beside the execution trace of every step, with its tokens, the
run tree, and the metrics.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._builder import AgentBuilder
from .._loop import Agent
from .._recording import RunResult
from .._values import AgentState, InferenceRequest, Messages, Role, StepExecution, cost_text, money
from .._width import FittedColumn, FittedTable, fitted_console
from ..analytics import Analytics
from ..errors import ConfigurationError
from ..ledger import Ledger
from ..llm import PriceTable, ScriptedLLM
from ._demo_cache import cached_turns
from ._demo_file import (
    DEMO_FILE,
    demo_conversation,
    look_around,
    not_on_the_path,
    open_the_viewer,
    start_afresh,
)
from ._demo_script import (
    CHUNK_DELAY,
    DEMO_PRICES,
    SYSTEM_PROMPT,
    convert_currency,
    coordinator_script,
    get_weather,
    scripted,
    search_hotels,
    team,
    travel_script,
)
from ._render import because, counted, error_text, run_tree_view
from ._streaming import StreamPrinter, say

TEAM_TURN = "Put the whole trip together for three nights, and have someone check it before I book."

TURNS = (
    "I'm flying to Lisbon next Friday for two nights. What's the weather, and what would a "
    "mid-range hotel cost in euros?",
    "And if I stay three nights?",
)


def build_agent(
    *,
    separated_tool_trace: bool = True,
    ledger: Ledger | None = None,
    prices: PriceTable | None = DEMO_PRICES,
    chunk_delay: float = 0.0,
) -> tuple[Agent, ScriptedLLM]:
    """The demo's agent and its scripted model, recording in ``ledger`` when given; its steps
    are priced with ``prices`` (``None``: unpriced, their cost unknown). Streamed, the models'
    text comes in chunks ``chunk_delay`` seconds apart."""
    script = [*travel_script(), *coordinator_script()]
    llm = scripted(script, "scripted-travel-model", prices, chunk_delay)
    builder = (
        AgentBuilder()
        .with_llm(llm)
        .with_name("travel-assistant")
        .with_system_prompt(SYSTEM_PROMPT)
        .with_tools([get_weather, search_hotels, convert_currency])
        .with_subagents(team(prices, chunk_delay=chunk_delay))
        .with_parallel_tools(2)
        .with_separated_tool_trace(separated_tool_trace)
    )
    return (builder.with_ledger(ledger) if ledger else builder).build(), llm


def converse(agent: Agent) -> list[AgentState]:
    """Both turns of the conversation, in memory; the state after each."""
    state, states = AgentState.empty(), []
    for text in TURNS:
        state = agent.execute(state.with_user_message(text))
        states.append(state)
    return states


def converse_recorded(
    agent: Agent, printer: StreamPrinter | None = None, conversation_id: str | None = None
) -> list[RunResult]:
    """The three turns as recorded runs of one conversation (``conversation_id``, else a new
    one); streamed through ``printer`` (each turn's question first) when given."""
    results: list[RunResult] = []
    for text in (*TURNS, TEAM_TURN):
        conversation_id = results[-1].conversation_id if results else conversation_id
        if printer is None:
            results.append(agent.run(text, conversation_id))
            continue
        say(printer.console, f"user: {text}", "bold cyan")
        results.append(printer.print_run(agent.stream(text, conversation_id)))
        say(printer.console, "")
    return results


def run_demo(
    console: Console | None = None,
    *,
    db_path: Path | None = None,
    chunk_delay: float | None = None,
) -> list[AgentState]:
    """Run the three turns, recorded in the SQLite ledger ``db_path`` (by default
    :data:`DEMO_FILE`, in the current directory), and print them as they stream (the models'
    text in chunks ``chunk_delay`` seconds apart: by default :data:`CHUNK_DELAY` on a
    terminal, where someone watches them come, and none when the output goes elsewhere), then
    what they left: the state after each.

    An earlier demo's ledger at ``db_path`` is started afresh; any other file there raises
    :class:`~agentledger.errors.UsageError` and is left as it is.

    Turns 1 and 2: the assistant uses its tools. Turn 3: it delegates to a researcher (with
    tools of its own) and a reviewer, and the run tree is shown with its usage."""
    console = console or fitted_console()
    if chunk_delay is None:
        chunk_delay = CHUNK_DELAY if console.is_terminal else 0.0
    db_path = DEMO_FILE if db_path is None else db_path
    afresh = start_afresh(db_path)
    console.rule("[bold]agentledger demo: a travel assistant and its subagents, offline[/bold]")
    console.print(
        "The conversation keeps what the user said and what the agent answered; every tool call, "
        "tool result and bit of reasoning stays in the execution trace.\n"
    )
    if afresh is not None:
        console.print(afresh, style="dim", markup=False)
    with Ledger.open(db_path) as ledger:
        agent, llm = build_agent(ledger=ledger, chunk_delay=chunk_delay)
        console.rule("[bold]The three turns, as they stream[/bold]")
        trip = demo_conversation(ledger, "A trip to Lisbon")
        results = converse_recorded(agent, StreamPrinter(console), trip)
        states = [r.state for r in results]
        ends = [sum(s.step_count for s in states[: i + 1]) for i in range(len(states))]
        for number, state in enumerate(states[:2], start=1):
            _print_turn(console, number, state, llm.requests[ends[number - 1] - 1])
        inline_agent, inline_llm = build_agent(separated_tool_trace=False)
        inline = converse(inline_agent)
        _print_summary(console, states[:2], first_request_of_turn_2=llm.requests[ends[0]])
        console.print(
            f"The same two turns inline (with_separated_tool_trace(False)) leave "
            f"{len(inline[-1].messages())} messages in the conversation, and turn 2's first "
            f"request carries {len(inline_llm.requests[ends[0]].messages)} messages instead of "
            f"{len(llm.requests[ends[0]].messages)}: run 1's tool trace, sent again.\n"
        )
        _print_turn(console, 3, states[2], llm.requests[ends[2] - 1])
        _print_team(console, ledger, results[-1])
        _print_ledger(console, ledger, results)
    _print_metrics(console, db_path)
    _print_sql(console, db_path)
    with Ledger.open(db_path) as ledger:
        _print_cache(console, ledger)
        shown = ledger.short_ids([results[-1].run_id], of="run")[results[-1].run_id]
    _print_look_around(console, db_path, shown)
    return states


def _print_turn(console: Console, number: int, state: AgentState, last: InferenceRequest) -> None:
    table = Table(show_lines=False, expand=True, title=f"Turn {number}", title_style="bold")
    table.add_column("Conversation (what the user sees)", ratio=2, vertical="top")
    table.add_column("Execution trace (this run's steps)", ratio=3, vertical="top")
    table.add_row(_conversation(state), Group(*(_step(e) for e in state.step_executions)))
    console.print(table)
    outcome = state.continuation_outcome
    assert outcome is not None
    console.print(
        f"  run {state.run_id} · [bold]{state.status}[/bold]: "
        f"{because(outcome.decided_by, outcome.detail)} · {counted(state.step_count, 'step')} · "
        f"{state.usage.input_tokens} in / {state.usage.output_tokens} out tokens · the model's "
        f"last request held {len(last.messages)} messages, "
        f"{sum(1 for m in last.messages if m.is_tool_trace())} of them trace\n"
    )


def _conversation(state: AgentState) -> Group:
    lines = []
    for message in state.messages():
        style = "cyan" if message.role is Role.USER else "green"
        lines.append(Text.assemble((f"{message.role}: ", f"bold {style}"), message.content, "\n"))
    return Group(*lines)


def _step(execution: StepExecution) -> Panel:
    step = execution.step
    body = Text()
    if (
        step.assistant_message is not None
        and step.assistant_message.content
        and step.has_tool_calls()
    ):
        body.append(f"says: {step.assistant_message.content}\n", style="italic")
    if step.assistant_message is not None and step.assistant_message.reasoning:
        body.append(f"reasoning: {step.assistant_message.reasoning}\n", style="magenta")
    for ex in step.tool_executions:
        args = json.dumps(ex.tool_call.arguments, ensure_ascii=False)
        body.append(f"→ {ex.tool_name}({args})\n", style="yellow")
        if ex.is_error:
            body.append(f"  ← error: {_shorten(error_text(ex.result))}\n", style="red")
        else:
            body.append(f"  ← {_shorten(ex.result)}\n")
    if step.response_messages:
        body.append("answer filed in the conversation\n", style="green")
    u = step.usage
    tokens = f"{u.input_tokens} in / {u.output_tokens} out"
    title = f"step {execution.step_index} · {step.step_type} · {tokens}"
    body.rstrip()
    return Panel(body, title=title, title_align="left", border_style="dim")


def _shorten(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _print_summary(
    console: Console, states: list[AgentState], *, first_request_of_turn_2: InferenceRequest
) -> None:
    final = states[-1]
    trace = sum(1 for s in states for e in s.step_executions for m in e.step.trace_messages)
    errors = sum(len(e.step.tool_errors) for s in states for e in s.step_executions)
    console.print(
        Panel(
            f"conversation: {len(final.messages())} messages "
            f"({', '.join(m.role for m in final.messages())})\n"
            f"execution trace: {sum(s.step_count for s in states)} steps, {trace} trace messages, "
            f"{errors} tool error fed back to the model and corrected\n"
            f"execution buffer now: {len(final.execution_buffer())} messages; turn 2's first "
            f"request held {len(first_request_of_turn_2.messages)} messages, no trace of run 1\n"
            f"tokens: {sum(s.usage.total_tokens for s in states)} over both runs",
            title="Summary",
            title_align="left",
        )
    )


def _print_team(console: Console, ledger: Ledger, result: RunResult) -> None:
    console.rule("[bold]Turn 3's run tree: the assistant and the subagents it delegated to[/bold]")
    tree = ledger.run_tree(result.run_id)
    console.print(run_tree_view(ledger, tree))
    own, total = tree.exclusive.usage, tree.inclusive.usage
    console.print(
        f"The assistant's own steps spent {own.total_tokens} tokens; with its subagents, "
        f"{total.total_tokens} (each run's row keeps only its own: the tree's totals are sums "
        f"of step rows, so nothing is counted twice). Its conversation got one answer; the "
        f"subagents' work stays in their own runs and conversations.\n"
    )


def _print_cache(console: Console, ledger: Ledger) -> None:
    console.rule("[bold]Prompt caching: the second turn reads the first from the cache[/bold]")
    console.print(
        "Two more turns, through AnthropicMessages (Claude Sonnet 4.5, its prices) against a "
        "loopback server that answers as the Messages API does and counts its prompt cache as "
        "the API does, from the cache_control breakpoints the provider placed: once with the "
        "default cache='5m', once with cache=None.\n"
    )
    table = Table(
        "cache",
        "turn",
        "input tokens",
        "read from cache",
        "written to cache",
        "cost",
        title="Each turn as recorded",
        title_justify="left",
    )
    costs: dict[str | None, list[float]] = {}
    for cache in ("5m", None):
        for turn, result in enumerate(cached_turns(ledger, cache), start=1):
            u = result.usage
            costs.setdefault(cache, []).append(result.cost_usd or 0.0)  # priced: Sonnet 4.5
            table.add_row(
                cache or "off",
                str(turn),
                f"{u.input_tokens:,}",
                f"{u.cache_read_tokens:,}",
                f"{u.cache_write_tokens:,}",
                cost_text(result.cost_usd, fully_priced=result.spend.fully_priced),
            )
    console.print(table)
    cached, uncached = costs["5m"][1], costs[None][1]
    console.print(
        f"Turn 2 read the first turn's prompt from the cache: {money(cached)} instead of "
        f"{money(uncached)}, {1 - cached / uncached:.0%} less (cache reads cost a tenth of the "
        "input price; the first turn's writes a quarter more).\n"
    )


def _print_ledger(console: Console, ledger: Ledger, results: list[RunResult]) -> None:
    conversation_id = results[-1].conversation_id
    console.rule("[bold]What the ledger holds[/bold]")
    stored = ledger.messages(conversation_id)
    console.print(
        f"conversation {conversation_id}, version {ledger.conversation(conversation_id).version}: "
        f"{len(stored)} messages ({', '.join(m.role for m in stored)})"
    )
    for result in results:
        trace = ledger.trace_messages(result.run_id)
        same = trace == Messages(
            tuple(m for e in result.state.step_executions for m in e.step.trace_messages)
        )
        console.print(
            f"run {result.run_id}: {len(ledger.steps(result.run_id))} steps, "
            f"{len(ledger.tool_executions(result.run_id))} tool executions, "
            f"{len(ledger.buffer(result.run_id))} buffer rows left; its trace rebuilt from the "
            f"step and tool rows: {len(trace)} messages, {'identical' if same else 'DIFFERENT'}"
        )


_ROLLUP = """
SELECT agent_path AS run, exclusive_steps AS own_steps,
       exclusive_input_tokens + exclusive_output_tokens AS own_tokens,
       inclusive_input_tokens + inclusive_output_tokens AS tree_tokens,
       exclusive_cost_usd AS own_cost, exclusive_unpriced_steps,
       inclusive_cost_usd AS tree_cost, inclusive_unpriced_steps
FROM run_rollup ORDER BY path
"""
_TOOLS = """
SELECT tool_name, calls, errors, round(p50_ms, 3) AS p50_ms, round(p95_ms, 3) AS p95_ms
FROM tool_stats ORDER BY calls DESC, tool_name
"""


def _print_metrics(console: Console, db_path: Path) -> None:
    console.rule("[bold]Metrics: DuckDB over the same file, rolled up the run tree[/bold]")
    try:
        opened = Analytics.open(db_path)
    except ConfigurationError as exc:  # DuckDB is an extra: without it, the demo says so
        console.print(f"Metrics skipped: {exc}\n", markup=False)
        return
    with opened as analytics:
        console.print(_rollup_table(analytics))
        relation = analytics.sql(_TOOLS)
        console.print(_sql_table("tool_stats", relation.columns, relation.fetchall()))


def _rollup_table(analytics: Analytics) -> FittedTable:
    """Each run's own and whole-tree usage, its costs as every view writes them."""
    rows = [
        (
            *counts,
            cost_text(own, fully_priced=not own_unpriced),
            cost_text(tree, fully_priced=not tree_unpriced),
        )
        for *counts, own, own_unpriced, tree, tree_unpriced in analytics.sql(_ROLLUP).fetchall()
    ]
    headers = ("run", "own steps", "own tokens", "tree tokens", "own cost", "tree cost")
    return _sql_table("run_rollup: own and whole-tree usage", headers, rows)


_QUERIES = (
    (
        "Where each table's rows went",
        "SELECT 'conversation_messages' AS tbl, COUNT(*) AS n FROM conversation_messages "
        "UNION ALL SELECT 'agent_runs', COUNT(*) FROM agent_runs "
        "UNION ALL SELECT 'step_executions', COUNT(*) FROM step_executions "
        "UNION ALL SELECT 'tool_executions', COUNT(*) FROM tool_executions "
        "UNION ALL SELECT 'execution_buffer_rows', COUNT(*) FROM execution_buffer_rows",
    ),
    (
        "Tokens per run, from its steps",
        "SELECT r.status, r.step_count, SUM(s.input_tokens) AS input, "
        "SUM(s.output_tokens) AS output "
        "FROM agent_runs r JOIN step_executions s ON s.run_id = r.id "
        "GROUP BY r.id ORDER BY r.started_at",
    ),
    (
        "Tools: calls, errors and mean latency",
        "SELECT tool_name, COUNT(*) AS calls, SUM(is_error) AS errors, "
        "ROUND(AVG(duration_ms), 3) AS mean_ms FROM tool_executions "
        "GROUP BY tool_name ORDER BY calls DESC, tool_name",
    ),
)


def _print_sql(console: Console, db_path: Path) -> None:
    console.rule("[bold]Plain SQL over the ledger[/bold]")
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        for title, query in _QUERIES:
            cursor = conn.execute(query)
            console.print(_sql_table(title, [d[0] for d in cursor.description], cursor))


def _sql_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> FittedTable:
    """A query's result: its first column (what each row is) wrapped if need be, the others
    whole, as many as fit."""
    fitted = [FittedColumn(columns[0], 1, min_width=16), *(FittedColumn(c, 1) for c in columns[1:])]
    return FittedTable(fitted, [[str(v) for v in row] for row in rows], title=title)


def _print_look_around(console: Console, db_path: Path, run: str) -> None:
    console.print(f"The ledger is the SQLite file [bold]{db_path}[/bold]. Look around:")
    for line in look_around(db_path, run):
        console.print(f"  {line}", markup=False, highlight=False)
    hint = not_on_the_path()
    if hint is not None:
        console.print(hint, markup=False, highlight=False)
    for line in open_the_viewer(db_path):
        console.print(line, markup=False, highlight=False)
