"""How a checkpoint's channel values are kept in ``graph_channel_values``.

A channel whose value is a list of LangChain messages (whatever its name) refers to the ledger
rows holding them (``message_ids``): the user message and the answer of a run in the
conversation, each AI message of a model call a step, each ``ToolMessage`` a tool execution
(:mod:`._runs` records them as the graph makes them). A message that is no row (yet) is kept,
in order, in the serialized value beside the ids. Every other channel is kept as LangGraph's
serializer wrote it. A message replaced (``add_messages``' same id) or removed
(``RemoveMessage``) keeps its row, for the history: the list of ids says what the channel
holds at each version.

LangGraph saves a subgraph's checkpoints from threads of its own, so one may come before the
thread's checkpoint it runs under (its metadata's ``parents``) has been saved: its messages are
then serialized whole, and recorded once that checkpoint's are (the run they belong to is open
only from then).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...errors import LedgerCorruptError
from ...ledger import (
    ChannelValue,
    CheckpointKey,
    CheckpointQuery,
    Ledger,
    MessageRow,
    StoredCheckpoint,
)
from ._rows import RESIDUE_KEY, rebuilt, residue
from ._runs import GraphRuns

KNOWN_THREADS = 256
"""How many threads' (and namespaces') rows a saver keeps in memory, the most recently used:
another one's are read from its latest checkpoint when it is saved again."""

PARKED_PER_THREAD = 64
"""How many early subgraph checkpoints of a thread wait for the thread's checkpoint they run
under (beyond, the oldest are recorded as they are)."""

Known = dict[str | None, list[tuple[BaseMessage, str]]]
"""The messages of a thread's namespace that are rows, by LangChain id: each with its row."""


