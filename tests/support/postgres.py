"""A throwaway PostgreSQL server for the test suite.

``PostgresServer`` runs ``initdb`` into a fresh temporary directory, starts a server on a free
loopback port (durability switched off: it is thrown away), hands out fresh databases, and removes
everything again on ``stop()``. When the suite runs as root, every PostgreSQL command runs as the
``postgres`` system user, since ``initdb`` and ``postgres`` refuse to run as root.

Nothing here needs the network beyond 127.0.0.1, and nothing is printed unless something fails.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql
    from psycopg.rows import TupleRow

PG_USER = "postgres"
"""The superuser ``initdb`` creates, and the system user the server runs as when we are root."""

TIMEOUT = 60
"""Seconds any single PostgreSQL command (initdb, pg_ctl start/restart/stop) may take."""

SETTINGS: Mapping[str, str] = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
}
"""Server settings on top of initdb's defaults (``port`` and the socket directory are added)."""

_TAIL_LINES = 40

# Run in a separate process holding the read end of a pipe whose write end only we hold: EOF means
# we stopped the server ourselves or died without doing so (SIGKILL, os._exit): stop it, if needed.
_WATCHDOG = """
import json, os, shutil, subprocess, sys
stop, base, pidfile = json.loads(sys.argv[1])
sys.stdin.buffer.read()
if os.path.exists(pidfile):
    try:
        subprocess.run(stop, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=90, check=False)
    except Exception:
        pass
shutil.rmtree(base, ignore_errors=True)
"""


class PostgresHarnessError(RuntimeError):
    """The throwaway server could not be set up, used or torn down."""


def _is_bindir(path: str | os.PathLike[str]) -> bool:
    return all(os.access(Path(path, name), os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))


def _version_key(bindir: str) -> tuple[int, ...]:
    # /usr/lib/postgresql/15/bin -> (15,); /usr/lib/postgresql/9.6/bin -> (9, 6)
    return tuple(int(part) for part in re.findall(r"\d+", Path(bindir).parent.name))


def find_bindir() -> str | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``.

    In order: ``$PG_BINDIR`` (if set, it is the only place looked at), ``pg_config --bindir``,
    the highest ``/usr/lib/postgresql/*/bin`` (Debian and Ubuntu), ``initdb`` on ``PATH``.
    """
    explicit = os.environ.get("PG_BINDIR")
    if explicit:
        return str(Path(explicit).resolve()) if _is_bindir(explicit) else None

    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"],
                capture_output=True,
                text=True,
                timeout=10,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            pass
        else:
            # Debian's /usr/bin/pg_config may report /usr/bin (libpq-dev only): check it.
            candidate = out.stdout.strip()
            if out.returncode == 0 and candidate and _is_bindir(candidate):
                return candidate

    debian = [d for d in Path("/usr/lib/postgresql").glob("*/bin") if _is_bindir(d)]
    if debian:
        return max((str(d) for d in debian), key=_version_key)

    initdb = shutil.which("initdb")
    if initdb is not None:
        # Follow symlinks (/usr/local/bin/initdb -> .../15/bin/initdb) to the real directory.
        real = Path(initdb).resolve().parent
        if _is_bindir(real):
            return str(real)
    return None


