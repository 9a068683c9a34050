"""Leases: one running run per conversation, and the heartbeat that keeps a lease alive.

A run holds its conversation's lease while it is in progress: ``conversations.lease_holder``
is a token new for every attempt at a run, ``lease_expires_at`` when the lease is free again.
Every write of a run checks that this process still holds the lease and extends it
(:meth:`LeaseKeeper.check`): a process that stalled past its lease and was taken over gets
:class:`LeaseLostError` instead of writing into the run that replaced it. One heartbeat thread
per ledger handle renews the leases of all its runs a third of the way through their life.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, insert, or_, select, update

from ..errors import ConversationBusyError, LeaseLostError, UsageError
from ._engine import Database
from ._lookup import not_found
from ._scope import EVERYTHING, Scope, holds
from ._statements import statements_for
from .checksums import sealed
from .tables import ConversationKind, agent_runs, conversations

RESUME_PREFIX = "resume:"
"""Lease tokens taken to resume a run begin with this."""

_EXTEND_LEASE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("conversation_id"),
        conversations.c.lease_holder == bindparam("token"),
    )
    .values(lease_expires_at=bindparam("expires"))
)
_HELD = select(conversations.c.id).where(
    conversations.c.id == bindparam("conversation_id"),
    conversations.c.lease_holder == bindparam("token"),
)
_NOTE_HEARTBEAT = (
    update(agent_runs)
    .where(agent_runs.c.id == bindparam("run_id"))
    .values(heartbeat_at=bindparam("beat"))
)
_TAKE_FREE_LEASE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("conversation_id"),
        or_(
            conversations.c.lease_holder.is_(None),
            conversations.c.lease_expires_at <= bindparam("now"),
        ),
    )
    .values(
        lease_holder=bindparam("token"),
        lease_run_id=bindparam("run_id"),
        lease_expires_at=bindparam("expires"),
        updated_at=bindparam("now"),
    )
    .returning(conversations.c.tenant_id, conversations.c.owner_id)
)
"""Takes a free conversation's lease, and says whose the conversation is (what the run copies
onto its rows)."""
_SPAWNING_RUN = select(agent_runs.c.tenant_id, agent_runs.c.owner_id).where(
    agent_runs.c.id == bindparam("run_id")
)
_HOLDER = select(
    conversations.c.lease_run_id,
    conversations.c.lease_expires_at,
    conversations.c.tenant_id,
    conversations.c.owner_id,
).where(conversations.c.id == bindparam("conversation_id"))
_RELEASE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("conversation_id"),
        conversations.c.lease_holder == bindparam("token"),
    )
    .values(
        lease_holder=None, lease_run_id=None, lease_expires_at=None, updated_at=bindparam("now")
    )
)
_RELEASE_AND_BUMP_VERSION = _RELEASE.values(version=conversations.c.version + 1)


@dataclass
class Lease:
    """This process's hold on a conversation for one run, and what holding it lets the process
    know without asking: nobody else writes to a conversation while its lease is held, so the
    holder keeps where the conversation and the run's buffer end, and the run's row as written.
    """

    token: str
    conversation_id: str
    next_buffer_seq: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when the run ends here, or when its lease turned out to be lost: no more renewals."""
    due: float = 0.0
    """When the heartbeat renews the lease next (``time.monotonic()``)."""
    run_row: dict[str, Any] | None = None
    """The run's row as this process wrote or read it, so that sealing its end reads nothing."""
    next_seq: int | None = None
    last_message_id: str | None = None
    """Where the conversation ends, when this process wrote its last message (the user's, at
    begin): the commit needs not look."""
    tenant_id: str | None = None
    owner_id: str | None = None
    """The conversation's tenant and owner, read as the lease was taken: every row the run
    writes carries the tenant (its run row the owner too), and the heartbeat renews the lease
    in that tenant."""
    expires: datetime | None = None
    """When the lease expires, as this process last took or pushed it on (None: not known)."""

    @property
    def tenant(self) -> dict[str, str | None]:
        """The column a row of the run's gets from its conversation."""
        return {"tenant_id": self.tenant_id}


def _busy(
    conversation_id: str, run_id: str | None, until: datetime | None
) -> ConversationBusyError:
    held = "" if until is None else f" until {until:%Y-%m-%d %H:%M:%S} UTC"
    return ConversationBusyError(
        f"conversation {conversation_id} is busy: run {run_id or '(ending)'} holds it{held}. "
        "Wait for that run to finish; if its process died, recover it once the lease expires "
        "(Agent.recover or `agentledger recover`)."
    )


