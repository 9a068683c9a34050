"""Child processes forked from a warm forkserver, for the crash and concurrency tests.

A child started with ``python`` pays for a fresh interpreter and for importing agentledger,
SQLAlchemy and psycopg: most of a second each, and the crash tests start dozens of them. The
forkserver imports those once (:data:`PRELOAD`); each child is forked from it in milliseconds,
gets this process's ``sys.path`` and working directory (so it imports ``support`` from anywhere),
and then plays its role: ``play(spec)``, a module-level function of a ``support`` module.

A child's output (stdout and stderr) goes to ``NAME.output`` in the work directory and comes
back as :attr:`Finished.stderr`; a role writes its result file itself (``NAME.result.json``).
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Play = Callable[[dict[str, Any]], Any]

CHILD_TIMEOUT = 90.0
"""Seconds a child may take: a hang fails the test instead of blocking CI."""

PRELOAD = [
    "agentledger",
    "agentledger.ledger",
    "agentledger.llm",
    "alembic.command",
    "psycopg",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.sqlite.pysqlite",
]
if importlib.util.find_spec("langgraph") is not None:  # not in `make test-oldest`'s environment
    # LangGraph's graphs and the ledger's saver: seconds to import, for the LangGraph kills.
    PRELOAD += ["langgraph.graph", "agentledger.integrations.langgraph"]
"""What the forkserver imports once, so that its children start warm. (Not the ``support``
modules: the forkserver does not get the tests' directory on its path, only its children do;
they import the role's module, which is light once these are loaded.)"""


@dataclass(frozen=True)
class Finished:
    """A child that ended: how, what it printed, and the result file it wrote (if any)."""

    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def describe(self) -> str:
        return f"exit status {self.returncode}\n--- stderr ---\n{self.stderr[-4000:]}"


_FORKSERVER: list[Any] = []


def context() -> Any:
    """The forkserver context of this process, its preload set on first use. (A process has
    one forkserver: whoever starts it first decides what it preloads, so every user of it in
    the suite takes it from here.)"""
    if not _FORKSERVER:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _FORKSERVER.append(context)
    return _FORKSERVER[0]


def _child(play: Play, spec: dict[str, Any], output: str) -> None:
    """In the forked child: its output to a file, then the role."""
    with open(output, "ab", buffering=0) as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    play(spec)


def _start(play: Play, spec: dict[str, Any], workdir: Path, name: str) -> Any:
    spec = {**spec, "name": name, "result_file": str(workdir / f"{name}.result.json")}
    output = workdir / f"{name}.output"
    process = context().Process(target=_child, args=(play, spec, str(output)), name=name)
    process.start()
    return process


def _finish(process: Any, workdir: Path, name: str, deadline: float) -> Finished:
    process.join(max(deadline - time.monotonic(), 0.1))
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError(f"child {name} hung (killed after {CHILD_TIMEOUT}s)")
    result_file = workdir / f"{name}.result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    output = workdir / f"{name}.output"
    text = output.read_text(errors="replace") if output.exists() else ""
    return Finished(process.exitcode, "", text, result)


def run(play: Play, spec: dict[str, Any], workdir: Path, name: str) -> Finished:
    """Run ``play(spec)`` in a forked child, to its end (or its kill)."""
    process = _start(play, spec, workdir, name)
    return _finish(process, workdir, name, time.monotonic() + CHILD_TIMEOUT)


def run_together(
    play: Play, specs: dict[str, dict[str, Any]], workdir: Path
) -> dict[str, Finished]:
    """Fork a child per spec, let each get ready (connections, its ledger), then release them
    all at the same instant through the go file (``crash_child.barrier``); wait for all."""
    go = workdir / "go"
    processes = {}
    for name, spec in specs.items():
        ready = {"ready_file": str(workdir / f"{name}.ready"), "go_file": str(go)}
        processes[name] = _start(play, {**spec, **ready}, workdir, name)
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while not all((workdir / f"{name}.ready").exists() for name in specs):
            if time.monotonic() > deadline or not all(p.is_alive() for p in processes.values()):
                break
            time.sleep(0.002)
        go.touch()
        return {name: _finish(p, workdir, name, deadline) for name, p in processes.items()}
    finally:
        for process in processes.values():
            if process.is_alive():
                process.kill()
                process.join()