def not_found_reason() -> str:
    """Why ``find_bindir()`` came back empty, for a skip or failure message."""
    explicit = os.environ.get("PG_BINDIR")
    if explicit:
        return f"PG_BINDIR={explicit} does not hold initdb, pg_ctl and postgres"
    return (
        "no PostgreSQL server binaries found (looked at PG_BINDIR, `pg_config --bindir`, "
        "/usr/lib/postgresql/*/bin and initdb on PATH); install PostgreSQL "
        "(Debian: apt-get install postgresql) or set PG_BINDIR"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _traversable(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may traverse ``path`` and every directory above it."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for directory in (path, *path.parents):
        st = directory.stat()
        if st.st_uid == user.pw_uid:
            allowed = st.st_mode & 0o100
        elif st.st_gid in groups:
            allowed = st.st_mode & 0o010
        else:
            allowed = st.st_mode & 0o001
        if not allowed:
            return False
    return True


def _conf_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class PostgresServer:
    """A private PostgreSQL server in a temporary directory; ``with PostgresServer() as pg: ...``.

    ``start()`` is idempotent, ``stop()`` too (it is also registered with ``atexit`` while the
    server runs). ``url()`` and ``create_database()`` give ``postgresql://`` URLs for user
    ``postgres`` (trust authentication) on 127.0.0.1.
    """

    def __init__(
        self, bindir: str | None = None, settings: Mapping[str, str] | None = None
    ) -> None:
        found = bindir if bindir is not None else find_bindir()
        if found is None:
            raise PostgresHarnessError(not_found_reason())
        self.bindir = Path(found)
        self.settings: dict[str, str] = {**SETTINGS, **(settings or {})}
        self.base_dir: Path | None = None
        self.port: int | None = None
        self.startup_seconds: float | None = None  # how long the last start() took, initdb included
        self._original_conf = ""
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._as_postgres = os.geteuid() == 0
        self._user: pwd.struct_passwd | None = None

    # -- paths -------------------------------------------------------------------------------

    def _base(self) -> Path:
        if self.base_dir is None:
            raise PostgresHarnessError("the PostgreSQL server is not started")
        return self.base_dir

    @property
    def data_dir(self) -> Path:
        return self._base() / "data"

    @property
    def socket_dir(self) -> Path:
        return self._base() / "sock"

    @property
    def log_file(self) -> Path:
        return self._base() / "postgres.log"

    @property
    def running(self) -> bool:
        return self.base_dir is not None and (self.data_dir / "postmaster.pid").exists()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """initdb into a fresh temporary directory and start the server; wait until it answers."""
        if self.base_dir is not None:
            return self
        began = time.monotonic()
        atexit.register(self.stop)
        try:
            self._make_base_dir()
            self._start_watchdog()
            self._initdb()
            self._start_on_free_port()
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def restart(self) -> None:
        """``pg_ctl restart -m fast``; return once the server accepts connections again."""
        self._pg_ctl("restart", "-m", "fast", "-w", "-t", str(TIMEOUT), "-l", str(self.log_file))
        self._wait_until_ready()

    def stop(self) -> None:
        """Stop the server at once (``-m immediate``) and remove the temporary directory."""
        atexit.unregister(self.stop)
        base = self.base_dir
        if base is None:
            return
        try:
            if self.running:
                try:
                    self._pg_ctl("stop", "-m", "immediate", "-w", "-t", str(TIMEOUT))
                except PostgresHarnessError:
                    if not self._kill_postmaster():
                        raise
        finally:
            shutil.rmtree(base, ignore_errors=True)
            self.base_dir = None
            self.port = None
            self._stop_watchdog()

    # -- databases ---------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        if self.port is None:
            raise PostgresHarnessError("the PostgreSQL server is not started")
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, prefix: str = "agentledger_test") -> str:
        """Create a new, empty, uniquely named database and return its URL."""
        from psycopg import sql

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self._admin([sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))])
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names (if it exists), disconnecting its sessions first."""
        from psycopg import sql

        name = unquote(urlsplit(url).path.lstrip("/"))
        if not name or name in {"postgres", "template0", "template1"}:
            raise PostgresHarnessError(f"refusing to drop database {name!r} (from {url})")
        terminate = sql.SQL(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = {} AND pid <> pg_backend_pid()"
        ).format(sql.Literal(name))
        self._admin([terminate, sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))])

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[TupleRow]:
        """An autocommit psycopg connection; statements time out rather than hang."""
        import psycopg

        return psycopg.connect(
            self.url(dbname),
            autocommit=True,
            connect_timeout=10,
            options="-c statement_timeout=30000 -c lock_timeout=10000",
        )

    def _admin(self, statements: Sequence[sql.Composable]) -> None:
        import psycopg

        current = ""
        try:
            with self.connect() as conn:
                for statement in statements:
                    current = statement.as_string(conn)
                    conn.execute(statement)
        except psycopg.Error as exc:
            raise PostgresHarnessError(
                self._failure(f"SQL {current or '(connect)'} on {self.url()}", str(exc))
            ) from exc

    # -- internals ---------------------------------------------------------------------------

    def _postgres_user(self) -> pwd.struct_passwd:
        if self._user is None:
            try:
                self._user = pwd.getpwnam(PG_USER)
            except KeyError:
                raise PostgresHarnessError(
                    f"running as root, but there is no {PG_USER!r} system user to run PostgreSQL"
                    f" as (initdb refuses to run as root); create one or run the tests as a"
                    f" regular user"
                ) from None
        return self._user

    def _make_base_dir(self) -> None:
        parent = Path(tempfile.gettempdir())
        if self._as_postgres:
            user = self._postgres_user()
            if not _traversable(parent, user):
                parent = Path("/tmp")
                if not _traversable(parent, user):
                    raise PostgresHarnessError(
                        f"the {PG_USER!r} user cannot reach {tempfile.gettempdir()} nor /tmp"
                    )
        base = Path(tempfile.mkdtemp(prefix="agentledger-pg-", dir=parent))  # mode 0o700
        self.base_dir = base
        self.socket_dir.mkdir(mode=0o700)
        if self._as_postgres:
            user = self._postgres_user()
            for path in (base, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)

    def _initdb(self) -> None:
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-A",
                "trust",
                "-U",
                PG_USER,
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ],
            what="initdb",
        )
        self.data_dir.chmod(0o700)
        self._original_conf = (self.data_dir / "postgresql.conf").read_text()

    def _write_conf(self) -> None:
        settings = {
            **self.settings,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
        }
        lines = [f"{key} = {_conf_quote(value)}" for key, value in settings.items()]
        conf = self.data_dir / "postgresql.conf"
        conf.write_text(self._original_conf + "\n# agentledger test harness\n" + "\n".join(lines))

    def _start_on_free_port(self, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            self.port = _free_port()
            self._write_conf()
            log_size = self.log_file.stat().st_size if self.log_file.exists() else 0
            try:
                self._pg_ctl("start", "-w", "-t", str(TIMEOUT), "-l", str(self.log_file))
                return
            except PostgresHarnessError:
                # Someone else may have taken the port between our probe and the server's bind.
                new_log = self._read_log()[log_size:]
                if attempt == attempts or "already in use" not in new_log:
                    raise

    def _start_watchdog(self) -> None:
        """A guard process that stops the server should this process die without ``stop()``."""
        stop = self._command(
            [str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "immediate"]
        )
        arguments = json.dumps([stop, str(self._base()), str(self.data_dir / "postmaster.pid")])
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,  # a Ctrl-C meant for pytest must not reach it
        )

    def _stop_watchdog(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None:
            return
        if watchdog.stdin is not None:
            watchdog.stdin.close()  # EOF: it finds the server gone and exits
        try:
            watchdog.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()

    def _wait_until_ready(self, timeout: float = TIMEOUT) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.connect() as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PostgresHarnessError(
                        self._failure(f"connecting to {self.url()}", str(exc))
                    ) from exc
                time.sleep(0.05)

    def _pg_ctl(self, *args: str) -> None:
        self._run(
            [str(self.bindir / "pg_ctl"), args[0], "-D", str(self.data_dir), *args[1:]],
            what=f"pg_ctl {args[0]}",
        )

    def _command(self, argv: list[str]) -> list[str]:
        """``argv`` as the ``postgres`` user when we are root."""
        if not self._as_postgres:
            return argv
        self._postgres_user()
        runuser = shutil.which("runuser") or next(
            (p for p in ("/usr/sbin/runuser", "/sbin/runuser") if os.access(p, os.X_OK)), None
        )
        if runuser is not None:
            return [runuser, "-u", PG_USER, "--", *argv]
        su = shutil.which("su") or "/bin/su"
        return [su, PG_USER, "-s", "/bin/sh", "-c", shlex.join(argv)]

    def _run(self, argv: list[str], what: str) -> None:
        command = self._command(argv)
        # Our PG* variables (PGDATA, PGPORT, PGHOST, ...) must not leak into the server's tools.
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        try:
            result = subprocess.run(
                command,
                cwd=self._base(),
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=TIMEOUT + 30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            output = _as_text(exc.stdout) + _as_text(exc.stderr)
            raise PostgresHarnessError(
                self._failure(f"{what} timed out: {shlex.join(command)}", output)
            ) from exc
        except OSError as exc:
            raise PostgresHarnessError(
                self._failure(f"{what} could not run: {shlex.join(command)}", str(exc))
            ) from exc
        if result.returncode != 0:
            raise PostgresHarnessError(
                self._failure(
                    f"{what} failed (exit status {result.returncode}): {shlex.join(command)}",
                    result.stdout + result.stderr,
                )
            )

    def _read_log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except (OSError, PostgresHarnessError):
            return ""

    def _failure(self, headline: str, output: str) -> str:
        parts = [headline]
        if output.strip():
            parts += ["--- output ---", _tail(output)]
        log = self._read_log()
        location = self.log_file if self.base_dir is not None else "(no log)"
        parts += [f"--- server log {location} (tail) ---", _tail(log) if log.strip() else "(empty)"]
        return "\n".join(parts)

    def _kill_postmaster(self) -> bool:
        """Last resort when ``pg_ctl stop`` fails: SIGQUIT, then SIGKILL, our postmaster by pid."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return False
        for sig in (signal.SIGQUIT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return True
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return True
                time.sleep(0.05)
        return False


def _as_text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
