"""``LedgerSessionService``: ADK's ``BaseSessionService`` over an agentledger ledger.

Each operation is one transaction of ``ledger.adk_sessions``, run in a worker thread so that
the event loop never waits on the database. ``temp:`` keys of a state delta live on the
caller's session only, as ADK documents; ``app:`` and ``user:`` keys are stored once for the
app or the user and merged back, under their prefixes, into every session read.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session, State
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from ...errors import UsageError
from ...ledger import Ledger, SessionKey, StateDelta, StoredEvent, StoredSession


class LedgerSessionService(BaseSessionService):
    """ADK sessions in an agentledger :class:`~agentledger.ledger.Ledger` (see the module)."""

    def __init__(self, ledger: Ledger) -> None:
        if not isinstance(ledger, Ledger):
            raise UsageError(
                f"LedgerSessionService takes a Ledger (agentledger.ledger.Ledger.open(url)), "
                f"not {type(ledger).__name__}"
            )
        self._ledger = ledger
        self._store = ledger.adk_sessions

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
            await asyncio.to_thread(self._ledger.forget, conversation_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The state the user's sessions in the app share, keys without ``user:``."""
        return await asyncio.to_thread(self._store.user_state, app_name, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply its state delta at once (``temp:`` keys on ``session``
        only); a partial event is returned unstored. ``SessionNotFoundError`` for a session
        not stored."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        key = SessionKey(session.app_name, session.user_id, session.id)
        stored = StoredEvent(
            event_id=event.id,
            invocation_id=event.invocation_id,
            timestamp=event.timestamp,
            event=event.model_dump(mode="json", exclude_none=True),
        )
        delta = scoped_delta(event.actions.state_delta if event.actions else {})
        if not await asyncio.to_thread(self._store.append, key, stored, delta):
            raise SessionNotFoundError(f"Session {session.id} not found.")
        self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        return event


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
    return Session(
        id=stored.key.session_id,
        app_name=stored.key.app_name,
        user_id=stored.key.user_id,
        state=state,
        events=[Event.model_validate(each) for each in stored.events],
        last_update_time=stored.update_time,
    )
