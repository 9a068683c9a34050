"""Test code run as a user who is not root, for the read-only ledger tests.

Root may write any file whatever its mode, so a test that makes a ledger read-only with
``chmod`` proves nothing when the suite runs as root (as it does in containers). Here a worker
process forked from a warm forkserver gives up root for ``nobody`` (when it is root; as any
other user it stays who it is, and the file modes hold already) and runs the plays below,
module-level functions the parent submits; their results and their exceptions come back
pickled.

The worker imports what the plays use before it gives up root: the interpreter's own files
may lie where ``nobody`` cannot read them (a Python installed in root's home), and a module
imported later would fail to load.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from support import forked

if TYPE_CHECKING:
    from agentledger.ledger import Ledger

UNPRIVILEGED_USER = "nobody"


def _give_up_root() -> None:
    """In the worker: load what the plays need, then become ``nobody`` (if root)."""
    _warm_up()
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(UNPRIVILEGED_USER)
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    os.environ["HOME"] = "/"  # root's home is not ours any more


def _warm_up() -> None:
    """Play every play once, as root, on a ledger of the worker's own: whatever they import
    on first use (the libraries' own lazy imports too) is loaded before root is given up."""
    from agentledger.ledger import Ledger
    from agentledger.llm import OpenAIChat
    from support.migration_harness import record_representative_runs

    with tempfile.TemporaryDirectory(prefix="agentledger-warm-up-") as folder:
        path = str(Path(folder) / "ledger.db")
        with Ledger.open(path) as ledger:
            ids = record_representative_runs(ledger)
        with Ledger.open(path, read_only=True) as ledger:
            ledger.verify()
        read_everything(path, ids)
        for args in _warm_up_commands(ids):
            command(path, *args)
        analyze(path, str(Path(folder) / "export"))
    with OpenAIChat("local", base_url="http://127.0.0.1:9"):  # what `agentledger run` makes
        pass


def _warm_up_commands(ids: dict[str, str]) -> list[list[str]]:
    return [
        ["conversations"],
        ["runs"],
        ["show", ids["trip"]],
        ["trace", ids["trip_run"]],
        ["search", "marmalade"],
        ["db", "verify"],
        ["db", "current"],
        ["analytics", "report"],
        ["--read-only", "db", "upgrade"],
        ["--read-only", "recover"],
    ]


def unreachable() -> list[str]:
    """The directories ``nobody`` could not pass through to reach this checkout or its virtual
    environment (a clone under a ``mktemp -d`` folder, mode 0700): the worker would fail on its
    first lazy load there (migration scripts, DuckDB's extensions). Empty when every one may be
    entered by others. (The interpreter's own files need not be reachable: the worker loaded
    them before it gave root up.)"""
    if os.geteuid() != 0:
        return []
    tops = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve()}
    blocked = {
        str(folder)
        for top in tops
        for folder in (top, *top.parents)
        if not folder.stat().st_mode & stat.S_IXOTH
    }
    return sorted(blocked)


@contextlib.contextmanager
def unprivileged_worker() -> Iterator[ProcessPoolExecutor]:
    """A worker process that runs submitted plays as a user who is not root."""
    with ProcessPoolExecutor(1, mp_context=forked.context(), initializer=_give_up_root) as worker:
        yield worker


def user_id() -> tuple[int, int]:
    """Who the worker is: (uid, euid)."""
    return os.getuid(), os.geteuid()


# --- plays: what a user who may only read does with a ledger --------------------------------


def append_to(path: str) -> None:
    """Open ``path`` for appending (creating it if need be): what file modes forbid."""
    with open(path, "ab"):
        pass


def read_everything(path: str, ids: dict[str, str]) -> dict[str, Any]:
    """Open the ledger as a program would (``Ledger.open(path)``) and read it every way."""
    from agentledger.ledger import Ledger

    with Ledger.open(path) as ledger:
        return {"read_only": ledger.read_only, **read_everything_with(ledger, ids)}


def read_everything_with(ledger: Ledger, ids: dict[str, str]) -> dict[str, Any]:
    """Every read of the public API over the representative runs (``ids``)."""
    from support.migration_harness import SEARCH_WORD

    tree = ledger.run_tree(ids["trip_run"])
    return {
        "conversations": len(ledger.conversations()),
        "runs": len(ledger.runs()),
        "messages": [m.content for m in ledger.messages(ids["trip"])],
        "history": len(ledger.history(ids["compacted"])),
        "model_context": [m.role.value for m in ledger.model_context(ids["compacted"])],
        "tree_tokens": tree.inclusive.usage.total_tokens,
        "steps": len(ledger.steps(ids["trip_run"])),
        "trace": len(ledger.trace_messages(ids["trip_run"])),
        "buffer": len(ledger.buffer(ids["stale_run"])),
        "search": len(ledger.search(SEARCH_WORD)),
        "stale": [r.id for r in ledger.stale_runs(stale_after=0)],
        "compactions": len(ledger.compactions(ids["compacted"])),
        "verify": ledger.verify(),
        "row_counts": ledger.row_counts(),
    }


def count_runs_in_plain_sql(path: str) -> int:
    """The runs, counted by Python's own sqlite3 through ``read_only_uri``."""
    import sqlite3

    from agentledger.ledger import read_only_uri

    with contextlib.closing(sqlite3.connect(read_only_uri(Path(path)), uri=True)) as connection:
        return int(connection.execute("SELECT count(*) FROM agent_runs").fetchone()[0])


def conversation_titles(path: str) -> dict[str, Any]:
    from agentledger.ledger import Ledger

    with Ledger.open(path) as ledger:
        titles = {c.id: c.title for c in ledger.conversations()}
        return {"read_only": ledger.read_only, "titles": titles}


def command(path: str, *args: str) -> tuple[int, str]:
    """``agentledger --db PATH ARGS...``: its exit code and its output."""
    from click.testing import CliRunner

    from agentledger.cli import cli

    result = CliRunner().invoke(cli, ["--db", path, *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a bug, not a refusal: the test shows it whole
    return result.exit_code, result.output


def record_a_run(path: str) -> str:
    """Open the ledger and run an agent on it: what the run returned (it raises)."""
    from agentledger import AgentBuilder
    from agentledger.ledger import Ledger
    from agentledger.llm import InferenceResponse, ScriptedLLM

    with Ledger.open(path) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Noted.")]))
            .with_ledger(ledger)
            .build()
        )
        return agent.run("Remember this.").run_id


def recover(path: str) -> list[str]:
    from agentledger.ledger import Ledger

    with Ledger.open(path) as ledger:
        return [r.id for r in ledger.recover(stale_after=0)]


def upgrade(path: str) -> str | None:
    from agentledger.ledger import migrate

    return migrate.upgrade(path)


def create(path: str) -> None:
    """Open a ledger that does not exist yet (which would create it)."""
    from agentledger.ledger import Ledger

    Ledger.open(path).close()


def analyze(path: str, export_to: str) -> dict[str, Any]:
    """Analytics over the ledger, and its Parquet export."""
    from agentledger.analytics import Analytics

    with Analytics.open(path) as analytics:
        rollup = analytics.run_rollup().fetchall()
        tools = analytics.tool_stats().fetchall()
        exported = analytics.export_parquet(export_to)
    return {
        "runs": len(rollup),
        "tools": sorted(row[0] for row in tools),
        "exported": sorted({Path(p).relative_to(export_to).parts[0] for p in exported}),
    }
