"""What each page shows, read through the ledger's public reads and handed to its template: the
conversations (a page of overviews, or the hits of a search), a conversation turn by turn with
the run that answered each, and a run with its trace and its tree.

Nothing here writes HTML: the templates do, escaping every value (:mod:`._text`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from .._values import AgentStatus, Message, Role, Spend, StepExecution, ToolExecution
from ..errors import UsageError
from ..ledger import (
    AgentRun,
    ConversationOverview,
    Ledger,
    RunTree,
    SearchHit,
    TraceHit,
    search_snippet,
)

PAGE_SIZE = 50
"""Conversations per page of the listing."""

TURNS_SHOWN = 100
"""Turns a conversation's page shows at once, from its end; a link leads to the ones before."""

SEARCH_LIMIT = 50
"""Hits of each kind (messages, tool calls) a search shows."""

SNIPPET_LENGTH = 160
"""How much of a hit's text a search shows, around the word found."""

STATUSES = tuple(status.value for status in AgentStatus)
_SAID = (Role.USER, Role.SYSTEM)


@dataclass(frozen=True)
class Filters:
    """The listing's filters, as its address gives them (empty: not filtered)."""

    query: str = ""
    agent: str = ""
    status: str = ""
    tenant: str = ""
    owner: str = ""
    after: str = ""

    def narrowed(self, ledger: Ledger) -> Ledger:
        """``ledger`` kept to the tenant and owner asked for (a scoped viewer refuses another
        than its own: :class:`UsageError`)."""
        if not (self.tenant or self.owner):
            return ledger
        return ledger.scoped(self.tenant or None, self.owner or None)

    def cursor(self) -> tuple[datetime, str] | None:
        """The ``(updated_at, id)`` the page continues after (``after=TIME~ID``)."""
        if not self.after:
            return None
        moment, _, conversation_id = self.after.partition("~")
        try:
            if not conversation_id:
                raise ValueError(self.after)
            return datetime.fromisoformat(moment), conversation_id
        except ValueError:
            raise UsageError(
                f"after={self.after!r} is not where a page ends: follow the listing's own "
                "link to the next page"
            ) from None

    def next_page(self, after: str) -> str:
        """The address of the page that continues after ``after``, with the same filters."""
        kept = {**asdict(self), "after": after}
        return "/?" + urlencode({name: value for name, value in kept.items() if value})

    def live_address(self) -> str:
        """The address of this listing's first page as a live page fetches it again."""
        kept = {name: value for name, value in asdict(self).items() if value}
        return "/live/?" + urlencode(kept) if kept else "/live/"

    def status_value(self) -> str | None:
        if self.status and self.status not in STATUSES:
            raise UsageError(f"status={self.status!r}: choose one of {', '.join(STATUSES)}")
        return self.status or None


def cursor_of(overview: ConversationOverview) -> str:
    """Where the page after ``overview`` begins, as its address says it."""
    return f"{overview.updated_at.isoformat()}~{overview.id}"


# --- the conversations ---------------------------------------------------------------------------


def listing(ledger: Ledger, filters: Filters, page_size: int = PAGE_SIZE) -> dict[str, Any]:
    """The conversations page: a search's hits when there is a query, else a page of
    ``page_size`` overviews, with the short ids they are shown by."""
    handle = filters.narrowed(ledger)
    if filters.query:
        return search_results(handle, filters.query)
    found = handle.conversation_overviews(
        agent_name=filters.agent or None,
        status=filters.status_value(),
        after=filters.cursor(),
        limit=page_size + 1,
    )
    shown, more = found[:page_size], len(found) > page_size
    return {
        "live": None if filters.after else filters.live_address(),
        "overviews": shown,
        "next": filters.next_page(cursor_of(shown[-1])) if more else None,
        "short": _short(handle, (o.id for o in shown), (o.last_run_id for o in shown)),
    }


@dataclass(frozen=True)
class Hit:
    """A search hit as the listing shows it."""

    conversation_id: str
    run_id: str | None
    where: str
    snippet: str
    step_index: int | None = None


def search_results(handle: Ledger, query: str) -> dict[str, Any]:
    found = handle.search(query, limit=SEARCH_LIMIT, trace=True)
    hits = [_hit(hit, query) for hit in found]
    return {
        "hits": hits,
        "short": _short(handle, (h.conversation_id for h in hits), (h.run_id for h in hits)),
    }


def _hit(hit: SearchHit | TraceHit, query: str) -> Hit:
    if isinstance(hit, SearchHit):
        where = f"{hit.message.role} (message {hit.seq})"
        snippet = search_snippet(hit.message.content, query, SNIPPET_LENGTH)
        return Hit(hit.conversation_id, hit.run_id, where, snippet)
    tool = hit.tool_execution
    said = f"{tool.tool_call.name}({tool.tool_call.arguments}) → {tool.result}"
    return Hit(
        hit.conversation_id,
        hit.run_id,
        f"trace: {tool.tool_call.name} (step {hit.step_index})",
        search_snippet(said, query, SNIPPET_LENGTH),
        hit.step_index,
    )


