"""The system's own headless Chromium (Debian's ``chromium``), driven by Playwright: how the
viewer's benchmark and the tests that drive a page find it and start it. Nothing downloads a
browser."""

from __future__ import annotations

import importlib.util
import shutil

CHROMIUM_NAMES = ("chromium", "chromium-browser")
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",  # no connections of its own: a closed network refuses them
]


def find_chromium() -> str | None:
    """The system's Chromium executable, if it has one."""
    return next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)


def unavailable() -> str | None:
    """Why this machine cannot drive a browser, or ``None`` when it can."""
    if find_chromium() is None:
        return f"no Chromium on PATH ({', '.join(CHROMIUM_NAMES)}; Debian: apt install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed (pip install -e '.[dev]')"
    return None
