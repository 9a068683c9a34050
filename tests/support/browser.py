"""A headless Chromium for the tests that drive a page: the system's own (Debian's ``chromium``),
driven by Playwright. Nothing downloads a browser.

Skipped when no Chromium (or Playwright) is found, unless ``AGENTLEDGER_REQUIRE_BROWSER=1`` (as
in CI): then the tests that need it fail, as ``support.databases`` does for PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from bench._browser import FLAGS, find_chromium, unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser

REQUIRE_BROWSER_VARIABLE = "AGENTLEDGER_REQUIRE_BROWSER"
"""Set to 1 (as CI does) and a missing browser fails the tests that need it instead of
skipping them."""


def browser_required() -> bool:
    return os.environ.get(REQUIRE_BROWSER_VARIABLE, "").strip().lower() in {"1", "true", "yes"}


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium, closed on exit; skips the test asking for it when there is none,
    or fails it when ``AGENTLEDGER_REQUIRE_BROWSER=1``."""
    reason = unavailable()
    executable = find_chromium()
    if reason is not None or executable is None:
        if browser_required():
            pytest.fail(
                f"{REQUIRE_BROWSER_VARIABLE}=1 but no browser can be driven: {reason}",
                pytrace=False,
            )
        pytest.skip(f"no browser: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=FLAGS, timeout=60_000
        )
        try:
            yield browser
        finally:
            browser.close()
