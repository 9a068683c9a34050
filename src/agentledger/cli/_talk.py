"""``agentledger chat`` and ``agentledger run``: a real model over a conversation kept in the
ledger (the click glue over :mod:`._chat`)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._defaults import DEFAULT_MAX_STEPS
from ..errors import AgentLedgerError
from ._app import DEFAULT_DB, cli, console, database, refuse_read_only, scope

if TYPE_CHECKING:
    from ..llm import PriceTable
    from ._chat import Provider, Session, Setup, ToolLike


def _tools(
    ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]
) -> tuple[ToolLike, ...]:
    """--tool MODULE:ATTR, imported (from the current directory too, as uvicorn and flask do)."""
    if not specs:
        return ()
    from ..errors import UsageError
    from ._chat import load_tools

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load_tools(specs)
    except UsageError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def _prices(ctx: click.Context, param: click.Parameter, path: Path | None) -> PriceTable | None:
    if path is None:
        return None
    from ..llm import PriceTable

    try:
        return PriceTable.load(path)
    except AgentLedgerError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


_AGENT_OPTIONS = (
    click.option(
        "--provider",
        type=click.Choice(["openai", "openai-responses", "anthropic"]),
        required=True,
        help="openai: any OpenAI-compatible Chat Completions API (Ollama, vLLM, ...); "
        "openai-responses: OpenAI's Responses API (reasoning models keep their reasoning "
        "across tool calls); anthropic: the Messages API. The key comes from OPENAI_API_KEY "
        "or ANTHROPIC_API_KEY.",
    ),
    click.option("--model", required=True, help="The model name, e.g. gpt-4o-mini."),
    click.option(
        "--base-url",
        default=None,
        help="The API's base URL (default: OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the "
        "provider's), e.g. http://localhost:11434/v1 for Ollama.",
    ),
    click.option("--system", "system_prompt", default=None, help="The system prompt."),
    click.option(
        "--tool",
        "tools",
        multiple=True,
        metavar="MODULE:ATTR",
        callback=_tools,
        help="A tool for the model: a typed function (or a list of them) in an importable "
        "module, e.g. mytools:search. Repeatable.",
    ),
    click.option(
        "--max-steps",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_STEPS,
        show_default=True,
        help="Steps per run before the model must answer.",
    ),
    click.option(
        "--prices",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=_prices,
        default=None,
        help="A price table (JSON shaped like agentledger's prices.json) for the cost.",
    ),
    click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Seconds to wait for the model's answer (default 60).",
    ),
    click.option(
        "--conversation",
        default=None,
        help="Continue this conversation (its id, or a unique prefix of it).",
    ),
)


def _agent_options(command: Callable[..., None]) -> Callable[..., None]:
    """Adds the options ``chat`` and ``run`` share, handing the command one ``setup``."""

    @functools.wraps(command)
    def with_setup(
        *args: Any,
        provider: Provider,
        model: str,
        base_url: str | None,
        system_prompt: str | None,
        tools: tuple[ToolLike, ...],
        max_steps: int,
        prices: PriceTable | None,
        timeout: float | None,
        conversation: str | None,
        **rest: Any,
    ) -> None:
        from ._chat import Setup

        ctx = click.get_current_context()
        db = database(ctx)
        tenant, owner = scope(ctx)
        setup = Setup(
            tenant=tenant,
            owner=owner,
            provider=provider,
            model=model,
            base_url=base_url,
            system_prompt=system_prompt,
            tools=tools,
            max_steps=max_steps,
            prices=prices,
            timeout=timeout,
            conversation_id=conversation,
            db_option=None if db == DEFAULT_DB else db,
        )
        command(*args, setup=setup, **rest)

    for option in reversed(_AGENT_OPTIONS):
        with_setup = option(with_setup)
    return with_setup


@contextlib.contextmanager
def _session(ctx: click.Context, setup: Setup) -> Iterator[Session]:
    """The chat session ``setup`` describes, on the --db ledger; errors as CLI errors. It
    records runs: refused under --read-only, and on a ledger this user may not write."""
    from ._chat import open_session

    refuse_read_only(ctx, ctx.info_name or "run")
    try:
        with open_session(database(ctx), setup, console()) as session:
            yield session
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc


@cli.command()
@click.pass_context
@_agent_options
def chat(ctx: click.Context, setup: Setup) -> None:
    """Talk to a model, a run per line you type.

    The conversation is kept in the ledger. The answer streams as it comes, with each tool call
    as it starts and ends, then the run's tokens and cost. Ctrl-C while an answer streams stops
    it and keeps what was shown (type "go on" to have it continued); Ctrl-C again quits. Leave
    with /exit, /quit or Ctrl-D; continue later with --conversation ID.

    \b
    Examples:
      agentledger chat --provider anthropic --model claude-sonnet-4-5
      agentledger chat --provider openai --model gpt-4o --conversation 01a2b3c4
    """
    from ._chat import chat_loop, read_prompt

    with _session(ctx, setup) as session:
        code = chat_loop(session, read_prompt)
    ctx.exit(code)


@cli.command()
@click.argument("question")
@click.pass_context
@_agent_options
def run(ctx: click.Context, question: str, setup: Setup) -> None:
    """Ask a model one QUESTION, recorded as one run.

    The answer streams as it comes, with each tool call as it starts and ends, then the run's
    tokens and cost, and how to continue the conversation. Exits 1 if the run failed; Ctrl-C
    stops the answer, keeps what was shown and exits 130.

    \b
    Examples:
      agentledger run --provider openai --model gpt-4o-mini "What time is it?"
      agentledger run --provider openai --model llama3.2 \\
          --base-url http://localhost:11434/v1 --tool tools:search "Find it"
    """
    from ._chat import run_once

    with _session(ctx, setup) as session:
        code = run_once(session, question)
    ctx.exit(code)
