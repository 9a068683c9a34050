"""What an HTTP error status from a provider means: the error to raise, whether a retry may
help, and the words for both; and the provider's own message, read from the error body."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from ..errors import (
    ProviderAuthenticationError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)


class Named(Protocol):
    """What the advice names: where the key comes from, the base URL and the model."""

    @property
    def api_key_variable(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...


QUOTA = "insufficient_quota"


@dataclass(frozen=True)
class ErrorDetails:
    """What a provider's error object and headers say beyond the message: its ``type``,
    ``code`` and ``param``, and the id the provider gave the request."""

    type: str | None = None
    code: str | None = None
    param: str | None = None
    request_id: str | None = None

    def text(self) -> str:
        """``"; type: …, code: …, request id: …"``, naming only what was said."""
        said = [
            f"{name}: {value}"
            for name, value in (
                ("type", self.type),
                ("code", self.code),
                ("param", self.param),
                ("request id", self.request_id),
            )
            if value
        ]
        return f"; {', '.join(said)}" if said else ""

    def fields(self) -> dict[str, str | None]:
        """The keyword arguments of :class:`ProviderError` they fill."""
        return {
            "type": self.type,
            "code": self.code,
            "param": self.param,
            "request_id": self.request_id,
        }

    @property
    def out_of_quota(self) -> bool:
        return QUOTA in (self.type, self.code)


def error_details(body: object, headers: httpx.Headers | None = None) -> ErrorDetails:
    """The details of an OpenAI-style (``{"error": {...}}``) or Anthropic-style
    (``{"type": "error", "error": {...}, "request_id": ...}``) error body and its headers."""
    error: Any = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(error, Mapping):
        error = body if isinstance(body, Mapping) and "message" in body else {}
    headers = headers if headers is not None else httpx.Headers()
    request_id = headers.get("x-request-id") or headers.get("request-id")
    if not request_id and isinstance(body, Mapping):
        request_id = _text(body.get("request_id"))
    return ErrorDetails(
        type=_text(error.get("type")),
        code=_text(error.get("code")),
        param=_text(error.get("param")),
        request_id=request_id or None,
    )


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, str | int) and value != "" else None


def classify(
    status: int, provider: Named, details: ErrorDetails | None = None
) -> tuple[type[ProviderError], bool, tuple[str, str]]:
    """The error type, whether to retry, and what happened / what to do, for an HTTP status
    (and the error object's details: a 429 for an exhausted quota is not a rate limit)."""
    if status == 429 and details is not None and details.out_of_quota:
        return (
            ProviderRateLimitError,
            False,
            (
                "says the account is out of quota",
                "Add credit or raise the account's quota at the provider (its billing "
                "settings), or use another key; retrying will not help until then.",
            ),
        )
    if status == 429:
        return (
            ProviderRateLimitError,
            True,
            (
                "is rate limiting the requests",
                "Wait and resume the run, lower the request rate, or allow more retries "
                "with RetryPolicy(max_retries=...).",
            ),
        )
    if status in (408, 409):
        return (
            ProviderRequestError,
            True,
            ("could not take the request now", "The run is kept: resume it later."),
        )
    if status >= 500:
        return (
            ProviderServerError,
            True,
            ("failed on its side", "The run is kept: resume it later."),
        )
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "refused the key's permissions"
        return (
            ProviderAuthenticationError,
            False,
            (
                what,
                f"Set {provider.api_key_variable} to a valid key (or pass api_key=) and "
                "check that the key may use this model.",
            ),
        )
    if status == 404:
        return (
            ProviderRequestError,
            False,
            (
                f"has no such endpoint or model at {provider.base_url}",
                f"Check the model name ({provider.model!r}) and the base URL.",
            ),
        )
    return (
        ProviderRequestError,
        False,
        (
            "refused the request",
            "Check the model name, the model settings and the messages; retrying the same "
            "request will not help.",
        ),
    )


def server_message(response: httpx.Response) -> str:
    """The error message in an OpenAI- or Anthropic-style error body, else the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return response.text


def snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}..."


def is_error_body(body: Mapping[str, Any]) -> bool:
    """An error object in place of an answer: ``{"error": {...}}`` (OpenAI) or
    ``{"type": "error", ...}`` (Anthropic)."""
    return body.get("type") == "error" or (
        isinstance(body.get("error"), Mapping) and not body.get("choices")
    )


def should_retry(headers: httpx.Headers, default: bool) -> bool:
    """The server's own word on retrying, as the official SDKs take it: ``x-should-retry:
    true`` retries even a 400, ``false`` retries not even a 500."""
    said = headers.get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(said, default)