class LeaseKeeper:
    """The leases of one ledger handle's runs: taking, checking and releasing them in a run's
    transactions, and renewing them from one heartbeat thread."""

    def __init__(self, database: Database, lease_seconds: float) -> None:
        self.database = database
        self.duration = timedelta(seconds=lease_seconds)
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._interval = max(lease_seconds / 3, 0.05)
        self._heartbeat_thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.sql = statements_for(database.engine.dialect)

    # --- in a run's transactions ----------------------------------------------------------------

    def take(
        self,
        conn: Connection,
        lease: Lease,
        run_id: str,
        now: datetime,
        parent_run_id: str | None = None,
        scope: Scope = EVERYTHING,
    ) -> None:
        """Take ``lease`` on a free conversation (creating the conversation when it does not
        exist: a subagent's, with its spawning run's tenant and owner, or a new one in
        ``scope``), noting on it whose the conversation is; :class:`ConversationBusyError` when
        a run holds it, :class:`NotFoundError` when it is outside ``scope``."""
        conversation_id, token = lease.conversation_id, lease.token
        expires = now + self.duration
        values = {"conversation_id": conversation_id, "token": token, "run_id": run_id}
        # Tried again when the lease was freed between the two statements (on PostgreSQL each
        # reads what was committed when it began, and the run that held it ended in between).
        for _ in range(3):
            taken = self.sql.execute(
                conn, _TAKE_FREE_LEASE, {**values, "expires": expires, "now": now}
            ).fetchall()
            if taken:
                lease.tenant_id, lease.owner_id = taken[0]
                if not holds(scope, {"tenant_id": lease.tenant_id, "owner_id": lease.owner_id}):
                    # Another scope's: as if there were none (the transaction is rolled back).
                    raise not_found("conversation", conversation_id)
                lease.expires = expires
                return
            holder = conn.execute(_HOLDER, {"conversation_id": conversation_id}).first()
            if holder is None:
                break
            if not holds(scope, holder._mapping):
                raise not_found("conversation", conversation_id)
            if holder.lease_expires_at is not None:
                raise _busy(conversation_id, holder.lease_run_id, holder.lease_expires_at)
        else:
            raise _busy(conversation_id, None, None)
        kind = ConversationKind.SUBAGENT if parent_run_id else ConversationKind.MAIN
        owners = scope.columns()
        if parent_run_id is not None:  # a subagent's conversation is its spawning run's
            for spawning in self.sql.select(conn, _SPAWNING_RUN, {"run_id": parent_run_id}):
                owners = {"tenant_id": spawning["tenant_id"], "owner_id": spawning["owner_id"]}
        row = {
            "id": conversation_id,
            "kind": kind.value,
            "parent_run_id": parent_run_id,
            "version": 0,
            "lease_holder": token,
            "lease_run_id": run_id,
            "lease_expires_at": expires,
            "created_at": now,
            "updated_at": now,
            **owners,
        }
        conn.execute(insert(conversations), sealed(conversations, row))
        lease.tenant_id, lease.owner_id = owners["tenant_id"], owners["owner_id"]
        lease.expires = expires

    def take_over(
        self, conn: Connection, conversation: Any, run_id: str, token: str, now: datetime
    ) -> None:
        """Take the lease from whoever held it when ``conversation`` (its row) was read:
        exactly one of several processes taking over the same run wins."""
        observed = conversation["lease_holder"]
        holder = conversations.c.lease_holder
        same = holder.is_(None) if observed is None else holder == observed
        expires = now + self.duration
        won = conn.execute(
            update(conversations)
            .where(and_(conversations.c.id == conversation["id"], same))
            .values(lease_holder=token, lease_run_id=run_id, lease_expires_at=expires)
        ).rowcount
        if not won:
            raise ConversationBusyError(
                f"run {run_id} was claimed by another process a moment ago; it is being resumed "
                "there"
            )

    def check(self, conn: Connection, run_id: str, lease: Lease, now: datetime) -> None:
        """:class:`LeaseLostError` unless this process still holds ``lease``, which is pushed
        on once less than half of it is left. A lease nobody took from its holder is still
        the holder's: while much of it is left, checking the holder is the whole fence, and
        the conversation's row is not written at every step (the heartbeat pushes the lease
        on too, a third of the way through its life)."""
        if lease.expires is not None and lease.expires - now > self.duration / 2:
            values = {"conversation_id": lease.conversation_id, "token": lease.token}
            if self.sql.select(conn, _HELD, values):
                return
        elif self._extend(conn, lease, now):
            return
        raise LeaseLostError(
            f"run {run_id} lost its lease on conversation {lease.conversation_id}: it was "
            "not renewed in time and another process took the conversation over. This "
            "process's remaining work on the run is discarded; the run's recorded steps "
            "are kept."
        )

    def release(self, conn: Connection, lease: Lease, now: datetime, *, bump_version: bool) -> None:
        """Free the conversation (and, for a run that committed, count a new version of it)."""
        statement = _RELEASE_AND_BUMP_VERSION if bump_version else _RELEASE
        values = {"conversation_id": lease.conversation_id, "token": lease.token, "now": now}
        self.sql.execute(conn, statement, values)

    def protected_for(self, conversation: Any, stale_after: float | None) -> float | None:
        """How long a run must be silent for ``stale_after`` to take its lease.

        A lease taken to resume the run is protected for two heartbeats whatever
        ``stale_after`` says: two processes recovering one run at once, with
        ``stale_after=0``, must not take it from each other in turn.
        """
        resumed = str(conversation["lease_holder"] or "").startswith(RESUME_PREFIX)
        if stale_after is None or not resumed:
            return stale_after
        return max(stale_after, 2 * self.duration.total_seconds() / 3)

    # --- the leases this handle holds -----------------------------------------------------------

    def keep(self, run_id: str, lease: Lease) -> None:
        """Hold ``lease`` for ``run_id``: the heartbeat renews it until :meth:`drop`."""
        lease.due = time.monotonic() + self._interval
        with self._lock:
            self._held[run_id] = lease
            running = self._heartbeat_thread is not None and self._heartbeat_thread.is_alive()
            if not running and not self._closed.is_set():
                # One thread per handle renews for all its runs (started with the first, and
                # again in a forked child, which has none of its parent's threads).
                self._heartbeat_thread = threading.Thread(
                    target=self._heartbeat, name="agentledger-heartbeat", daemon=True
                )
                self._heartbeat_thread.start()

    def held(self, run_id: str) -> Lease:
        """The lease this handle holds for ``run_id``; :class:`UsageError` when it holds none."""
        with self._lock:
            lease = self._held.get(run_id)
        if lease is None:
            raise UsageError(
                f"run {run_id} was not begun or claimed through this ledger handle; begin it with "
                "begin_run (Agent.run) or take it over with claim_run (Agent.resume)"
            )
        return lease

    def drop(self, run_id: str) -> None:
        """Stop holding the lease of ``run_id`` (its run ended here, or could not go on)."""
        with self._lock:
            lease = self._held.pop(run_id, None)
        if lease is not None:
            lease.stop.set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            leases = list(self._held.values())
            self._held.clear()
            thread, self._heartbeat_thread = self._heartbeat_thread, None
        for lease in leases:
            lease.stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # --- the heartbeat --------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Renew every held lease a third of the way through its life, until the handle closes.
        A missed renewal is tried again at the next interval; a lease found lost is let go."""
        wait = self._interval
        while not self._closed.wait(wait):
            now = time.monotonic()
            with self._lock:
                due = [(r, lease) for r, lease in self._held.items() if lease.due <= now]
                upcoming = [lease.due for lease in self._held.values() if lease.due > now]
            for run_id, lease in due:
                lease.due = now + self._interval
                with contextlib.suppress(Exception):
                    if not self._renew(run_id, lease):
                        lease.stop.set()
                        self._forget(run_id, lease)
            wait = max(min(upcoming, default=now + self._interval) - time.monotonic(), 0.01)

    def _renew(self, run_id: str, lease: Lease) -> bool:
        """Extend ``lease`` and note the run's heartbeat; False if the lease is no longer held."""
        if lease.stop.is_set():
            return True
        now = self.database.clock()
        with self.database.connections.write() as conn:
            # The lease's own tenant: one keeper renews the runs of handles of every scope.
            Scope(lease.tenant_id).enter(conn)
            held = self._extend(conn, lease, now)
            if held:
                self.sql.execute(conn, _NOTE_HEARTBEAT, {"run_id": run_id, "beat": now})
        return held

    def _extend(self, conn: Connection, lease: Lease, now: datetime) -> bool:
        """Push the lease's expiry on if this process still holds it (False if it does not)."""
        values = {"conversation_id": lease.conversation_id, "token": lease.token}
        expires = now + self.duration
        extended = bool(
            self.sql.execute(conn, _EXTEND_LEASE, {**values, "expires": expires}).rowcount
        )
        if extended:
            lease.expires = expires
        return extended

    def _forget(self, run_id: str, lease: Lease) -> None:
        with self._lock:
            if self._held.get(run_id) is lease:
                del self._held[run_id]
