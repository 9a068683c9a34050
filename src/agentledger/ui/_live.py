"""Live updates: what changed in the ledger, pushed to every open page as server-sent events.

One poller a viewer asks the ledger what changed since its last stamp
(``Ledger.changes_since``: an index range on each stamped table, not a scan), a few times a
second and only while a page is open, and hands each answer to every open page. A page
learns which conversations and runs changed and fetches, for those it shows, the fragments the
server renders with the same templates (``ui.js``); told that rows were deleted, it reads its
listing again, and a page whose conversation or run is gone loads again (the viewer's "not
found"). Each event carries its stamp as its id: a browser that reconnects sends it back
(``Last-Event-ID``) and is told what it missed, as is a page about what changed between its
rendering (its ``data-stamp``) and its subscription.

Each read is a short transaction of its own, run in a worker thread: a writer never waits
for the viewer, and the server's loop never waits for the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator

import anyio.to_thread

from ..errors import AgentLedgerError
from ..ledger import ChangedSince, Ledger

POLL_SECONDS = 0.25
"""How often the poller asks what changed while a page is open."""
KEEPALIVE_SECONDS = 15.0
"""How long a stream stays silent at most: a comment then tells a proxy it is alive, and the
server a page that went away."""
RETRY_MILLISECONDS = 2000
"""How soon a browser reconnects a stream that broke."""
QUEUED = 100
"""Answers a slow page may have waiting; beyond, it is told to read everything again."""


class ChangeFeed:
    """The viewer's one poller of the ledger's change stamps, fanned out to every open page."""

    def __init__(self, ledger: Ledger, *, interval: float = POLL_SECONDS) -> None:
        self.ledger, self.interval = ledger, interval
        self._pages: set[asyncio.Queue[ChangedSince | None]] = set()
        self._poller: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def subscribed(self, since: int | None) -> Iterator[asyncio.Queue[ChangedSince | None]]:
        """A queue that receives each answer while the context lasts (``None``: too many
        waited, read everything again); the poller runs while any page is subscribed. A
        poller started for a page begins at its stamp ``since``: a running one has a stamp
        older than what the page reads next, and tells it everything after."""
        queue: asyncio.Queue[ChangedSince | None] = asyncio.Queue(QUEUED)
        self._pages.add(queue)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll(since))
        try:
            yield queue
        finally:
            self._pages.discard(queue)

    async def read(self, since: int | None) -> ChangedSince:
        """What changed since ``since``, read in a worker thread."""
        return await anyio.to_thread.run_sync(self.ledger.changes_since, since)

    async def _poll(self, stamp: int | None) -> None:
        while self._pages:
            try:
                changed = await self.read(stamp)
            except AgentLedgerError:  # busy or briefly unreadable: asked again next time
                await asyncio.sleep(self.interval * 4)
                continue
            if changed and stamp is not None:
                self._hand_out(changed)
            stamp = changed.stamp
            await asyncio.sleep(self.interval)

    def _hand_out(self, changed: ChangedSince) -> None:
        for queue in self._pages:
            try:
                queue.put_nowait(changed)
            except asyncio.QueueFull:
                _drain(queue)
                queue.put_nowait(None)

    async def events(self, since: int | None) -> AsyncIterator[str]:
        """The event stream of one page, beginning with what changed since ``since`` (the
        stamp its page was read at, or the last event it received)."""
        with self.subscribed(since) as queue:
            yield f"retry: {RETRY_MILLISECONDS}\n\n"
            if since is not None:
                missed = await self.read(since)
                yield event(missed)
            while True:
                try:
                    changed = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield ": still here\n\n"
                    continue
                yield "event: reload\ndata: {}\n\n" if changed is None else event(changed)


def _drain(queue: asyncio.Queue[ChangedSince | None]) -> None:
    while not queue.empty():
        queue.get_nowait()


def event(changed: ChangedSince) -> str:
    """One server-sent event: the ids that changed, and whether rows were deleted (which ones
    is not told: a page asks whether what it shows is still there), with the stamp to resume
    from as its id."""
    data = {
        "conversations": sorted(changed.conversation_ids),
        "runs": sorted(changed.run_ids),
        "deleted": changed.deleted,
    }
    return f"id: {changed.stamp}\nevent: changes\ndata: {json.dumps(data)}\n\n"


def since_of(given: str | None) -> int | None:
    """The stamp a page gives (``?since=`` or ``Last-Event-ID``), or ``None`` when it gives
    none it could have been given."""
    if given is None or not given.strip().isdigit():
        return None
    return int(given)