class MessageChannels:
    """Encodes the channel values a checkpoint brings, and decodes them back."""

    def __init__(self, ledger: Ledger, serde: SerializerProtocol) -> None:
        self._ledger = ledger
        self._serde = serde
        self.runs = GraphRuns(ledger)
        self._known: OrderedDict[tuple[str, str], Known] = OrderedDict()
        self._read: OrderedDict[str, dict[str, MessageRow]] = OrderedDict()
        """The message rows of each recently used thread, by id, read or written by this
        saver (a row does not change): read once."""
        self._last: dict[str, str] = {}
        """The newest checkpoint of each thread whose messages were recorded."""
        self._ending: dict[str, tuple[str, str, Any]] = {}
        """A special write (an interrupt, an error) of each thread whose checkpoint is not
        recorded yet (LangGraph saves writes and checkpoints from threads of its own, in any
        order): checkpoint id, channel, value."""
        self._early: OrderedDict[str, list[_Early]] = OrderedDict()
        """The subgraph checkpoints of each thread saved before the thread's checkpoint they
        run under, in the order they came: recorded once it is."""

    def encoded(
        self,
        key: CheckpointKey,
        parent_id: str | None,
        values: Mapping[str, Any],
        metadata: CheckpointMetadata,
    ) -> dict[str, ChannelValue]:
        """The values to store for the channel versions a checkpoint brings: the messages'
        rows recorded first (in the open run of the thread)."""
        with self.runs.lock:
            if metadata.get("source") == "input" and not key.checkpoint_ns:
                self.runs.end(key.thread_id)
            graph_run = metadata.get("run_id")
            above = _above(metadata) if key.checkpoint_ns else None
            if above is not None and self._last.get(key.thread_id, "") < above:
                return self._too_early(key, parent_id, values, graph_run, above)
            encoded = {}
            for channel, value in values.items():
                if is_messages(value):
                    known = self._known_of(key, parent_id)
                    graph_run_id = graph_run if isinstance(graph_run, str) else None
                    encoded[channel] = self._rows_of(key, value, known, graph_run_id)
                else:
                    encoded[channel] = ChannelValue(*self._serde.dumps_typed(value))
            if not key.checkpoint_ns:
                self._recorded(key)
            return encoded

    def rows_read(self, thread_id: str) -> dict[str, MessageRow]:
        """The message rows of thread ``thread_id`` read before (a row does not change)."""
        with self.runs.lock:
            rows = self._read.get(thread_id)
            if rows is None:
                rows = self._read[thread_id] = {}
                if len(self._read) > KNOWN_THREADS:
                    self._read.popitem(last=False)
            self._read.move_to_end(thread_id)
            return rows

    def decoded(self, stored: StoredCheckpoint) -> dict[str, Any]:
        """The channel values of ``stored``, its messages rebuilt from their rows (those read
        before kept by :meth:`rows_read`)."""
        with self.runs.lock:
            rows = self.rows_read(stored.key.thread_id)
            rows.update(stored.messages)
        values = {}
        for channel, value in stored.values.items():
            if value.message_ids is None and value.value_type is None:
                continue
            values[channel] = self._value_of(stored, value, rows)
            if value.message_ids is not None:
                self._held(stored.key, value.message_ids, values[channel])
        return values

    def _held(self, key: CheckpointKey, ids: Sequence[str | None], messages: list[Any]) -> None:
        """The messages just read back from rows ``ids`` are those the graph will save
        next: known by themselves, so that saving them compares no fields."""
        with self.runs.lock:
            known = self._known.get((key.thread_id, key.checkpoint_ns))
            if known is None:
                return
            for row_id, message in zip(ids, messages, strict=True):
                pairs = known.get(message.id, []) if row_id is not None else []
                for n, (_, held_row) in enumerate(pairs):
                    if held_row == row_id:
                        pairs[n] = (message, held_row)
                        break

    def copied(self, thread_id: str) -> dict[tuple[str, str, str], ChannelValue]:
        """The values a copy of thread ``thread_id`` stores instead of the source's: each
        channel of messages serialized whole (a copy refers to no row of the source)."""
        copies = {}
        for stored in self._ledger.graph_checkpoints.find(CheckpointQuery(thread_id=thread_id)):
            for channel, value in stored.values.items():
                if value.message_ids is not None:
                    version = stored.channel_versions[channel]
                    whole = self._value_of(stored, value, stored.messages)
                    copies[(stored.key.checkpoint_ns, channel, version)] = ChannelValue(
                        *self._serde.dumps_typed(whole)
                    )
        return copies

    def forget(self, thread_id: str) -> None:
        """Drop what is known of thread ``thread_id``'s rows (its checkpoints were deleted)."""
        with self.runs.lock:
            for key in [k for k in self._known if k[0] == thread_id]:
                del self._known[key]
            self._read.pop(thread_id, None)
            self._early.pop(thread_id, None)

    def discard(self, thread_id: str, error: str) -> None:
        """A write of thread ``thread_id`` failed with ``error``, rolled back whole: drop its
        open run and what is known of its rows (some may have been rolled back with it)."""
        with self.runs.lock:
            self.runs.discard(thread_id, error)
            self.forget(thread_id)
            self._last.pop(thread_id, None)
            self._ending.pop(thread_id, None)

    def end_run(self, key: CheckpointKey, channel: str, value: Any) -> None:
        """A task of the checkpoint ``key`` wrote ``value`` to a special channel: an
        interrupt or an error ends the thread's open run, once that checkpoint's messages are
        recorded."""
        if key.checkpoint_ns or channel not in ("__interrupt__", "__error__"):
            return
        with self.runs.lock:
            if self._last.get(key.thread_id, "") >= key.checkpoint_id:
                self._end(key.thread_id, channel, value)
            else:
                self._ending[key.thread_id] = (key.checkpoint_id, channel, value)

    def _too_early(
        self,
        key: CheckpointKey,
        parent_id: str | None,
        values: Mapping[str, Any],
        graph_run: Any,
        above: str,
    ) -> dict[str, ChannelValue]:
        """Subgraph checkpoint ``key`` came before the thread's checkpoint ``above`` it runs
        under: its values serialized whole, its messages kept to be recorded after those of
        ``above``."""
        messages = {ch: list(v) for ch, v in values.items() if is_messages(v)}
        graph_run_id = graph_run if isinstance(graph_run, str) else None
        early = self._early.setdefault(key.thread_id, [])
        self._early.move_to_end(key.thread_id)
        early.append(_Early(key, parent_id, messages, graph_run_id, above))
        if len(early) > PARKED_PER_THREAD:
            self._record_early(key.thread_id, [early.pop(0)])
        if len(self._early) > KNOWN_THREADS:
            thread_id, oldest = self._early.popitem(last=False)
            self._record_early(thread_id, oldest)
        return {ch: ChannelValue(*self._serde.dumps_typed(v)) for ch, v in values.items()}

    def _record_early(self, thread_id: str, early: Sequence[_Early]) -> None:
        """Record the messages of subgraph checkpoints that came early, in their order."""
        for each in early:
            known = self._known_of(each.key, each.parent_id)
            for messages in each.messages.values():
                self._rows_of(each.key, messages, known, each.graph_run_id)

    def _recorded(self, key: CheckpointKey) -> None:
        """The messages of checkpoint ``key`` are recorded: record those of the subgraph
        checkpoints that came before it, then end the run a write of it ended."""
        thread_id = key.thread_id
        self._last[thread_id] = max(self._last.get(thread_id, ""), key.checkpoint_id)
        waiting = self._early.get(thread_id, [])
        due = [e for e in waiting if e.above <= key.checkpoint_id]
        if due:
            waiting[:] = [e for e in waiting if e.above > key.checkpoint_id]
            if not waiting:
                del self._early[thread_id]
            self._record_early(thread_id, due)
        ending = self._ending.get(thread_id)
        if ending is not None and ending[0] <= key.checkpoint_id:
            del self._ending[thread_id]
            self._end(thread_id, ending[1], ending[2])

    def _end(self, thread_id: str, channel: str, value: Any) -> None:
        if channel == "__interrupt__":
            self.runs.end(thread_id, interrupted=True)
        else:
            self.runs.end(thread_id, error=f"{type(value).__name__}: {value}")

    # --- inside -------------------------------------------------------------------------------

    def _rows_of(
        self,
        key: CheckpointKey,
        messages: Sequence[BaseMessage],
        known: Known,
        graph_run_id: str | None,
    ) -> ChannelValue:
        thread_id, ns = key.thread_id, key.checkpoint_ns
        others = [k for (t, n), k in self._known.items() if t == thread_id and n != ns]
        task: BaseMessage | None = None  # the last row before a message: a subgraph's task
        ids: list[str | None] = []
        for message in messages:
            ids.append(_row_of(known, message))
            if ids[-1] is not None:
                task = message
                continue
            below = next((r for k in others if (r := _row_of(k, message)) is not None), None)
            if below is not None:
                task = message
                made = self.runs.answer_from_below(thread_id, message) if not ns else []
                for held, row_id in made or [(message, below)]:
                    known.setdefault(held.id, []).append((held, row_id))
                continue
            asked = "" if task is None else task.text
            recorded = self.runs.record(thread_id, message, graph_run_id, ns=ns, task=asked)
            self._wrote(thread_id, recorded)
            for made_message, row_id in recorded:
                known.setdefault(made_message.id, []).append((made_message, row_id))
            task = None
        # What was recorded after a message can make it a row (a tool result, its call's).
        ids = [found or _row_of(known, m) for found, m in zip(ids, messages, strict=True)]
        serialized = [m for found, m in zip(ids, messages, strict=True) if found is None]
        if not serialized:
            return ChannelValue(message_ids=tuple(ids))
        return ChannelValue(*self._serde.dumps_typed(serialized), message_ids=tuple(ids))

    def _wrote(self, thread_id: str, recorded: Sequence[tuple[BaseMessage, str]]) -> None:
        """Keep the rows just written for ``recorded`` as :meth:`rows_read` would read them
        back (their text, and the fields of the message as :func:`residue` keeps them), so
        that reading the checkpoint that refers to them does not select them again."""
        if not recorded:
            return
        rows = self.rows_read(thread_id)
        for message, row_id in recorded:
            kept = residue(message)
            if kept is not None and isinstance(message.content, str):
                rows[row_id] = MessageRow(message.content, {RESIDUE_KEY: kept})

    def _known_of(self, key: CheckpointKey, parent_id: str | None) -> Known:
        """What is known of the rows of ``key``'s thread and namespace: read from the parent
        checkpoint the first time."""
        place = (key.thread_id, key.checkpoint_ns)
        known = self._known.get(place)
        if known is not None:
            self._known.move_to_end(place)
        else:
            known = self._known[place] = {}
            if len(self._known) > KNOWN_THREADS:
                self._known.popitem(last=False)
            parent = (
                self._ledger.graph_checkpoints.get(key.thread_id, key.checkpoint_ns, parent_id)
                if parent_id is not None
                else None
            )
            for value in parent.values.values() if parent is not None else ():
                for message, row_id in self._pairs(parent, value):  # type: ignore[arg-type]
                    known.setdefault(message.id, []).append((message, row_id))
        return known

    def _pairs(self, stored: StoredCheckpoint, value: ChannelValue) -> list[tuple[Any, str]]:
        if value.message_ids is None:
            return []
        rows = stored.messages
        return [
            (_message(stored, i, rows), i) for i in value.message_ids if i is not None and i in rows
        ]

    def _value_of(
        self, stored: StoredCheckpoint, value: ChannelValue, rows: Mapping[str, MessageRow]
    ) -> Any:
        if value.message_ids is None:
            return self._serde.loads_typed((value.value_type or "", value.value or b""))
        tail = iter(
            self._serde.loads_typed((value.value_type, value.value))
            if value.value_type is not None and value.value is not None
            else ()
        )
        return [next(tail) if i is None else _message(stored, i, rows) for i in value.message_ids]


