"""An ASGI app served by uvicorn on a loopback port, in a thread of its own: what a real client
(a streaming httpx client, a browser) talks to. The in-process transport of httpx buffers a
whole response, so it can show neither a stream as it comes nor a client that goes away."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

STARTUP_TIMEOUT = 30.0


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve ``app`` (its lifespan included) on 127.0.0.1 at a free port; its base URL.
    Stopped, its lifespan ended, on exit."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http="h11", ws="none", lifespan="on", log_level="warning"
    )
    server = uvicorn.Server(config)  # in a thread that is not the main one: no signal handlers
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start (see the log above)")
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT)


def sse_events(text: str) -> list[tuple[str, str]]:
    """The (event, data) pairs of a server-sent event stream."""
    events = []
    for frame in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in fields:
            events.append((fields["event"], fields.get("data", "")))
    return events
