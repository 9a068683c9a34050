"""One process per system: a worker holds one system (its database open, its history built)
and runs, on command, one of its methods, answering with what the method returns.

Workers are forked from a fork server (a fresh interpreter that imported the benchmark's side
once); given the ``source`` of a version of agentledger, a worker is a fresh interpreter of its
own (``python -P -c``) whose ``PYTHONPATH`` puts that version first, so that two versions can
be measured in one run. Either way it talks to the parent over a pipe. The parent sends one
command and waits for its answer before it sends the next (:meth:`Worker.call`,
:func:`interleaved_calls`), so only one system works while it is timed; :func:`broadcast` sends
a command to every worker first and then collects the answers, for untimed work that may run in
parallel (building histories).
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
from typing import Any, Protocol

from ._common import Samples, interleaved

_STOP = "_stop"
_WHERE = "_where"
"""The command every worker answers: the file its ``agentledger`` was imported from."""
BENCH_ROOT = Path(__file__).resolve().parent.parent
"""The directory that holds ``bench/``: a worker started from a version's source needs it on its
path too."""
PRELOAD = ["bench._turns"]
"""What the fork server imports for every worker: our side of the benchmark (the peers import
theirs in their own workers)."""


class WorkerError(RuntimeError):
    """A command failed inside a worker; the message holds the worker's traceback."""


class Worker:
    """The parent's handle on one worker process, running ``factory(**kwargs)``.

    ``factory`` must be importable by name (a module-level class or function), since the
    worker is a fresh interpreter.
    """

    def __init__(
        self,
        name: str,
        factory: Callable[..., Any],
        *,
        source: Path | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self._process: _Process
        if source is None:
            self._conn, self._process = _forked(name, factory, kwargs)
        else:
            self._conn, self._process = _started(source, factory, kwargs)
        self._pending = 0

    @property
    def connection(self) -> Connection:
        return self._conn

    def send(self, command: str, *args: Any) -> None:
        self._conn.send((command, args))
        self._pending += 1

    def receive(self) -> Any:
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):  # its end of the pipe closed
            raise WorkerError(
                f"the worker for {self.name} died (exit code {self._exit()})"
            ) from None
        self._pending -= 1
        if status == "error":
            raise WorkerError(f"{self.name}: {value}")
        return value

    def call(self, command: str, *args: Any) -> Any:
        self.send(command, *args)
        return self.receive()

    def agentledger_file(self) -> str:
        """Where the worker's ``agentledger`` comes from (its ``__init__.py``)."""
        return str(self.call(_WHERE))

    def close(self) -> None:
        """Stop the worker: told to (its system closed first) when it is idle, killed when it
        is still working on a command (the parent gave up on it)."""
        if self._process.is_alive() and not self._pending:
            try:
                self._conn.send((_STOP, ()))
                self._process.join(timeout=30)
            except OSError:
                pass
        if self._process.is_alive():
            self._process.kill()
            self._process.join(None)
        self._conn.close()

    def _exit(self) -> int | None:
        self._process.join(timeout=5)
        return self._process.exitcode


class _Process(Protocol):
    """What :class:`Worker` needs of its process, forked or started."""

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None) -> None: ...

    def kill(self) -> None: ...


def _forked(
    name: str, factory: Callable[..., Any], kwargs: dict[str, Any]
) -> tuple[Connection, _Process]:
    context = _context()
    conn, child = context.Pipe()
    process = context.Process(
        target=_serve, args=(child, factory, kwargs), name=f"bench {name}", daemon=True
    )
    process.start()
    child.close()
    return conn, process


BOOT = "import sys; from bench._workers import serve_fd; serve_fd(int(sys.argv[1]), sys.argv[2])"
"""What a worker started from a version's source runs (``python -P -c BOOT fd source``)."""


