"""The kinds of file ``agentledger import`` reads, and how a file's kind is recognised: from its
schema, read with sqlite-utils' introspection, never from its name.

Each kind is a :class:`Source` in :data:`SOURCES`. A new kind is one more entry: a class with
its ``kind`` (what ``--kind`` takes), what it is called, how it recognises a file and checks
its version, and how it reads the file's conversations.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigurationError, ImportSourceError
from ._history import SourceConversation

if TYPE_CHECKING:
    from sqlite_utils import Database


class Source(Protocol):
    """A kind of file the importer reads."""

    kind: str
    """Its name for ``--kind``: ``agents-sdk``, ``llm``, ``langgraph``."""
    called: str
    """What it is, in words: "an OpenAI Agents SDK SQLiteSession file"."""
    records_usage: bool
    """Whether its files say what each model call spent (else the imported steps are
    unpriced)."""

    def recognises(self, db: Database) -> bool:
        """Whether ``db`` is a file of this kind, at any version."""
        ...

    def check_version(self, db: Database, path: Path) -> None:
        """Raise :class:`ImportSourceError` when ``db`` is of a version this importer cannot
        read, naming what it found."""
        ...

    def count(self, db: Database) -> int:
        """How many conversations the file holds (for progress)."""
        ...

    def conversations(self, db: Database) -> Iterator[SourceConversation]:
        """The file's conversations, each with its turns in order."""
        ...


def open_source(path: Path) -> Database:
    """The file at ``path``, opened read-only with sqlite-utils: nothing is ever written to
    it, and a file that is not a SQLite database is a clear error."""
    try:
        from sqlite_utils import Database
    except ImportError:
        raise ConfigurationError(
            "sqlite-utils is not installed: agentledger import comes with the import extra. "
            "Install it: pip install 'agentledger[import]'"
        ) from None

    if not path.is_file():
        raise ImportSourceError(f"no file to import at {path}: give the path of a SQLite file")
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    db = Database(connection)
    try:
        db.table_names()
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise ImportSourceError(
            f"{path} is not a SQLite database ({exc}): give the file an Agents SDK "
            "SQLiteSession, llm or LangGraph's SqliteSaver wrote"
        ) from None
    return db


def columns(db: Database, table: str) -> set[str]:
    """The columns of ``table`` (none when there is no such table)."""
    return set(db[table].columns_dict) if db[table].exists() else set()


def has_tables(db: Database, wanted: dict[str, set[str]]) -> bool:
    """Whether ``db`` has each table of ``wanted`` with at least its columns."""
    return all(needed <= columns(db, table) for table, needed in wanted.items())


def source_for(db: Database, path: Path, kind: str | None, sources: tuple[Source, ...]) -> Source:
    """The source that reads ``db``: the one of ``kind`` when given (refused, naming what the
    file is, when it is another), else the one that recognises it; its version checked."""
    found = next((s for s in sources if s.recognises(db)), None)
    if kind is not None:
        asked = _of_kind(kind, sources)
        if found is not asked:
            what = found.called if found is not None else _tables_in(db)
            raise ImportSourceError(
                f"{path} is not {asked.called}: it is {what}. Give the --kind of the file, or "
                "leave --kind out to recognise it"
            )
    if found is None:
        known = "; ".join(f"{s.called} (--kind {s.kind})" for s in sources)
        raise ImportSourceError(
            f"{path} is not a file agentledger imports: it is {_tables_in(db)}. It imports {known}"
        )
    found.check_version(db, path)
    return found


def _of_kind(kind: str, sources: tuple[Source, ...]) -> Source:
    for source in sources:
        if source.kind == kind:
            return source
    kinds = ", ".join(s.kind for s in sources)
    raise ImportSourceError(f"no kind of file is called {kind!r}: the kinds are {kinds}")


def _tables_in(db: Database) -> str:
    names = sorted(n for n in db.table_names() if not n.startswith("sqlite_"))
    return f"a SQLite file with the tables {', '.join(names)}" if names else "an empty SQLite file"
