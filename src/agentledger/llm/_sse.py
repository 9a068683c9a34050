"""Server-sent events, decoded line by line, and the base of the assemblers that build a
response from a provider's events: pure code, so the synchronous and asynchronous streams
feed it the lines httpx reads and share everything else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._values import InferenceDelta


@dataclass(frozen=True)
class ServerSentEvent:
    """One event: its type (``message`` when the server names none) and its data."""

    event: str
    data: str


@dataclass
class EventDecoder:
    """Turns the lines of a ``text/event-stream`` into events, as the HTML standard says: an
    event ends at a blank line, ``data`` lines join with newlines, ``:`` starts a comment.
    An event the stream breaks off in the middle of is never dispatched."""

    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> ServerSentEvent | None:
        """The event ``line`` completes, if it completes one."""
        if not line:
            return self._dispatch()
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        return ServerSentEvent(event, "\n".join(data)) if data else None


class StreamErrorEvent(Exception):
    """An error the provider sent inside a stream, with the HTTP status it stands for."""

    def __init__(self, status: int, message: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body
        """The error event's data, whose error object's details the error carries."""


class StreamAssembler:
    """Builds a response from a provider's stream events: the pure part of a stream, one
    subclass per wire format. ``feed`` turns an event into the deltas to yield (raising
    :class:`StreamErrorEvent` for an error event); ``body`` is the whole response in the
    provider's unstreamed wire format, so that ``parse`` reads streamed and unstreamed
    answers alike; ``partial_body`` is the same for an answer cut short, without the tool
    calls that had not arrived whole."""

    def __init__(self) -> None:
        self.done = False
        self.shown = False
        self.text = ""
        self.reasoning = ""

    def feed(self, event: ServerSentEvent) -> list[InferenceDelta]:
        raise NotImplementedError

    def body(self) -> Mapping[str, Any]:
        raise NotImplementedError

    def partial_body(self) -> Mapping[str, Any]:
        raise NotImplementedError

    def emit(self, *, text: str = "", reasoning: str = "") -> list[InferenceDelta]:
        """The delta for new text and reasoning, none when both are empty."""
        if not text and not reasoning:
            return []
        self.text += text
        self.reasoning += reasoning
        self.shown = True
        return [InferenceDelta(text=text, reasoning=reasoning)]
