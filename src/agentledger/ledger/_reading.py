"""The read methods :class:`~agentledger.ledger.Ledger` and
:class:`~agentledger.ledger.LedgerReader` share, written once: each reads in a transaction of
its own (the class's ``_reads``) through the statements of :mod:`._queries` and turns the rows
into what the class returns (its ``_conversation_of``, ``_run_of`` and ``_node_of``): the
SQLModel rows for ``Ledger``, records for ``LedgerReader``."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar, overload

from .._values import AgentStatus, Message, Messages, Spend, StepExecution, ToolExecution
from ._arguments import row_limit
from ._changes import ChangedSince, changes
from ._columns import ConversationKind
from ._lookup import IdKind, shortest_prefixes
from ._overviews import ConversationOverview, OverviewFilter, overview_rows
from ._queries import (
    ConversationTurn,
    as_seen,
    buffer_rows,
    conversation_row,
    conversation_rows,
    conversation_steps,
    counted_steps,
    in_section,
    load_steps,
    message_rows,
    messages_in,
    metadata_condition,
    run_row,
    run_rows,
    speaking,
    turns_of,
)
from ._row_mapping import Row
from ._run_nodes import NOTHING, tree_of, tree_rows
from ._scope import Scope
from ._search import SearchHit, TraceHit, search_hits
from ._sql import Reads
from ._turn_windows import TurnWindow, runs_condition, steps_of_runs, turn_window
from .checksums import check_row

C = TypeVar("C")
R = TypeVar("R")
N = TypeVar("N")
T = TypeVar("T")


class LedgerReads(Generic[C, R, N]):
    """Reads of a ledger, in the scope of the handle (see the module). ``C``: a conversation
    as the class returns it, ``R``: a run, ``N``: a node of a run tree."""

    @property
    def scope(self) -> Scope:
        raise NotImplementedError

    def _reads(self, what: str, read: Callable[[Reads], T]) -> T:
        """``read`` in a read transaction of its own, failures said as the ledger's errors."""
        raise NotImplementedError

    def _conversation_of(self, row: Row) -> C:
        raise NotImplementedError

    def _run_of(self, row: Row) -> R:
        raise NotImplementedError

    def _node_of(self, row: Row, exclusive: Spend, children: tuple[N, ...]) -> N:
        raise NotImplementedError

    # --- conversations --------------------------------------------------------------------------

    def conversation(self, conversation_id: str) -> C:
        """The conversation ``conversation_id``: its id, or a prefix of it (at least
        ``SHORT_ID_LENGTH`` characters) that begins no other conversation's id. Every method
        that takes a conversation's id takes such a prefix too; the record holds the full id.

        Raises :class:`NotFoundError` when none matches, :class:`AmbiguousIdError` (listing
        them) when the prefix begins several."""
        return self._reads(
            f"reading conversation {conversation_id}",
            lambda reads: self._conversation_of(
                conversation_row(reads, conversation_id, self.scope)
            ),
        )

    def _conversation_row(self, given: str) -> Row:
        """The row of the conversation ``given`` stands for, checked."""
        return self._checked(
            f"reading conversation {given}", "conversations", conversation_row, given
        )

    def _checked(
        self, what: str, table: str, find: Callable[[Reads, str, Scope], Row], given: str
    ) -> Row:
        """The row of ``table`` that ``find`` finds for ``given`` in this scope, checked
        against its checksum."""

        def read(reads: Reads) -> Row:
            row = find(reads, given, self.scope)
            check_row(table, row)
            return row

        return self._reads(what, read)

    def conversations(
        self,
        *,
        kind: ConversationKind | str | None = None,
        limit: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[C]:
        """Conversations, most recently updated first; with ``metadata``, those whose metadata
        has each of its top-level keys with that value (a string, a number, a boolean, or
        ``None`` for JSON null)."""

        def read(reads: Reads) -> list[C]:
            condition = metadata_condition(reads.dialect, metadata) if metadata else ("", {})
            rows = conversation_rows(reads, self.scope, kind=kind, limit=limit, condition=condition)
            return [self._conversation_of(row) for row in rows]

        return self._reads("listing conversations", read)

    def conversation_overviews(
        self,
        *,
        kind: ConversationKind | str | None = ConversationKind.MAIN,
        agent_name: str | None = None,
        status: AgentStatus | str | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int = 50,
    ) -> list[ConversationOverview]:
        """A page of conversations as a listing shows them, most recently updated first (as
        :meth:`conversations` lists them): each with its title or first user message, its
        turns, its last run's agent and status, when it was last active and what its run
        trees cost (:class:`ConversationOverview`). Of ``kind`` (the main ones unless told;
        ``None``: every kind); with ``agent_name``, those that agent ran in; with ``status``,
        those whose last run has it. ``after`` is the ``(updated_at, id)`` of the last
        conversation of the page before: the page that follows it, found by the index
        however far down the listing it is."""
        after = None if after is None else (_utc(after[0]), after[1])
        wanted = OverviewFilter(kind=kind, agent_name=agent_name, status=status, after=after)
        return self._reads(
            "listing conversations",
            lambda reads: overview_rows(reads, self.scope, wanted, limit),
        )

    def messages(self, conversation_id: str, section: str = "messages") -> Messages:
        """A section of a conversation as committed: by default the conversation itself (the
        messages a summary replaced are in the ``buffer`` section, the summaries in
        ``summary``; see :meth:`history` and :meth:`model_context`)."""
        return self._conversation(
            conversation_id, lambda rows: messages_in(rows, in_section(section))
        )

    def history(self, conversation_id: str) -> Messages:
        """The conversation as the user saw it: every message of it in order, those a summary
        replaced included (and the summaries left out). No compaction changes it."""
        return self._conversation(conversation_id, lambda rows: messages_in(rows, as_seen))

    def latest_turns(
        self, conversation_id: str, *, last: int = 100, before_seq: int | None = None
    ) -> TurnWindow:
        """The last ``last`` turns of the conversation as the user saw it (as :meth:`turns`
        gives them), or with ``before_seq`` the last ``last`` before that message: read
        without the rest of the conversation, however long it is. Each window begins where
        its user spoke; its ``first_seq`` is where the turns before it end."""
        row_limit(last)
        conversation_id = self._conversation_row(conversation_id)["id"]
        return self._reads(
            f"reading the turns of conversation {conversation_id}",
            lambda reads: turn_window(reads, conversation_id, last, before_seq),
        )

    def turns(self, conversation_id: str) -> list[ConversationTurn]:
        """The conversation as the user saw it (:meth:`history`), turn by turn: the messages
        of each run with the run's id (to read its trace: :meth:`steps`)."""
        return self._conversation(conversation_id, turns_of)

    def _conversation(self, given: str, view: Callable[[Sequence[Row]], T]) -> T:
        """``view`` of every row of the conversation ``given``, all sections, in order."""
        conversation_id = self._conversation_row(given)["id"]
        return self._reads(
            f"reading the messages of conversation {conversation_id}",
            lambda reads: view(message_rows(reads, conversation_id)),
        )

    # --- runs -----------------------------------------------------------------------------------

    def run(self, run_id: str) -> R:
        """The run ``run_id``: its id, or a prefix of it (at least ``SHORT_ID_LENGTH``
        characters) that begins no other run's id. Every method that takes a run's id takes
        such a prefix too; the record holds the full id.

        Raises :class:`NotFoundError` when none matches, :class:`AmbiguousIdError` (listing
        them) when the prefix begins several."""
        return self._reads(
            f"reading run {run_id}", lambda reads: self._run_of(run_row(reads, run_id, self.scope))
        )

    def _run_row(self, given: str) -> Row:
        """The row of the run ``given`` stands for, checked."""
        return self._checked(f"reading run {given}", "agent_runs", run_row, given)

    def runs(
        self,
        conversation_id: str | None = None,
        *,
        status: AgentStatus | str | None = None,
        limit: int | None = None,
        since: datetime | None = None,
    ) -> list[R]:
        """Runs, oldest first within a conversation, newest first across the ledger; with
        ``since``, only those started at or after it (a naive datetime is UTC)."""
        if conversation_id is not None:
            conversation_id = self._conversation_row(conversation_id)["id"]
        since = None if since is None else _utc(since)
        return self._reads(
            "listing runs",
            lambda reads: [
                self._run_of(row)
                for row in run_rows(
                    reads,
                    self.scope,
                    conversation_id=conversation_id,
                    status=status,
                    limit=limit,
                    since=since,
                )
            ],
        )

    def speaking_runs(
        self,
        conversation_id: str,
        *,
        status: AgentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[R]:
        """The conversation's runs that say something in it, oldest first (as :meth:`runs`
        lists them), of ``status`` if given: those that hold a message of it, those that
        recorded no step (what they did is in their metadata), and those whose metadata has
        each of ``metadata``'s top-level keys with its value. The runs that only recorded
        steps are left out: a view of the conversation built from its runs reads these."""
        conversation_id = self._conversation_row(conversation_id)["id"]

        def read(reads: Reads) -> list[R]:
            condition = speaking(reads.dialect, conversation_id, metadata)
            rows = run_rows(
                reads,
                self.scope,
                conversation_id=conversation_id,
                status=status,
                condition=condition,
            )
            return [self._run_of(row) for row in rows]

        return self._reads("listing runs", read)

    def run_tree(self, run_id: str) -> N:
        """The run ``run_id`` and every subagent run below it, with exclusive and inclusive
        usage. Give a root run's id for the whole tree (``AgentRun.root_run_id``)."""
        top = self._run_row(run_id)

        def read(reads: Reads) -> N:
            rows, spends = tree_rows(reads, top["root_run_id"])
            return tree_of(
                rows,
                top["id"],
                top["root_run_id"],
                lambda row, kids: self._node_of(row, spends.get(row["id"], NOTHING), kids),
            )

        return self._reads(f"reading the run tree of {top['id']}", read)

    def steps(self, run_id: str) -> tuple[StepExecution, ...]:
        """The run's steps, rebuilt with their tool executions and outcomes."""
        run = self._run_row(run_id)
        steps = self._reads(
            f"reading the steps of run {run['id']}", lambda reads: load_steps(reads, run["id"])
        )
        counted_steps(steps, run["id"], run["step_count"])
        return steps

    def runs_with_steps(
        self, conversation_id: str, *, run_ids: Collection[str] | None = None
    ) -> list[tuple[R, tuple[StepExecution, ...]]]:
        """Every run of the conversation, oldest first (as :meth:`runs` lists them), each with
        its steps (as :meth:`steps` gives them), read together: three statements however many
        runs it has, where a run's :meth:`steps` each take a read of their own. With
        ``run_ids``, only those of its runs (the runs of a :meth:`latest_turns` window), read
        without the others."""
        conversation_id = self._conversation_row(conversation_id)["id"]
        wanted = None if run_ids is None else sorted(run_ids)

        def read(reads: Reads) -> list[tuple[R, tuple[StepExecution, ...]]]:
            if wanted is None:
                rows = run_rows(reads, self.scope, conversation_id=conversation_id)
                steps = conversation_steps(reads, conversation_id)
            else:
                only = runs_condition(wanted)
                rows = run_rows(reads, self.scope, conversation_id=conversation_id, condition=only)
                steps = steps_of_runs(reads, wanted)
            found = []
            for row in rows:
                run, own = self._run_of(row), steps.get(row["id"], ())
                counted_steps(own, row["id"], row["step_count"])
                found.append((run, own))
            return found

        return self._reads(f"reading the runs and steps of conversation {conversation_id}", read)

    def tool_executions(self, run_id: str) -> tuple[ToolExecution, ...]:
        """The run's tool executions, in the order of its steps and of each step's calls."""
        return tuple(t for e in self.steps(run_id) for t in e.step.tool_executions)

    def trace_messages(self, run_id: str) -> Messages:
        """The run's trace (tool-calling assistant messages and tool results, in order), rebuilt
        exactly from its step and tool rows, whether or not its buffer was flushed."""
        trace: tuple[Message, ...] = ()
        for execution in self.steps(run_id):
            trace += execution.step.trace_messages.root
        return Messages(trace)

    def buffer(self, run_id: str) -> Messages:
        """The run's execution buffer rows: empty once the run committed."""
        run_id = self._run_row(run_id)["id"]
        return self._reads(
            f"reading the execution buffer of run {run_id}",
            lambda reads: messages_in(buffer_rows(reads, run_id), lambda _: True),
        )

    # --- search ---------------------------------------------------------------------------------

    @overload
    def search(
        self,
        query: str,
        *,
        conversation_id: str | None = None,
        limit: int = 20,
        trace: Literal[False] = False,
    ) -> list[SearchHit]: ...

    @overload
    def search(
        self, query: str, *, conversation_id: str | None = None, limit: int = 20, trace: bool
    ) -> list[SearchHit | TraceHit]: ...

    def search(
        self,
        query: str,
        *,
        conversation_id: str | None = None,
        limit: int = 20,
        trace: bool = False,
    ) -> list[SearchHit] | list[SearchHit | TraceHit]:
        """Conversation messages matching every word of ``query``, best matches first; with
        ``conversation_id``, in that conversation only (:class:`NotFoundError` when there is no
        such conversation). With ``trace``, then the tool executions whose arguments and
        result hold every word (:class:`TraceHit`), best first: up to ``limit`` of each.

        Only the words count, each whole or, followed by ``*``, as a prefix (``Lis*``): quotes,
        operators and SQL in ``query`` separate words, and a query of no word finds nothing. A
        query of more than ``MAX_SEARCH_WORDS`` (1,000) different words is a
        :class:`UsageError`. On PostgreSQL the words are looked for in the first 100,000
        characters of each message (and of each tool execution's arguments and result)."""
        row_limit(limit)
        if conversation_id is not None:
            conversation_id = self._conversation_row(conversation_id)["id"]
        return self._reads(
            f"searching for {query!r}",
            lambda reads: search_hits(
                reads, query, conversation_id, limit, self.scope, trace=trace
            ),
        )

    def short_ids(self, ids: Iterable[str], *, of: IdKind) -> dict[str, str]:
        """Each of ``ids`` (of runs or of conversations, as ``of`` says) by its shortest
        prefix, of at least ``SHORT_ID_LENGTH`` characters, that begins no other id of its kind
        in the ledger (in a scoped handle, in its scope): what a person can type for it (the
        command line's listings show these)."""
        wanted = list(ids)
        return self._reads(
            f"shortening {len(wanted)} {of} ids",
            lambda reads: shortest_prefixes(reads, of, wanted, self.scope),
        )

    # --- changes --------------------------------------------------------------------------------

    def changes_since(self, stamp: int | None = None) -> ChangedSince:
        """The conversations and runs written since ``stamp`` (the ``stamp`` of an earlier
        answer; ``None``: nothing yet, only the stamp to start from), in this handle's scope,
        found by the rows' change stamps: a conversation when its row or one of its messages
        was written, a run when its row (its status, its partial answer), a step or a tool
        execution of it was. A viewer asks with each answer's ``stamp`` in turn: no change is
        missed, and one may be said twice."""
        return self._reads("reading what changed", lambda reads: changes(reads, self.scope, stamp))


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
