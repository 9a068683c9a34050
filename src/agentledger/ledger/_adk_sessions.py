"""``AdkSessions``: the session tables of revision 0016, read and written for an agent
framework's session service (``ledger.adk_sessions``; Google ADK's is
``agentledger.integrations.adk.LedgerSessionService``).

A session is a conversation of the ledger whose tenant is the app and whose owner is the user;
its events are rows of ``adk_events`` in the order they were appended (``_adk_events``); its
state is in three scopes: the session's own (``adk_sessions.state``), the
user's and the app's (``adk_states``), each delta applied in the transaction that stores the
event that carries it. Everything here is plain data: the framework decodes what it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from pydantic import JsonValue
from sqlalchemy import Connection, RowMapping, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from .._values import new_id
from ..errors import UsageError
from ._adk_events import (
    Event,
    PartText,
    StoredEvent,
    insert_event,
    read_events,
    rebuilt,
    refer,
    residue_of,
)
from ._engine import Database
from ._framework_conversations import _create, insert_if_absent
from ._statements import statements_for
from .checksums import CHECKSUM, check_row, sealed
from .tables import adk_sessions, adk_states

T = TypeVar("T")

State = dict[str, JsonValue]
Row = Mapping[Any, Any]
"""A row as read: by column name."""

APP_WIDE = ""
"""The ``adk_states.owner_id`` of the state every user of an app shares."""

SESSION_KEY = "adk_session"
"""The key, in the metadata of a session's conversation, holding the framework's session id."""


@dataclass(frozen=True)
class SessionKey:
    """How the framework names a session: its app, its user and its id."""

    app_name: str
    user_id: str
    session_id: str


@dataclass(frozen=True)
class StateDelta:
    """A change to the state in each scope (keys without their scope's prefix)."""

    app: State = field(default_factory=dict)
    user: State = field(default_factory=dict)
    session: State = field(default_factory=dict)


@dataclass(frozen=True)
class StoredSession:
    """A session as stored: its state in each scope, its events (when asked for) and the time
    of its last update, as the framework stamped it."""

    key: SessionKey
    conversation_id: str
    state: State
    app_state: State
    user_state: State
    update_time: float
    revision: int
    """How many events the session has had: what a writer that read it expects to find."""
    events: list[Event] = field(default_factory=list)


class Appended(Enum):
    """What became of an event to append."""

    STORED = "stored"
    MISSING = "missing"
    """The session does not exist (any more)."""
    STALE = "stale"
    """The session changed since the writer read it: nothing was written."""


@dataclass(frozen=True)
class Append:
    """An append's outcome: with the row the event is (when stored) and the session's
    revision after it."""

    outcome: Appended
    conversation_id: str = ""
    row_id: str = ""
    revision: int = 0


class AdkSessions:
    """The sessions of an agent framework in this ledger (see the module)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def together(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in one write transaction that this handle's reads and writes on this
        thread join: an event, its state delta and the runs it is recorded in commit at once."""
        return self._database.together(what, work)

    # --- writes ---------------------------------------------------------------------------------

    def create(
        self, key: SessionKey, delta: StateDelta, update_time: float
    ) -> StoredSession | None:
        """Store a new session with the state ``delta`` sets; ``None`` (and nothing written)
        when the app's user already has a session of that id, even one another writer stores
        at the same moment."""

        def write(conn: Connection) -> StoredSession | None:
            if _session_row(conn, key) is not None:
                return None
            conversation_id = new_id()
            self._create_conversation(conn, key, conversation_id)
            row = {
                "id": conversation_id,
                "session_id": key.session_id,
                "state": dict(delta.session),
                "update_time": update_time,
                "event_count": 0,
                "tenant_id": key.app_name,
                "owner_id": key.user_id,
            }
            conn.execute(insert(adk_sessions), sealed(adk_sessions, row))
            _apply_shared(conn, key, delta)
            app_state, user_state = _shared_states(conn, key)
            return StoredSession(
                key, conversation_id, dict(delta.session), app_state, user_state, update_time, 0
            )

        try:
            return self._database.write("creating a session", write)
        except IntegrityError:
            if self.conversation_of(key) is None:
                raise
            return None

    def append(
        self,
        key: SessionKey,
        event: StoredEvent,
        delta: StateDelta,
        *,
        expected: int | None,
        seen: float,
    ) -> Append:
        """Store ``event`` after the session's events and apply ``delta``, at once, if the
        session is as its writer read it: at revision ``expected`` or, when the writer does
        not know it, updated no later than ``seen``. Nothing is written otherwise."""

        def write(conn: Connection) -> Append:
            found = _session_row(conn, key)
            if found is None:
                return Append(Appended.MISSING)
            check_row(adk_sessions, found)
            count = found["event_count"]
            stale = count != expected if expected is not None else found["update_time"] > seen
            if stale or not _claim(conn, found, event.timestamp, delta.session):
                return Append(Appended.STALE)
            conversation_id = found["id"]
            row_id = insert_event(conn, conversation_id, count, event, key.app_name)
            _apply_shared(conn, key, delta)
            return Append(Appended.STORED, conversation_id, row_id, count + 1)

        return self._database.write("appending an event", write)

    def refer(self, row_id: str, residue: Event, message_ids: Sequence[str | None]) -> None:
        """Keep event row ``row_id`` as ``residue``, its parts' texts held by the rows
        ``message_ids`` (what ``_adk_events.rebuilt`` reads back)."""
        self._database.write(
            "storing an event's residue", lambda conn: refer(conn, row_id, residue, message_ids)
        )

    @staticmethod
    def residue(event: Event, message_ids: Sequence[str | None]) -> Event:
        """``event`` less what the rows ``message_ids`` names hold of its parts."""
        return residue_of(event, message_ids)

    @staticmethod
    def rebuilt(
        residue: Event, message_ids: Sequence[str | None], texts: Mapping[str, PartText]
    ) -> Event:
        """The event ``residue`` and what the rows ``message_ids`` hold of its parts
        (``texts``, by row id) make: what a read of it gives."""
        return rebuilt(residue, message_ids, texts)

    # --- reads ----------------------------------------------------------------------------------

    def get(
        self, key: SessionKey, *, recent: int | None = None, after: float | None = None
    ) -> StoredSession | None:
        """The session with its state in each scope and its events in order (only the last
        ``recent`` of them, then only those at ``after`` or later); ``None`` if there is none."""

        def read(conn: Connection) -> StoredSession | None:
            found = _session_row(conn, key)
            if found is None:
                return None
            events = read_events(conn, found["id"], recent, after)
            return _stored(conn, found, events)

        return self._database.read("reading a session", read)

    def list(self, app_name: str, user_id: str | None) -> list[StoredSession]:
        """The sessions of ``app_name`` (of ``user_id`` only, unless ``None``), without their
        events, least recently updated first."""

        def read(conn: Connection) -> list[StoredSession]:
            query = select(adk_sessions).where(adk_sessions.c.tenant_id == app_name)
            if user_id is not None:
                query = query.where(adk_sessions.c.owner_id == user_id)
            query = query.order_by(adk_sessions.c.update_time, adk_sessions.c.id)
            return [_stored(conn, row, []) for row in conn.execute(query).mappings()]

        return self._database.read("listing sessions", read)

    def user_state(self, app_name: str, user_id: str) -> State:
        """The state every session of ``user_id`` in ``app_name`` shares (``{}`` if none)."""
        return self._database.read(
            "reading a user's state", lambda conn: _shared(conn, app_name, user_id)
        )

    def conversation_of(self, key: SessionKey) -> str | None:
        """The id of the conversation session ``key`` is, if it exists."""

        def read(conn: Connection) -> str | None:
            found = _session_row(conn, key)
            return None if found is None else str(found["id"])

        return self._database.read("finding a session", read)

    # --- inside a transaction -------------------------------------------------------------------

    def _create_conversation(self, conn: Connection, key: SessionKey, conversation_id: str) -> None:
        scope = self._database.scope
        if scope.tenant_id not in (None, key.app_name) or scope.owner_id not in (
            None,
            key.user_id,
        ):
            raise UsageError(
                f"the session of app {key.app_name!r} and user {key.user_id!r} is outside this "
                "handle's scope (the app is the tenant, the user the owner): use a handle of "
                "that scope, or the unscoped ledger"
            )
        owners = {"tenant_id": key.app_name, "owner_id": key.user_id}
        _create(conn, self._database, conversation_id, {SESSION_KEY: key.session_id}, owners)


def _session_row(conn: Connection, key: SessionKey) -> Row | None:
    wanted = {"app": key.app_name, "user": key.user_id, "session": key.session_id}
    found = statements_for(conn.dialect).select(conn, _SESSION_ROW, wanted)
    return found[0] if found else None


def _claim(conn: Connection, found: Row, update_time: float, delta: State) -> bool:
    """Move the session past revision ``found`` (its next event's, its time, its state with
    ``delta``) unless another writer did first: a compare-and-set, which on PostgreSQL also
    holds the row until the transaction ends."""
    row = dict(found)
    row.update(
        event_count=found["event_count"] + 1,
        update_time=update_time,
        state={**found["state"], **delta},
    )
    sealed(adk_sessions, row)
    claim = {
        "claimed": found["id"],
        "count": found["event_count"],
        "new_state": row["state"],
        "new_time": update_time,
        "new_count": row["event_count"],
        "new_checksum": row[CHECKSUM],
    }
    return bool(statements_for(conn.dialect).execute(conn, _CLAIM, claim).rowcount)


_SESSION_ROW = select(adk_sessions).where(
    adk_sessions.c.tenant_id == bindparam("app"),
    adk_sessions.c.owner_id == bindparam("user"),
    adk_sessions.c.session_id == bindparam("session"),
)
_CLAIM = (
    update(adk_sessions)
    .where(
        (adk_sessions.c.id == bindparam("claimed"))
        & (adk_sessions.c.event_count == bindparam("count"))
    )
    .values(
        state=bindparam("new_state", type_=adk_sessions.c.state.type),
        update_time=bindparam("new_time", type_=adk_sessions.c.update_time.type),
        event_count=bindparam("new_count", type_=adk_sessions.c.event_count.type),
        checksum=bindparam("new_checksum", type_=adk_sessions.c.checksum.type),
    )
)
"""The session's next revision, if it is still at the one its writer read."""


def _stored(conn: Connection, row: Row, events: list[Event]) -> StoredSession:
    check_row(adk_sessions, row)
    key = SessionKey(row["tenant_id"], row["owner_id"], row["session_id"])
    app_state, user_state = _shared_states(conn, key)
    return StoredSession(
        key=key,
        conversation_id=row["id"],
        state=dict(row["state"]),
        app_state=app_state,
        user_state=user_state,
        update_time=row["update_time"],
        revision=row["event_count"],
        events=events,
    )


def _state_row(conn: Connection, app_name: str, user_id: str) -> RowMapping | None:
    query = select(adk_states).where(
        adk_states.c.tenant_id == app_name, adk_states.c.owner_id == user_id
    )
    found = conn.execute(query).mappings().first()
    if found is not None:
        check_row(adk_states, found)
    return found


def _shared(conn: Connection, app_name: str, user_id: str) -> State:
    found = _state_row(conn, app_name, user_id)
    return dict(found["state"]) if found is not None else {}


def _shared_states(conn: Connection, key: SessionKey) -> tuple[State, State]:
    """The state the app's sessions share and the one the user's share."""
    return _shared(conn, key.app_name, APP_WIDE), _shared(conn, key.app_name, key.user_id)


def _apply_shared(conn: Connection, key: SessionKey, delta: StateDelta) -> None:
    """Apply the app's and the user's parts of ``delta`` (nothing read or written for a part
    that changes nothing: most events carry no shared state)."""
    _apply(conn, key.app_name, APP_WIDE, delta.app)
    _apply(conn, key.app_name, key.user_id, delta.user)


def _apply(conn: Connection, app_name: str, user_id: str, delta: State) -> None:
    """Store the shared state of ``(app_name, user_id)`` with ``delta`` applied, if ``delta``
    changes anything. The row is created empty first if it is new, then locked and read
    (PostgreSQL), so that two writers' deltas both land."""
    if not delta:
        return
    where = (adk_states.c.tenant_id == app_name) & (adk_states.c.owner_id == user_id)
    empty = {"id": new_id(), "tenant_id": app_name, "owner_id": user_id, "state": {}}
    conn.execute(insert_if_absent(conn, adk_states, _SHARED_BY).values(sealed(adk_states, empty)))
    found = conn.execute(select(adk_states).where(where).with_for_update()).mappings().one()
    check_row(adk_states, found)
    row = sealed(adk_states, {**found, "state": {**found["state"], **delta}})
    conn.execute(update(adk_states).where(adk_states.c.id == found["id"]).values(row))


_SHARED_BY = ("tenant_id", "owner_id")
"""What names a shared state (unique in ``adk_states``): its app and its user."""