def _short(
    handle: Ledger, conversations: Iterable[str], runs: Iterable[str | None]
) -> dict[str, str]:
    """Each id by the short prefix the command line shows it by."""
    short = handle.short_ids(set(conversations), of="conversation")
    return {**short, **handle.short_ids({r for r in runs if r is not None}, of="run")}


# --- a conversation and its runs ------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    """A run as a page shows it: its row, its steps, what it spent (alone and with its
    subagents) and the subagent runs shown inside it, by id."""

    run: Any
    steps: tuple[StepExecution, ...]
    own: Spend
    inclusive: Spend
    children: Mapping[str, RunView] = field(default_factory=dict)

    def all_runs(self) -> Iterator[RunView]:
        yield self
        for child in self.children.values():
            yield from child.all_runs()


@dataclass(frozen=True)
class TurnView:
    """A turn: what was said, the run that answered (``None`` for messages no run wrote), and
    what it answered."""

    said: tuple[Message, ...]
    run: RunView | None
    answered: tuple[Message, ...]

    @property
    def key(self) -> str:
        """What a live page knows the turn by: its run, or its first message."""
        if self.run is not None:
            return str(self.run.run.id)
        return next((m.id for m in self.said + self.answered if m.id), "")


def conversation_page(
    ledger: Ledger, given: str, before: str = "", turns_shown: int = TURNS_SHOWN
) -> dict[str, Any]:
    """The conversation ``given`` (its id or a unique prefix) turn by turn, each answer with
    the run that produced it, subagent runs nested where they were spawned: its last
    ``turns_shown`` turns, or with ``before`` (a message's ``seq``) the last ones before it."""
    conversation = ledger.conversation(given)
    window = ledger.latest_turns(conversation.id, last=turns_shown, before_seq=_seq(before))
    wanted = {turn.run_id for turn in window.turns if turn.run_id is not None}
    runs = ledger.runs_with_steps(conversation.id, run_ids=wanted)
    views = {run.id: _run_view(ledger, run, steps) for run, steps in runs}
    shown = [
        TurnView(
            said=tuple(m for m in turn.messages if m.role in _SAID),
            run=views.get(turn.run_id) if turn.run_id is not None else None,
            answered=tuple(m for m in turn.messages if m.role not in _SAID),
        )
        for turn in window.turns
    ]
    every_run = [view.run.id for run in views.values() for view in run.all_runs()]
    short = ledger.short_ids(every_run, of="run")
    short.update(ledger.short_ids([conversation.id], of="conversation"))
    parent = conversation.parent_run_id
    if parent is not None:
        short.update(ledger.short_ids([parent], of="run"))
    return {
        "conversation": conversation,
        "turns": shown,
        "short": short,
        "earlier": window.first_seq if window.first_seq > 0 else None,
        "latest": bool(before),
    }


def _seq(before: str) -> int | None:
    """The ``before`` of a conversation's address: where the turns shown end."""
    if not before:
        return None
    if not before.isdigit():
        raise UsageError(
            f"before={before!r} is not where turns end: follow the page's own link to earlier turns"
        )
    return int(before)


def _run_view(ledger: Ledger, run: AgentRun, steps: tuple[StepExecution, ...]) -> RunView:
    """A run of the conversation with its subagent runs: its run tree read only when it
    spawned some (most runs spawn none, and a long conversation has many runs)."""
    if not any(t.child_run_id for t in _tools(steps)):
        own = run_spend(run)
        return RunView(run, steps, own, own)
    return _tree_view(ledger, ledger.run_tree(run.id), steps)


def _tools(steps: tuple[StepExecution, ...]) -> Iterator[ToolExecution]:
    for execution in steps:
        yield from execution.step.tool_executions


def _tree_view(ledger: Ledger, node: RunTree, steps: tuple[StepExecution, ...]) -> RunView:
    children = {
        child.run.id: _tree_view(ledger, child, ledger.steps(child.run.id))
        for child in node.children
    }
    return RunView(node.run, steps, node.exclusive, node.inclusive, children)


def run_spend(run: Any) -> Spend:
    """What a run spent by itself, as its row totals it."""
    return Spend(
        usage=run.usage,
        cost_usd=run.cost_usd,
        steps=run.step_count,
        fully_priced=run.fully_priced,
    )


# --- a run ---------------------------------------------------------------------------------------


def run_page(ledger: Ledger, given: str) -> dict[str, Any]:
    """The run ``given`` (its id or a unique prefix): its trace, and its tree with what each
    run spent alone and with the runs below it, linked up and down."""
    run = ledger.run(given)
    tree = ledger.run_tree(run.id)
    view = _tree_view(ledger, tree, ledger.steps(run.id))
    related = [n.run.id for n in tree.walk()]
    related += [r for r in (run.parent_run_id, run.root_run_id) if r is not None]
    related += [t.child_run_id for t in _tools(view.steps) if t.child_run_id]
    short = ledger.short_ids(set(related), of="run")
    short.update(ledger.short_ids([run.conversation_id], of="conversation"))
    return {"run": run, "view": view, "tree": tree, "short": short}
