"""One process per system: a worker holds one system (its database open, its history built)
and runs, on command, one of its methods, answering with what the method returns.

A worker of this version is forked from a server that imported the benchmark once; a worker of
another version (``bench/previous.py``) is a fresh interpreter (``python -P -c``) whose
``PYTHONPATH`` puts that version's ``agentledger`` first, then this ``bench/``, and checks that
it imported that version before it builds its system. Either talks to the parent over a pipe.
The parent sends one command and waits for its answer before it sends the next
(:meth:`Worker.call`, :meth:`Worker.caller`), so only one system works while it is timed;
:func:`broadcast` sends a command to every worker first and then collects the answers, for
untimed work that may run in parallel (building histories).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

BENCH_ROOT = Path(__file__).resolve().parent.parent
"""The directory that holds ``bench/``."""
BOOT = "import sys; from bench._workers import serve; serve(int(sys.argv[1]), sys.argv[2])"
PRELOAD = ["bench.recording", "bench.writers", "agentledger.ledger.migrate"]
PRELOAD += ["langgraph.graph", "agentledger.integrations.langgraph"]
"""What the fork server imports once for every worker of this version (the migrations' too,
which a new ledger runs; LangGraph's graphs and the ledger's saver, seconds to import, for
section 17's workers: skipped, as any preload that fails, where LangGraph is not installed)."""
STOP = "_stop"
"""The command every worker answers: its system closed, it stops."""


class WorkerError(RuntimeError):
    """A command failed inside a worker; the message holds the worker's traceback."""


class Worker:
    """The parent's handle on one worker process, running ``factory(**kwargs)``: forked from a
    server that imported this version and the benchmark once (which saves each worker a second
    of imports), or, given the ``source`` of another version, a fresh interpreter. ``factory``
    must be importable by name (a module-level class)."""

    def __init__(
        self, name: str, factory: Callable[..., Any], *, source: Path | None = None, **kwargs: Any
    ) -> None:
        self.name, self._pending = name, 0
        self.connection, child = multiprocessing.Pipe()
        if source is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            self._process: Any = context.Process(target=_serve, args=(child, factory, kwargs))
            self._process.start()
        else:
            path = os.pathsep.join([str(source), str(BENCH_ROOT)])
            argv = [sys.executable, "-P", "-c", BOOT, str(child.fileno()), str(source)]
            env = {**os.environ, "PYTHONPATH": path}
            self._process = _Interpreter(argv, env=env, pass_fds=[child.fileno()], cwd=BENCH_ROOT)
            self.connection.send((factory.__module__, factory.__qualname__, kwargs))
        child.close()

    def send(self, command: str, *args: Any) -> None:
        self.connection.send((command, args))
        self._pending += 1

    def receive(self) -> Any:
        try:
            status, value = self.connection.recv()
        except (EOFError, OSError):  # its end of the pipe closed
            self._process.join(5)
            code = self._process.exitcode
            raise WorkerError(f"the worker for {self.name} died (exit code {code})") from None
        self._pending -= 1
        if status == "error":
            raise WorkerError(f"{self.name}: {value}")
        return value

    def call(self, command: str, *args: Any) -> Any:
        self.send(command, *args)
        return self.receive()

    def caller(self, command: str, *args: Any) -> Callable[[], float]:
        """A timed system of :func:`bench._common.interleaved`: ``command``, which answers
        with seconds."""
        return lambda: float(self.call(command, *args))

    def close(self) -> None:
        """Stop the worker: told to (its system closed first) when it is idle, killed when it
        is still working on a command (the parent gave up on it)."""
        if self._process.is_alive() and not self._pending:
            with contextlib.suppress(OSError):
                self.connection.send((STOP, ()))
                self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(None)
        self.connection.close()


class _Interpreter(subprocess.Popen[bytes]):
    """A fresh interpreter, with the methods of ``multiprocessing.Process`` a worker uses."""

    exitcode = property(subprocess.Popen.poll)

    def is_alive(self) -> bool:
        return self.poll() is None

    def join(self, timeout: float | None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(timeout)


def serve(fd: int, source: str) -> None:
    """The loop of a worker started from ``source``: its system built by the factory the
    parent names, once this interpreter's agentledger is known to be ``source``'s."""
    conn = Connection(fd)
    module, qualname, kwargs = conn.recv()

    def factory(**arguments: Any) -> Any:
        import agentledger

        where = Path(agentledger.__file__ or "").resolve()
        if not where.is_relative_to(Path(source).resolve()):
            raise RuntimeError(f"agentledger was imported from {where}, not from {source}")
        return getattr(importlib.import_module(module), qualname)(**arguments)

    _serve(conn, factory, kwargs)


def _serve(conn: Connection, factory: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """A worker's loop: build the system, then answer commands until told to stop."""
    system, setup_error = None, ""
    try:
        system = factory(**kwargs)
    except BaseException:
        setup_error = f"setting the system up failed: {traceback.format_exc()}"
    while True:
        try:
            command, args = conn.recv()
        except EOFError:  # the parent is gone
            break
        if command == STOP:
            break
        if system is None:
            conn.send(("error", setup_error))
        else:
            try:
                conn.send(("ok", getattr(system, command)(*args)))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
    if system is not None and hasattr(system, "close"):
        system.close()


def broadcast(workers: Mapping[str, Worker], command: str, *args: Any) -> dict[str, Any]:
    """``command`` sent to every worker at once; their answers, by name."""
    for worker in workers.values():
        worker.send(command, *args)
    return gather(workers)


def gather(workers: Mapping[str, Worker]) -> dict[str, Any]:
    """The answers of ``workers``, each sent one command, taken as they arrive; a command that
    failed raises :class:`WorkerError` once all have answered."""
    waiting = {worker.connection: name for name, worker in workers.items()}
    answers: dict[str, Any] = {}
    errors: list[str] = []
    while waiting:
        for conn in wait(list(waiting)):
            name = waiting.pop(conn)  # type: ignore[call-overload]
            try:
                answers[name] = workers[name].receive()
            except WorkerError as exc:
                errors.append(str(exc))
    if errors:
        raise WorkerError("\n".join(errors))
    return answers
