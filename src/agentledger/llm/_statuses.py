"""What an HTTP error status from a provider means: the error to raise, whether a retry may
help, and the words for both; and the provider's own message, read from the error body."""

from __future__ import annotations

from typing import Protocol

import httpx

from ..errors import (
    ProviderAuthenticationError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)


class _Named(Protocol):
    """What the advice names: where the key comes from, the base URL and the model."""

    @property
    def api_key_variable(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...


def classify(status: int, provider: _Named) -> tuple[type[ProviderError], bool, tuple[str, str]]:
    """The error type, whether to retry, and what happened / what to do, for an HTTP status."""
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