@dataclass(frozen=True)
class _Early:
    """A subgraph checkpoint saved before the thread's checkpoint ``above`` it runs under."""

    key: CheckpointKey
    parent_id: str | None
    messages: dict[str, list[BaseMessage]]
    graph_run_id: str | None
    above: str


def _above(metadata: CheckpointMetadata) -> str | None:
    """The id of the thread's checkpoint a subgraph's checkpoint (``metadata``) runs under."""
    parents = metadata.get("parents")
    above = parents.get("") if isinstance(parents, dict) else None
    return above if isinstance(above, str) else None


def _message(stored: StoredCheckpoint, row_id: str, rows: Mapping[str, MessageRow]) -> BaseMessage:
    row = rows.get(row_id)
    fields = row.metadata.get(RESIDUE_KEY) if row is not None else None
    if row is None or not isinstance(fields, dict):
        key = stored.key
        raise LedgerCorruptError(
            f"checkpoint {key.checkpoint_id} of thread {key.thread_id!r} refers to message "
            f"row {row_id}, which is not in the ledger (or is no LangChain message): run "
            "`agentledger verify`; a thread whose rows were forgotten is gone with them"
        )
    return rebuilt(row.content, fields)


def _row_of(known: Known, message: BaseMessage) -> str | None:
    for held, row_id in known.get(message.id, ()):
        if held is message or held == message:
            return row_id
    return None


def is_messages(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(m, BaseMessage) for m in value)
    )
