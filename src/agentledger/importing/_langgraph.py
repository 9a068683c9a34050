"""A LangGraph ``SqliteSaver`` file (``langgraph-checkpoint-sqlite``): tables ``checkpoints``
and ``writes``, each checkpoint serialized whole by LangGraph's serializer.

Each thread is a conversation; its latest checkpoint of the root namespace holds every message
the thread's graph kept, and each human input in it begins a turn. The checkpoint is decoded,
and each turn recorded, by the LangGraph integration (the ``langgraph`` extra), through the
mapping ``LedgerSaver`` records a live thread with: the input and the final AI answer the
conversation, each AI message of a model call a step with its ``usage_metadata``, each
``ToolMessage`` a tool execution. Subgraphs' namespaces, interrupts and pending writes are
not imported. A checkpoint keeps one time, when it was saved: a thread's turns are at its
latest checkpoint's time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, ImportSourceError
from ._history import SourceConversation, SourceTurn, utc
from ._sources import columns, has_tables

if TYPE_CHECKING:
    from sqlite_utils import Database

    from ..integrations.langgraph import ImportedCheckpoint, ImportedTurn

_TABLES = {
    "checkpoints": {"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint"},
    "writes": {"thread_id", "checkpoint_id", "task_id"},
}
_READ = {"thread_id", "checkpoint_ns", "checkpoint_id", "type", "checkpoint"}
"""The columns the importer reads (``type``, the serializer's, is not in the oldest files)."""


class LangGraphCheckpoints:
    """LangGraph's ``SqliteSaver`` files."""

    kind = "langgraph"
    called = "a LangGraph SqliteSaver file"
    records_usage = True

    def recognises(self, db: Database) -> bool:
        return has_tables(db, _TABLES)

    def check_version(self, db: Database, path: Path) -> None:
        missing = _READ - columns(db, "checkpoints")
        if missing:
            raise ImportSourceError(
                f"{path} is {self.called} of an older langgraph-checkpoint-sqlite (its "
                f"checkpoints table has no {', '.join(sorted(missing))}, which LangGraph's "
                "serializer needs to decode a checkpoint): copy its threads into a file "
                "today's SqliteSaver writes, and import that file"
            )

    def count(self, db: Database) -> int:
        query = "select count(distinct thread_id) as n from checkpoints where checkpoint_ns = ''"
        return int(next(db.query(query))["n"])

    def conversations(self, db: Database) -> Iterator[SourceConversation]:
        decode = _decoder()
        for row in db.query(_LATEST):
            thread_id = str(row["thread_id"])
            checkpoint = decode(str(row["type"]), bytes(row["checkpoint"]))
            at = utc(checkpoint.ts)
            turns = tuple(_turn(thread_id, turn, at) for turn in checkpoint.turns)
            yield SourceConversation(key=thread_id, turns=turns, title=thread_id)


_LATEST = """
select thread_id, type, checkpoint from checkpoints as c
where checkpoint_ns = '' and checkpoint_id = (
    select max(checkpoint_id) from checkpoints
    where thread_id = c.thread_id and checkpoint_ns = ''
)
order by thread_id
"""
"""Each thread's latest checkpoint of the root namespace (checkpoint ids sort by time)."""


def _decoder() -> Callable[[str, bytes], ImportedCheckpoint]:
    """The integration's decoder of a checkpoint: LangGraph is loaded only now, and a missing
    LangGraph is an error naming the extra that brings it."""
    try:
        from ..integrations.langgraph import imported_checkpoint
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{LangGraphCheckpoints.called} is read with LangGraph's own serializer. {exc}"
        ) from None
    return imported_checkpoint


def _turn(thread_id: str, turn: ImportedTurn, at: datetime) -> SourceTurn:
    return SourceTurn(key=f"{thread_id}:{turn.key}", user=turn.user, at=at, calls=(), recorder=turn)
