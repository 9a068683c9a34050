"""The screenshots of ``docs/ui.md``: each page of the viewer over the demo's ledger, in
headless Chromium, saved as PNG (``make screenshots``; not run by the tests).

    PYTHONPATH=tests python -m support.screenshots docs/images
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

from agentledger.ledger import Ledger
from agentledger.ui import create_app
from support.browser import FLAGS, find_chromium
from support.cli import ok
from support.served import served

VIEWPORT = {"width": 1280, "height": 760}


def main(folder: Path) -> None:
    executable = find_chromium()
    if executable is None:
        raise SystemExit("no Chromium on PATH: apt install chromium")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "agentledger-demo.db"
        ok("demo", "--db", str(path))
        with (
            Ledger.open(path, migrate=False, read_only=True) as ledger,
            served(create_app(ledger)) as base,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=executable, args=FLAGS)
            page = browser.new_page(viewport=VIEWPORT, color_scheme="light")
            shoot(page, base, folder)
            browser.close()


def shoot(page: Any, base: str, folder: Path) -> None:
    """The listing, the demo's trip with a subagent unfolded, the run tree above that
    subagent, the analytics: each saved as it shows."""
    page.goto(base + "/")
    save(page, folder / "ui-conversations.png")
    page.get_by_role("link", name="A trip to Lisbon").click()
    spawning = page.locator("details.run:has(.subagent)").first
    spawning.locator("> summary").click()
    tool = spawning.locator("details.tool:has(.subagent)").first
    tool.locator("> summary").click()
    child = tool.locator(".subagent details.run").first
    child.locator("> summary").click()
    spawning.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -80)")
    save(page, folder / "ui-conversation.png")
    child.locator("> summary a.id").first.click()
    page.wait_for_selector("ul.tree li.current")
    page.locator("p.meta a.id[href^='/r/']").last.click()  # up to the root of its tree
    page.wait_for_selector("ul.tree ul")
    save(page, folder / "ui-run.png")
    page.goto(base + "/analytics")
    save(page, folder / "ui-analytics.png")


def save(page: Any, path: Path) -> None:
    page.screenshot(path=str(path))
    print(f"{path} ({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
