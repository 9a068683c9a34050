"""``AdkSessions``: the session tables of revision 0016, read and written for an agent
framework's session service (``ledger.adk_sessions``; Google ADK's is
``agentledger.integrations.adk.LedgerSessionService``).

A session is a conversation of the ledger whose tenant is the app and whose owner is the user;
its events are rows of ``adk_events`` in the order they were appended, as the framework
serialized them; its state is in three scopes: the session's own (``adk_sessions.state``), the
user's and the app's (``adk_states``), each delta applied in the transaction that stores the
event that carries it. Everything here is plain data: the framework decodes what it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import JsonValue
from sqlalchemy import Connection, RowMapping, func, insert, select, update

from .._values import new_id
from ..errors import UsageError
from ._engine import Database
from .checksums import sealed
from .tables import ConversationKind, adk_events, adk_sessions, adk_states, conversations

State = dict[str, JsonValue]

APP_WIDE = ""
"""The ``adk_states.user_id`` of the state every user of an app shares."""

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
    events: list[dict[str, JsonValue]] = field(default_factory=list)


@dataclass(frozen=True)
class StoredEvent:
    """An event to append, with what the ledger indexes it by."""

    event_id: str
    invocation_id: str
    timestamp: float
    event: dict[str, JsonValue]


class AdkSessions:
    """The sessions of an agent framework in this ledger (see the module)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    # --- writes ---------------------------------------------------------------------------------

    def create(
        self, key: SessionKey, delta: StateDelta, update_time: float
    ) -> StoredSession | None:
        """Store a new session with the state ``delta`` sets; ``None`` (and nothing written)
        when the app's user already has a session of that id."""

        def write(conn: Connection) -> StoredSession | None:
            if _session_row(conn, key) is not None:
                return None
            conversation_id = new_id()
            self._create_conversation(conn, key, conversation_id)
            row = {
                "conversation_id": conversation_id,
                **_names(key),
                "state": dict(delta.session),
                "update_time": update_time,
                "tenant_id": key.app_name,
            }
            conn.execute(insert(adk_sessions), row)
            app_state, user_state = _apply_shared(conn, key, delta)
            return StoredSession(
                key, conversation_id, dict(delta.session), app_state, user_state, update_time
            )

        return self._database.write("creating a session", write)

    def append(self, key: SessionKey, event: StoredEvent, delta: StateDelta) -> bool:
        """Store ``event`` after the session's events and apply ``delta``, at once; ``False``
        (and nothing written) when the session does not exist."""

        def write(conn: Connection) -> bool:
            found = _session_row(conn, key)
            if found is None:
                return False
            conversation_id = found["conversation_id"]
            last = conn.execute(
                select(func.max(adk_events.c.seq)).where(
                    adk_events.c.conversation_id == conversation_id
                )
            ).scalar_one()
            conn.execute(
                insert(adk_events),
                {
                    "id": new_id(),
                    "conversation_id": conversation_id,
                    "seq": 0 if last is None else last + 1,
                    "event_id": event.event_id,
                    "invocation_id": event.invocation_id,
                    "timestamp": event.timestamp,
                    "event": event.event,
                    "tenant_id": key.app_name,
                },
            )
            conn.execute(
                update(adk_sessions)
                .where(adk_sessions.c.conversation_id == conversation_id)
                .values(state={**found["state"], **delta.session}, update_time=event.timestamp)
            )
            _apply_shared(conn, key, delta)
            return True

        return self._database.write("appending an event", write)

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
            return _stored(conn, found, _events(conn, found["conversation_id"], recent, after))

        return self._database.read("reading a session", read)

    def list(self, app_name: str, user_id: str | None) -> list[StoredSession]:
        """The sessions of ``app_name`` (of ``user_id`` only, unless ``None``), without their
        events, least recently updated first."""

        def read(conn: Connection) -> list[StoredSession]:
            query = select(adk_sessions).where(adk_sessions.c.app_name == app_name)
            if user_id is not None:
                query = query.where(adk_sessions.c.user_id == user_id)
            query = query.order_by(adk_sessions.c.update_time, adk_sessions.c.conversation_id)
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
            return None if found is None else str(found["conversation_id"])

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
        now = self._database.clock()
        row = {
            "id": conversation_id,
            "kind": ConversationKind.MAIN.value,
            "title": None,
            "parent_run_id": None,
            "version": 0,
            "created_at": now,
            "updated_at": now,
            "metadata": {SESSION_KEY: key.session_id},
            "tenant_id": key.app_name,
            "owner_id": key.user_id,
        }
        conn.execute(insert(conversations), sealed(conversations, row))


def _names(key: SessionKey) -> dict[str, str]:
    return {"app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id}


def _session_row(conn: Connection, key: SessionKey) -> RowMapping | None:
    query = select(adk_sessions).where(
        adk_sessions.c.app_name == key.app_name,
        adk_sessions.c.user_id == key.user_id,
        adk_sessions.c.session_id == key.session_id,
    )
    return conn.execute(query).mappings().first()


def _events(
    conn: Connection, conversation_id: str, recent: int | None, after: float | None
) -> list[dict[str, JsonValue]]:
    """The session's events in order: the last ``recent``, then those at ``after`` or later."""
    query = select(adk_events.c.event, adk_events.c.timestamp).where(
        adk_events.c.conversation_id == conversation_id
    )
    query = query.order_by(adk_events.c.seq.desc())
    if recent is not None:
        query = query.limit(recent)
    rows = list(conn.execute(query))[::-1]
    return [row.event for row in rows if after is None or row.timestamp >= after]


def _stored(conn: Connection, row: RowMapping, events: list[dict[str, JsonValue]]) -> StoredSession:
    key = SessionKey(row["app_name"], row["user_id"], row["session_id"])
    return StoredSession(
        key=key,
        conversation_id=row["conversation_id"],
        state=dict(row["state"]),
        app_state=_shared(conn, key.app_name, APP_WIDE),
        user_state=_shared(conn, key.app_name, key.user_id),
        update_time=row["update_time"],
        events=events,
    )


def _shared(conn: Connection, app_name: str, user_id: str) -> State:
    query = select(adk_states.c.state).where(
        adk_states.c.app_name == app_name, adk_states.c.user_id == user_id
    )
    state = conn.execute(query).scalar_one_or_none()
    return dict(state) if state is not None else {}


def _apply_shared(conn: Connection, key: SessionKey, delta: StateDelta) -> tuple[State, State]:
    """Apply the app's and the user's parts of ``delta``; their states after it."""
    return (
        _apply(conn, key.app_name, APP_WIDE, delta.app),
        _apply(conn, key.app_name, key.user_id, delta.user),
    )


def _apply(conn: Connection, app_name: str, user_id: str, delta: State) -> State:
    """The shared state of ``(app_name, user_id)`` with ``delta`` applied (stored when it
    changes anything)."""
    before = _shared(conn, app_name, user_id)
    if not delta:
        return before
    after = {**before, **delta}
    where = (adk_states.c.app_name == app_name) & (adk_states.c.user_id == user_id)
    changed = conn.execute(update(adk_states).where(where).values(state=after)).rowcount
    if not changed:
        conn.execute(
            insert(adk_states),
            {"app_name": app_name, "user_id": user_id, "state": after, "tenant_id": app_name},
        )
    return after