def _started(
    source: Path, factory: Callable[..., Any], kwargs: dict[str, Any]
) -> tuple[Connection, _Process]:
    """A fresh interpreter with ``source`` (a directory holding an ``agentledger`` package)
    first on its path, then this ``bench/``; ``-P``, so that the working directory cannot put
    another agentledger in front. It is sent the factory by name, and checks that the
    agentledger it imported is ``source``'s before it builds its system."""
    conn, child = multiprocessing.Pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(BENCH_ROOT)])}
    argv = [sys.executable, "-P", "-c", BOOT, str(child.fileno()), str(source)]
    process = subprocess.Popen(argv, env=env, pass_fds=[child.fileno()], cwd=BENCH_ROOT)
    child.close()
    conn.send((factory.__module__, factory.__qualname__, kwargs))
    return conn, _Started(process)


class _Started:
    """A started interpreter (:class:`subprocess.Popen`) as a :class:`_Process`."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def join(self, timeout: float | None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)

    def kill(self) -> None:
        self.process.kill()


def serve_fd(fd: int, source: str) -> None:
    """The loop of a worker started from ``source``: its system built by the factory the parent
    names, once this interpreter's agentledger is known to be ``source``'s."""
    conn = Connection(fd)
    module, qualname, kwargs = conn.recv()

    def factory(**arguments: Any) -> Any:
        import agentledger

        where = Path(agentledger.__file__ or "").resolve()
        if not where.is_relative_to(Path(source).resolve()):
            raise RuntimeError(f"agentledger was imported from {where}, not from {source}")
        return getattr(importlib.import_module(module), qualname)(**arguments)

    _serve(conn, factory, kwargs)


def _context() -> Any:
    """``forkserver``: each worker a fresh process forked from a server that imported the
    modules every worker needs (agentledger, SQLAlchemy, pydantic) once, which saves each
    worker a second of imports; ``spawn`` where there is no ``fork``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def broadcast(workers: Mapping[str, Worker], command: str, *args: Any) -> dict[str, Any]:
    """``command`` sent to every worker at once; their answers, by name."""
    for worker in workers.values():
        worker.send(command, *args)
    return gather(workers)


def gather(
    workers: Mapping[str, Worker],
    arrived: Callable[[str, Any], None] | None = None,
    *,
    failed: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The answers of ``workers``, each sent one command, taken as they arrive (``arrived``
    is told of each). A command that failed raises :class:`WorkerError` once all have
    answered, unless ``failed`` is given: then its error goes there, by the worker's name."""
    waiting = {worker.connection: name for name, worker in workers.items()}
    answers: dict[str, Any] = {}
    errors: dict[str, str] = {}
    while waiting:
        for conn in wait(list(waiting)):
            name = waiting.pop(conn)  # type: ignore[call-overload]
            try:
                answers[name] = workers[name].receive()
            except WorkerError as exc:
                errors[name] = str(exc)
                continue
            if arrived is not None:
                arrived(name, answers[name])
    if errors and failed is None:
        raise WorkerError("\n".join(errors.values()))
    if failed is not None:
        failed.update(errors)
    return answers


def interleaved_calls(workers: Mapping[str, Worker], command: str, reps: int) -> Samples:
    """``command`` (which returns seconds) on each worker once per repetition, one worker at a
    time, the order rotating (:func:`bench._common.interleaved`)."""
    systems = {name: _caller(worker, command) for name, worker in workers.items()}
    return interleaved(systems, reps)


def _caller(worker: Worker, command: str) -> Callable[[], float]:
    return lambda: float(worker.call(command))


def _serve(conn: Connection, factory: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """The worker's loop: build the system, then answer commands until told to stop."""
    setup_error = None
    try:
        system = factory(**kwargs)
    except BaseException:
        setup_error = f"setting the system up failed: {traceback.format_exc()}"
        system = None
    while True:
        try:
            command, args = conn.recv()
        except EOFError:  # the parent is gone
            break
        if command == _STOP:
            break
        if command == _WHERE:
            conn.send(("ok", sys.modules["agentledger"].__file__))
            continue
        if system is None:
            _answer_error(conn, setup_error)
            continue
        try:
            conn.send(("ok", getattr(system, command)(*args)))
        except BaseException:
            _answer_error(conn)
    if system is not None and hasattr(system, "close"):
        system.close()


def _answer_error(conn: Connection, text: str | None = None) -> None:
    conn.send(("error", text or traceback.format_exc()))
