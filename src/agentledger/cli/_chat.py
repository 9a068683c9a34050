"""What ``agentledger chat`` and ``agentledger run`` do, as plain functions: build the provider
and the agent from the command's options, load the user's tools, run the model over a
conversation in the ledger, and print the run as it streams (its text as it comes, each tool
call as it starts and ends), then what it spent. Ctrl-C while an answer streams stops it and
keeps what was shown of it.

``_talk.py`` is the click glue over this module; nothing here knows about click.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import httpx
from rich.console import Console

from .._builder import DEFAULT_MAX_STEPS, AgentBuilder
from .._core import Tool, ToolSet
from .._loop import Agent, RunStream
from .._recording import RunResult
from .._values import AgentStatus, cost_text, new_id
from ..errors import (
    AgentLedgerError,
    ConfigurationError,
    LedgerReadOnlyError,
    NotFoundError,
    UsageError,
)
from ..ledger import Ledger, normalize_url, sqlite_path
from ..llm import (
    DEFAULT_TIMEOUT,
    AnthropicMessages,
    HttpProvider,
    OpenAIChat,
    OpenAIResponses,
    PriceTable,
)
from ._app import in_scope
from ._render import counted, preview, status_text
from ._streaming import StreamPrinter, say, stop

Provider = Literal["openai", "openai-responses", "anthropic"]
PROVIDERS: dict[str, type[HttpProvider]] = {
    "openai": OpenAIChat,
    "openai-responses": OpenAIResponses,
    "anthropic": AnthropicMessages,
}
EXIT_COMMANDS = frozenset({"/exit", "/quit"})
RETRY_COMMAND = "/retry"
INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells use."""
GO_ON = "go on"
"""What a user types to have the model continue an answer Ctrl-C stopped."""

ToolLike = Tool | Callable[..., object]


@dataclass(frozen=True, kw_only=True)
class Setup:
    """The options ``chat`` and ``run`` share, parsed."""

    provider: Provider
    model: str
    base_url: str | None = None
    system_prompt: str | None = None
    tools: tuple[ToolLike, ...] = ()
    max_steps: int = DEFAULT_MAX_STEPS
    prices: PriceTable | None = None
    timeout: float | None = None
    conversation_id: str | None = None
    db_option: str | None = None
    """The ``--db`` to repeat in the commands printed for continuing (None: the default)."""
    tenant: str | None = None
    owner: str | None = None
    """``--tenant`` and ``--owner``: the scope the session keeps to (None: not given)."""

    def continue_command(self, command: str, conversation_id: str) -> str:
        """The command line that continues ``conversation_id`` with this model."""
        words = ["agentledger"]
        if self.db_option is not None:
            words += ["--db", self.db_option]
        for option, value in (("--tenant", self.tenant), ("--owner", self.owner)):
            words += [option, value] if value is not None else []
        words += [command, "--provider", self.provider, "--model", self.model]
        if self.base_url is not None:
            words += ["--base-url", self.base_url]
        words += ["--conversation", conversation_id]
        return shlex.join(words)


# -- the provider and the tools ------------------------------------------------------------------


def make_llm(setup: Setup) -> HttpProvider:
    """The provider client; its API key comes from the environment only."""
    kind = PROVIDERS[setup.provider]
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT if setup.timeout is None else setup.timeout
    try:
        return kind(setup.model, base_url=setup.base_url, timeout=timeout, prices=setup.prices)
    except ConfigurationError as exc:
        if os.environ.get(kind.api_key_variable):
            raise
        raise ConfigurationError(
            f"no API key for {kind.provider}: set {kind.api_key_variable} in the environment "
            "(the command line reads keys only from there, so they stay out of your shell "
            f"history). A local {kind.provider}-compatible server needs no key: pass its "
            "--base-url."
        ) from exc


def load_tools(specs: Iterable[str]) -> tuple[ToolLike, ...]:
    """The tools named by ``MODULE:ATTR`` specs; each attribute is a tool (a typed function
    or a :class:`Tool`) or a list or tuple of them. Raises ``UsageError`` saying what failed."""
    tools = tuple(t for spec in specs for t in load_tool(spec))
    ToolSet(tools)  # a function that cannot be a tool, or two tools with one name, fail here
    return tools


