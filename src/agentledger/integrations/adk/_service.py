"""``LedgerSessionService``: ADK's ``BaseSessionService`` over an agentledger ledger.

Each operation is one transaction of ``ledger.adk_sessions``, run in a worker thread so that
the event loop never waits on the database. ``temp:`` keys of a state delta live on the
caller's session only, as ADK documents; ``app:`` and ``user:`` keys are stored once for the
app or the user and merged back, under their prefixes, into every session read. An appended
event is recorded in its invocation's run (``_runs``) in the transaction that stores it.

A session read carries its revision (how many events it has had) in ADK's storage marker: an
append to a session another writer has appended to since is refused with ADK's
``StaleSessionError``, nothing written, as ADK's own database services do.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session, State
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from ...ledger import (
    Append,
    Appended,
    Ledger,
    SessionKey,
    StateDelta,
    StoredEvent,
    StoredSession,
)
from .._ledger_argument import a_ledger
from ._runs import DELETED, SessionRuns

STALE = (
    "The session has been modified in storage since it was loaded: get it again "
    "(get_session) before appending to it."
)


class LedgerSessionService(BaseSessionService):
    """ADK sessions in an agentledger :class:`~agentledger.ledger.Ledger` (see the module)."""

    def __init__(self, ledger: Ledger) -> None:
        ledger = a_ledger(ledger, "LedgerSessionService")
        self._ledger = ledger
        self._store = ledger.adk_sessions
        self._runs = SessionRuns(ledger, self._store)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new session holding ``state`` (its ``app:`` and ``user:`` keys shared);
        ``AlreadyExistsError`` when the user has a session of that id in the app."""
        chosen = (session_id or "").strip() or str(uuid.uuid4())
        key = SessionKey(app_name, user_id, chosen)
        stored = await asyncio.to_thread(
            self._store.create, key, scoped_delta(state or {}), time.time()
        )
        if stored is None:
            raise AlreadyExistsError(f"Session with id {chosen} already exists.")
        return session_of(stored)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events (as ``config`` filters them), or ``None``."""
        recent = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        key = SessionKey(app_name, user_id, session_id.strip())
        stored = await asyncio.to_thread(self._store.get, key, recent=recent, after=after)
        return None if stored is None else session_of(stored)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (the user's only, unless ``None``) without their events, least
        recently updated first."""
        stored = await asyncio.to_thread(self._store.list, app_name, user_id)
        return ListSessionsResponse(sessions=[session_of(each) for each in stored])

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Forget the session's conversation with every row of it (nothing if it is absent)."""
        key = SessionKey(app_name, user_id, session_id.strip())
        conversation_id = await asyncio.to_thread(self._store.conversation_of, key)
        if conversation_id is not None:
            await asyncio.to_thread(self._forget, conversation_id)

    def _forget(self, conversation_id: str) -> None:
        with self._runs.lock:
            self._runs.end(conversation_id, DELETED)
            self._ledger.forget(conversation_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The state the user's sessions in the app share, keys without ``user:``."""
        return await asyncio.to_thread(self._store.user_state, app_name, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event``, apply its state delta and record it in its invocation's run, at
        once (``temp:`` keys on ``session`` only); a partial event is returned unstored.
        ``SessionNotFoundError`` for a session not stored, ``StaleSessionError`` for one
        another writer appended to since ``session`` was read."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        dumped = event.model_dump(mode="json", exclude_none=True)
        appended = await asyncio.to_thread(self._append, session, event, dumped)
        if appended.outcome is Appended.MISSING:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        if appended.outcome is Appended.STALE:
            raise StaleSessionError(STALE)
        self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        session._storage_update_marker = str(appended.revision)
        return event

    def _append(self, session: Session, event: Event, dumped: dict[str, JsonValue]) -> Append:
        """The append's transaction: the event, its delta, its run."""
        key = SessionKey(session.app_name, session.user_id, session.id)
        stored = StoredEvent(event.id, event.invocation_id, event.timestamp, dumped)
        delta = scoped_delta(event.actions.state_delta if event.actions else {})
        marker = session._storage_update_marker
        expected = int(marker) if marker is not None and marker.isdigit() else None

        def work() -> Append:
            appended = self._store.append(
                key, stored, delta, expected=expected, seen=session.last_update_time
            )
            if appended.outcome is Appended.STORED:
                self._runs.record(appended.conversation_id, appended.row_id, event, dumped)
            return appended

        with self._runs.lock:
            return self._store.together("appending an event", work)


def scoped_delta(state: dict[str, Any]) -> StateDelta:
    """``state`` split by scope, each key without its prefix; ``temp:`` keys dropped."""
    app: dict[str, JsonValue] = {}
    user: dict[str, JsonValue] = {}
    own: dict[str, JsonValue] = {}
    for key, value in state.items():
        stored = to_jsonable_python(value, fallback=str)
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = stored
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = stored
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = stored
    return StateDelta(app=app, user=user, session=own)


def session_of(stored: StoredSession) -> Session:
    """ADK's session of what is stored: the scopes merged, the shared ones under prefixes."""
    state: dict[str, Any] = dict(stored.state)
    state.update({State.APP_PREFIX + k: v for k, v in stored.app_state.items()})
    state.update({State.USER_PREFIX + k: v for k, v in stored.user_state.items()})
    session = Session(
        id=stored.key.session_id,
        app_name=stored.key.app_name,
        user_id=stored.key.user_id,
        state=state,
        events=[Event.model_validate(each) for each in stored.events],
        last_update_time=stored.update_time,
    )
    session._storage_update_marker = str(stored.revision)
    return session
