"""``agentledger ui``'s server: the viewer of a ledger opened read-only, on a local address
unless a token guards it."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Callable, Iterator

import uvicorn

from ..errors import UsageError
from ..ledger import Ledger
from ._access import LOOPBACK_NAMES
from ._app import create_app

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_VARIABLE = "AGENTLEDGER_UI_TOKEN"


def check_address(host: str, token: str | None) -> None:
    """Refuse to listen beyond the loopback interface without a token: anyone who can reach
    the address could read every conversation."""
    if token is None and host.lower() not in LOOPBACK_NAMES | {"::1"}:
        raise UsageError(
            f"--host {host} would let anyone who can reach it read the ledger: give a token "
            f"too (--token, or {TOKEN_VARIABLE}), which every request must then carry; or "
            f"leave --host out to serve {LOOPBACK} only"
        )
    if token is not None and len(token) < 16:
        raise UsageError(
            "the token is too short to guard the ledger: use 16 characters or more, e.g. "
            f"{secrets.token_urlsafe(24)}"
        )


def address(host: str, port: int, token: str | None) -> str:
    """What to open in a browser (with the token, which the viewer then keeps in a cookie)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(
    url: str | os.PathLike[str],
    *,
    host: str = LOOPBACK,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    tenant_id: str | None = None,
    owner_id: str | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve the viewer of the ledger at ``url`` (opened read-only, kept to ``tenant_id`` and
    ``owner_id``) on ``host``:``port`` (0: any free port) until the process is stopped;
    ``announce`` is told the address to open once it listens."""
    check_address(host, token)
    with Ledger.open(url, migrate=False, read_only=True) as ledger, listening(host, port) as sock:
        scoped = tenant_id is not None or owner_id is not None
        app = create_app(ledger.scoped(tenant_id, owner_id) if scoped else ledger, token=token)
        announce(address(host, sock.getsockname()[1], token))
        # Open pages keep their event streams: a stopped viewer closes them, not waits for them.
        config = uvicorn.Config(
            app, log_level="warning", server_header=False, timeout_graceful_shutdown=1
        )
        uvicorn.Server(config).run(sockets=[sock])


@contextlib.contextmanager
def listening(host: str, port: int) -> Iterator[socket.socket]:
    """A socket bound to ``host``:``port`` (0: a free port) and listening, before the address
    is announced: a browser opened on it at once is answered as soon as the server starts,
    and a port already taken is said before anything else."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose another port with "
            "--port (0 takes any free one)"
        ) from None
    with sock:
        yield sock