def load_tool(spec: str) -> list[ToolLike]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"{spec!r} is not MODULE:ATTR: name an importable module and a function in it, "
            "for example mytools:search (or a list of functions, mytools:TOOLS)"
        )
    value: object = _import(module_name)
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigurationError(
                f"{spec!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    tools: list[ToolLike] = []
    for item in value if isinstance(value, list | tuple) else [value]:
        if not (isinstance(item, Tool) or callable(item)):
            raise ConfigurationError(
                f"{spec!r} is a {type(item).__name__}, not a tool: expected a typed function, "
                "a Tool, or a list or tuple of them"
            )
        tools.append(item)
    return tools


def _import(module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not _names_a_parent(exc.name, module_name):
            raise ConfigurationError(
                f"importing {module_name!r} failed: {exc} (install what it imports)"
            ) from exc
        raise ConfigurationError(
            f"cannot import {module_name!r}: there is no module {exc.name!r} here. Run from the "
            "directory that holds it, or add that directory to PYTHONPATH"
        ) from exc
    except Exception as exc:  # the user's module raised while being imported
        raise ConfigurationError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc


def _names_a_parent(missing: str, module_name: str) -> bool:
    """Whether ``missing`` is ``module_name`` or a package it lives in."""
    return module_name == missing or module_name.startswith(f"{missing}.")


# -- the ledger and the agent --------------------------------------------------------------------


def open_ledger(db: str, setup: Setup) -> tuple[Ledger, Ledger, str | None]:
    """The ledger at ``db``, created when needed, and its handle in the session's scope; with
    ``setup.conversation_id`` (an id or a unique prefix of one), one that holds that
    conversation in the scope (else ``NotFoundError``, and nothing is created), and the
    conversation's full id. A ledger this user may not write raises ``LedgerReadOnlyError``."""
    conversation_id = setup.conversation_id
    path = sqlite_path(normalize_url(db))
    if conversation_id is not None and path is not None and not path.exists():
        raise NotFoundError(
            f"no conversation {conversation_id!r}: there is no ledger at {path} "
            "(choose the ledger with --db or AGENTLEDGER_DB)"
        )
    ledger = Ledger.open(db)
    try:
        ledger.check_writable()  # before the first question, not after it
        scoped = in_scope(ledger, setup.tenant, setup.owner)
        if conversation_id is None:
            return ledger, scoped, None
        return ledger, scoped, scoped.conversation(conversation_id).id
    except (LedgerReadOnlyError, NotFoundError, UsageError):
        ledger.close()
        raise


def build_agent(setup: Setup, llm: HttpProvider, ledger: Ledger) -> Agent:
    builder = (
        AgentBuilder()
        .with_name("cli")
        .with_llm(llm, model=setup.model)
        .with_tools(setup.tools)
        .with_max_steps(setup.max_steps)
        .with_ledger(ledger)
    )
    if setup.system_prompt:
        builder = builder.with_system_prompt(setup.system_prompt)
    return builder.build()


@dataclass
class Session:
    """A model, a ledger and a conversation (created with its first message when new)."""

    setup: Setup
    agent: Agent
    ledger: Ledger
    console: Console
    conversation_id: str
    is_new: bool
    failed_run_id: str | None = None
    interactive: bool = False
    """In ``chat``: a failed run is continued with ``/retry`` in the session itself."""
    stopped: bool = False
    """The last answer was stopped by Ctrl-C (and kept as far as it was shown)."""

    def ask(self, text: str) -> RunResult | None:
        """One run on the conversation, printed as it streams, then the status line; None
        when Ctrl-C stopped it before it began."""
        if self.is_new:
            self.ledger.create_conversation(
                conversation_id=self.conversation_id, title=preview(text, 80)
            )
            self.is_new = False
        return self._stream(self.agent.stream(text, self.conversation_id))

    def retry(self) -> RunResult | None:
        """Continue the run that failed last, where it stopped, streamed; None when there is
        none (or Ctrl-C stopped it before it went on)."""
        if self.failed_run_id is None:
            return None
        run_id = self.failed_run_id
        return self._stream(RunStream(lambda: self.agent.resume(run_id)))

    def _stream(self, stream: RunStream) -> RunResult | None:
        """Print the run as it streams. Ctrl-C stops it: what was shown is kept (a second
        Ctrl-C while that is recorded raises ``KeyboardInterrupt``)."""
        self.stopped = False
        printer = StreamPrinter(self.console)
        try:
            result = printer.print_run(stream)
        except KeyboardInterrupt:
            return self._stopped(stream, printer)
        return self._report(result)

    def _stopped(self, stream: RunStream, printer: StreamPrinter) -> RunResult | None:
        result = stop(stream, self.console)
        self.stopped = True
        if result is None:
            printer.end_line()
            self.interrupted()
            return None
        printer.catch_up(result)
        if self.interactive:
            say(
                self.console,
                f"(interrupted: the answer so far is kept; `{GO_ON}` continues it)",
                "yellow",
            )
        else:
            say(self.console, "(interrupted: the answer so far is kept)", "yellow")
        return result

    def _report(self, result: RunResult) -> RunResult:
        self.failed_run_id = result.run_id if result.status is AgentStatus.FAILED else None
        again = self.setup.continue_command("chat", result.conversation_id)
        where = "" if self.interactive else f"continue it with: {again}, then "
        retry = (
            f"once the cause is fixed, {where}{RETRY_COMMAND} continues the run where it stopped"
        )
        print_result(self.console, result, self.setup.model, retry=retry)
        return result

    def interrupted(self) -> None:
        """Say, after Ctrl-C stopped a run, where the run is and how to go on."""
        runs = [] if self.is_new else self.ledger.runs(self.conversation_id)
        if not runs:
            say(self.console, "\ninterrupted before the run began", "yellow")
            return
        run = runs[-1]
        say(
            self.console,
            f"\ninterrupted: run {run.id} is kept in the ledger ({run.status}, "
            f"{counted(run.step_count, 'step')} recorded; `agentledger trace {run.id}` shows "
            "them)",
            "yellow",
        )
        again = self.setup.continue_command("chat", run.conversation_id)
        if run.status == AgentStatus.RUNNING:
            say(self.console, "`agentledger recover` frees the conversation once its lease expires")
            say(self.console, f"then continue the conversation with: {again}")
        elif run.status == AgentStatus.FAILED:
            say(self.console, f"continue it where it stopped with: {again}, then {RETRY_COMMAND}")
        else:
            say(self.console, f"continue the conversation with: {again}")


@contextlib.contextmanager
def open_session(db: str, setup: Setup, console: Console) -> Iterator[Session]:
    """The session ``setup`` describes; the provider client and the ledger are closed after.
    Raises ``AgentLedgerError`` (no API key, an unknown conversation, a ledger that cannot be
    opened) before anything is written."""
    llm = make_llm(setup)
    with llm:
        opened, ledger, conversation_id = open_ledger(db, setup)
        try:
            session = Session(
                setup=setup,
                agent=build_agent(setup, llm, ledger),
                ledger=ledger,
                console=console,
                conversation_id=conversation_id or new_id(),
                is_new=conversation_id is None,
            )
            if not session.is_new:
                session.failed_run_id = last_failed_run(ledger, session.conversation_id)
            yield session
        finally:
            opened.close()


def last_failed_run(ledger: Ledger, conversation_id: str) -> str | None:
    """The conversation's last run if it failed (so ``/retry`` can continue it), else None."""
    runs = ledger.runs(conversation_id)
    return runs[-1].id if runs and runs[-1].status == AgentStatus.FAILED else None


# -- the two commands ----------------------------------------------------------------------------


def run_once(session: Session, question: str) -> int:
    """``agentledger run``: one run; the exit code (1 when the run failed, 130 when Ctrl-C
    stopped it)."""
    try:
        result = session.ask(question)
    except KeyboardInterrupt:  # a second Ctrl-C, while the first one's stop was recorded
        session.interrupted()
        return INTERRUPTED
    if result is None:
        return INTERRUPTED
    again = session.setup.continue_command("run", result.conversation_id)
    say(
        session.console,
        f"conversation {result.conversation_id} · continue it with: {again} QUESTION "
        "(or chat instead of run)",
        "dim",
    )
    if session.stopped:
        return INTERRUPTED
    return 1 if result.status is AgentStatus.FAILED else 0


def chat_loop(session: Session, read_line: Callable[[], str | None]) -> int:
    """``agentledger chat``: a run per line ``read_line`` gives until it gives None, ``/exit``
    or ``/quit``; the exit code. A failed run keeps the session going; ``/retry`` continues it.

    Ctrl-C while an answer streams stops it, keeps what was shown and comes back to the
    prompt; Ctrl-C at the prompt leaves, with 130 right after such a stop (a second Ctrl-C),
    else as Ctrl-D does. A second Ctrl-C while a stop is recorded leaves with 130 too.
    """
    session.interactive = True
    print_header(session)
    while True:
        try:
            line = read_line()
        except KeyboardInterrupt:
            return INTERRUPTED if session.stopped else 0
        text = "/exit" if line is None else line.strip()
        if text in EXIT_COMMANDS:
            return 0
        if not text:
            continue
        try:
            if text != RETRY_COMMAND:
                session.ask(text)
            elif session.retry() is None:
                say(session.console, "no failed run to retry", "yellow")
        except KeyboardInterrupt:
            session.interrupted()
            return INTERRUPTED
        except AgentLedgerError as exc:  # a busy conversation, a lost lease: say so, go on
            say(session.console, f"error: {exc}", "red")


def print_header(session: Session) -> None:
    setup, cid, console = session.setup, session.conversation_id, session.console
    if session.is_new:
        say(console, f"new conversation {cid}", "bold")
    else:
        count = len(session.ledger.messages(cid))
        say(console, f"continuing conversation {cid} ({count} messages)", "bold")
    say(
        console,
        f"{setup.provider} · {setup.model} · {counted(len(session.agent.tools), 'tool')} · "
        f"{RETRY_COMMAND} continues a failed run · /exit, /quit or Ctrl-D leaves",
        "dim",
    )
    say(console, f"continue it later with: {setup.continue_command('chat', cid)}", "dim")
    if session.failed_run_id is not None:
        say(console, f"its last run failed: {RETRY_COMMAND} continues it", "yellow")


def read_prompt(prompt: str = "you> ") -> str | None:
    """A line from standard input (with line editing on a terminal); None at its end. Ctrl-C
    raises ``KeyboardInterrupt``, on a line of its own."""
    if sys.stdin.isatty():
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (input() gains line editing and history)
    try:
        return input(prompt)
    except EOFError:
        print()
        return None
    except KeyboardInterrupt:
        print()
        raise


# -- what is printed -----------------------------------------------------------------------------


def print_result(console: Console, result: RunResult, model: str, *, retry: str = "") -> None:
    """After the answer was streamed: the error of a failed run and ``retry`` (how to continue
    it), or why there is no answer; then the status line."""
    if result.status is AgentStatus.FAILED:
        say(console, f"error: {result.error}", "red")
        say(
            console,
            f"run {result.run_id} failed and is kept in the ledger with its steps and your "
            f"message (`agentledger trace {result.run_id}` shows it)",
            "yellow",
        )
        if retry:
            say(console, retry, "yellow")
    elif result.error is not None:  # an answer cut off by the model's failure: kept, said
        say(console, f"error: {result.error}", "red")
    elif result.answer is None:
        say(console, f"(no answer: the run stopped: {result.stop_reason})", "yellow")
    say(console, status_line(result, model), "dim")


def status_line(result: RunResult, model: str) -> str:
    """``run ID · N steps · IN in / OUT out tokens · $COST``, with cache reads when any."""
    spend, usage = result.spend, result.spend.usage
    parts = [f"run {result.run_id}"]
    if result.status is not AgentStatus.COMPLETED:
        parts.append(status_text(result.status, result.stop_reason))
    parts.append(counted(spend.steps, "step"))
    parts.append(f"{usage.input_tokens} in / {usage.output_tokens} out tokens")
    if usage.cache_read_tokens:
        parts.append(f"{usage.cache_read_tokens} cache read")
    parts.append(spend_text(result, model))
    return " · ".join(parts)


def spend_text(result: RunResult, model: str) -> str:
    """What the run cost (``$0.0012``), and when some step's model has no price, that the
    cost is unknown or partial and how to give a price: ``unpriced (no price for local-model;
    pass --prices FILE)``."""
    spend = result.spend
    shown = cost_text(spend.cost_usd, fully_priced=spend.fully_priced)
    if spend.fully_priced:
        return shown
    unpriced = {
        e.step.model or model
        for e in result.state.step_executions
        if e.step.called_model and e.step.cost_usd is None
    }
    return f"{shown} (no price for {', '.join(sorted(unpriced)) or model}; pass --prices FILE)"
