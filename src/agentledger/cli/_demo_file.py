"""The demo's ledger file: where it goes, how a second demo starts it afresh without ever
deleting a file the demo did not write, and the commands that look around it.

The demo marks each conversation it begins (its metadata says who wrote it). A file the demo
may start afresh is a SQLite ledger whose every main conversation bears that mark and whose
every run is one of the demo's agents: an earlier demo's ledger and nothing else. Any other
file, a ledger of the user's, another app's database or not a database at all, is left as it
is, and the demo says so and stops.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import sqlite3
import sys
from pathlib import Path

from ..errors import UsageError
from ..ledger import Ledger

DEMO_FILE = Path("agentledger-demo.db")
"""Where the demo writes its ledger when no --db is given: in the current directory."""
WRITTEN_BY = "agentledger demo"
MARK = {"written_by": WRITTEN_BY}
"""The metadata of every conversation the demo begins."""
DEMO_AGENTS = frozenset(
    {
        "travel-assistant",
        "researcher",
        "reviewer",
        "travel-assistant-cached",
        "travel-assistant-uncached",
    }
)
"""The names of every agent the demo runs."""
_SIDE_FILES = ("-wal", "-shm", "-journal")


def demo_conversation(ledger: Ledger, title: str) -> str:
    """A new conversation titled ``title``, marked as the demo's; its id."""
    return ledger.create_conversation(title=title, metadata=MARK).id


def start_afresh(path: Path) -> str | None:
    """Make room for a new demo at ``path``: nothing to do when no file is there; an earlier
    demo's ledger is removed (what was done, in a sentence); any other file raises
    :class:`UsageError`, and is left untouched."""
    if not path.exists():
        return None
    unlike = _unlike_the_demo(path)
    if unlike is not None:
        raise UsageError(
            f"{path} exists and {unlike}, so the demo leaves it as it is. Give the demo "
            f"another file with --db, or move {path} away."
        )
    for side in _SIDE_FILES:
        Path(f"{path}{side}").unlink(missing_ok=True)
    path.unlink()
    return f"{path} held an earlier demo's ledger: the demo starts it afresh."


def _unlike_the_demo(path: Path) -> str | None:
    """What tells ``path`` from a ledger only the demo wrote, None when nothing does: read
    with SQLite alone, read only, so that a file of another kind is never changed by looking
    at it."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            marks = db.execute(
                "SELECT json_extract(metadata, '$.written_by') FROM conversations "
                "WHERE kind = 'main'"
            ).fetchall()
            agents = {name for (name,) in db.execute("SELECT DISTINCT agent_name FROM agent_runs")}
    except sqlite3.Error:  # not SQLite, or without the ledger's tables
        return "is not a ledger the demo wrote"
    if marks and all(mark == WRITTEN_BY for (mark,) in marks) and agents <= DEMO_AGENTS:
        return None
    return "holds conversations or runs the demo did not write"


def look_around(path: Path, run: str) -> list[str]:
    """The commands that read the demo's ledger at ``path``, short enough for 80 columns
    with the default file; ``run`` is the run whose tree ``trace`` shows."""
    db = shlex.quote(str(path))
    return [
        f"agentledger --db {db} conversations",
        f"agentledger --db {db} runs",
        f"agentledger --db {db} trace {shlex.quote(run)}",
        f"agentledger --db {db} analytics report --html report.html",
        f"sqlite3 {db} 'SELECT role, content FROM conversation_messages'",
    ]


def open_the_viewer(path: Path) -> tuple[str, str]:
    """How to see the demo's ledger in a browser: the last lines the demo prints."""
    return (
        "See it in your browser (the viewer prints the address to open):",
        f"  agentledger ui --db {shlex.quote(str(path))}",
    )


def not_on_the_path() -> str | None:
    """How to put ``agentledger`` on the PATH when it is not there (a virtual environment
    not activated, as under ``make demo``); None when it is."""
    if shutil.which("agentledger"):
        return None
    where = Path(sys.executable).parent
    with contextlib.suppress(ValueError):
        where = where.relative_to(Path.cwd())
    if (where / "activate").exists():
        return f"(agentledger is not on your PATH: run `source {where}/activate` first)"
    return f"(agentledger is not on your PATH: it is in {where})"
