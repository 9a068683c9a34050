"""Section 19: the viewer (``agentledger ui``) served as a process and read by Debian's Chromium,
headless, through Playwright, on a ledger of 100,000 conversations and a million steps (the
synthetic ledger of ``bench/_synthetic.py``) with one 1,000-turn conversation recorded through
the public API.

Each page's times are the browser's own (Navigation Timing): the first byte is
``responseStart - requestStart``, the rendered page ``loadEventEnd - startTime``. A live page's
delay is the time between a step's commit in another process (``time.time()`` once the step
returned) and the moment the page showed it (``performance.timeOrigin + performance.now()``
in a ``MutationObserver``): the same machine clock, both in Unix milliseconds.

Skipped, with the reason in the report, where no Chromium or no Playwright is found.
"""

from __future__ import annotations

import contextlib
import re
import socket
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from agentledger import Usage
from agentledger.ledger import Ledger

from ._browser import FLAGS, find_chromium, unavailable
from ._common import Sizes
from ._report import Section, seconds
from ._synthetic import build

if TYPE_CHECKING:
    from playwright.sync_api import Page


class Plan(NamedTuple):
    """The ledger's size, the long conversation's turns, the page loads timed and the live run
    (its steps, the pause between them, the streams open beside the measured page)."""

    runs: int
    steps: int
    turns: int
    reps: int
    live_steps: int
    pause: float
    streams: int


PLANS = {
    # runs: the synthetic ledger gives about 0.864 conversations a run (a subagent's run has a
    # conversation of its own), so 115,700 runs make 100,000 conversations.
    "quick": Plan(2_000, 20_000, 100, reps=3, live_steps=5, pause=0.3, streams=9),
    "default": Plan(115_700, 1_000_000, 1_000, reps=7, live_steps=20, pause=0.3, streams=49),
    "full": Plan(115_700, 1_000_000, 1_000, reps=15, live_steps=40, pause=0.3, streams=49),
}
TARGET_PAGE, TARGET_LIVE = "< 200 ms", "< 1 s"
WAIT_MS = 60_000

TIMING = """() => {
    const n = performance.getEntriesByType("navigation")[0];
    return [n.responseStart - n.requestStart, n.loadEventEnd - n.startTime];
}"""
LOADED = """() => {
    const n = performance.getEntriesByType("navigation")[0];
    return n !== undefined && n.loadEventEnd > 0;
}"""
OBSERVE = """() => {
    window.seen = [];
    const count = () => document.querySelectorAll("li.step").length;
    window.seen.push([performance.timeOrigin + performance.now(), count()]);
    new MutationObserver(() => {
        window.seen.push([performance.timeOrigin + performance.now(), count()]);
    }).observe(document.body, { childList: true, subtree: true });
}"""
"""Each change of the page: when (Unix milliseconds) and how many steps it then shows."""

WRITER = """
import sys, time
from agentledger import Usage
from agentledger.ledger import Ledger

steps, pause = int(sys.argv[2]), float(sys.argv[3])
with Ledger.open(sys.argv[1]) as ledger:
    turn = ledger.turn(user="Count slowly", agent_name="counter", model="gpt-4o")
    turn.begin()
    print(turn.conversation_id, flush=True)
    sys.stdin.readline()
    for n in range(steps):
        time.sleep(pause)
        turn.step(f"counted {n}", usage=Usage(input_tokens=5, output_tokens=1))
        print(time.time() * 1000, flush=True)
    turn.answer("done")
"""
"""A run recorded by another process, a step every ``pause`` seconds once told to start; the
Unix time in milliseconds after each step's commit."""


def long_conversation(path: Path, turns: int) -> str:
    """A conversation of ``turns`` turns, each a tool-calling step and an answer, recorded
    through ``Ledger.turn``; its id."""
    with Ledger.open(path) as ledger:
        conversation = ledger.create_conversation(title="A long conversation").id
        usage = Usage(input_tokens=100, output_tokens=20)
        for n in range(turns):
            with ledger.turn(
                user=f"question {n}", conversation_id=conversation, agent_name="long", model="m"
            ) as turn:
                turn.step(f"thinking about {n}", usage=usage)
                turn.answer(f"answer {n}", usage=usage)
    return conversation


@contextlib.contextmanager
def served(path: Path) -> Iterator[str]:
    """``agentledger ui --port 0`` on ``path`` in a process of its own; the address it prints."""
    command = [sys.executable, "-m", "agentledger", "--db", str(path), "ui", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            found = None
            while found is None and (line := process.stdout.readline()):
                found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            if found is None:
                raise RuntimeError(f"agentledger ui stopped before it listened ({process.wait()})")
            yield found[1]
        finally:
            process.terminate()
            process.wait(timeout=30)


def page_times(page: Page, address: str, reps: int) -> tuple[list[float], list[float]]:
    """The first byte and the rendered page, in seconds, of ``reps`` loads after one warm-up."""
    first, rendered = [], []
    for rep in range(reps + 1):
        page.goto(address)
        page.wait_for_function(LOADED)
        byte, load = page.evaluate(TIMING)
        if rep:
            first.append(byte / 1000)
            rendered.append(load / 1000)
    return first, rendered


class Streams:
    """Plain SSE clients on ``/events``, each reading its stream in a thread until closed."""

    def __init__(self, address: str, count: int) -> None:
        host, port = re.findall(r"//([\d.]+):(\d+)/", address)[0]
        self.received = [0] * count
        self.sockets = [socket.create_connection((host, int(port))) for _ in range(count)]
        self.threads = [
            threading.Thread(target=self._read, args=(n,), daemon=True) for n in range(count)
        ]
        for sock, thread in zip(self.sockets, self.threads, strict=True):
            sock.sendall(
                b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
            )
            thread.start()

    def _read(self, n: int) -> None:
        with contextlib.suppress(OSError):
            while chunk := self.sockets[n].recv(65536):
                self.received[n] += chunk.count(b"event: changes")

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self.threads:
            thread.join(timeout=5)


def live_delays(page: Page, address: str, path: Path, plan: Plan) -> tuple[list[float], int]:
    """Seconds from each step's commit to the page showing it, with ``plan.streams`` other
    streams open; and how many of those streams were told of changes."""
    command = [sys.executable, "-c", WRITER, str(path), str(plan.live_steps), str(plan.pause)]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) as writer:
        assert writer.stdin is not None and writer.stdout is not None
        streams = Streams(address, plan.streams)
        try:
            conversation = writer.stdout.readline().strip()
            page.goto(f"{address}c/{conversation}")
            page.wait_for_function("() => document.body.dataset.live === 'yes'")
            page.evaluate(OBSERVE)
            base = page.evaluate("() => window.seen[0][1]")
            writer.stdin.write("go\n")
            writer.stdin.flush()
            committed = [float(writer.stdout.readline()) for _ in range(plan.live_steps)]
            last = f"() => document.querySelectorAll('li.step').length >= {base + plan.live_steps}"
            page.wait_for_function(last)
            seen: list[list[float]] = page.evaluate("() => window.seen")
        finally:
            writer.stdin.close()
            writer.wait(timeout=60)
            streams.close()
    delays = [
        (next(at for at, count in seen if count >= base + n + 1) - when) / 1000
        for n, when in enumerate(committed)
    ]
    return delays, sum(1 for told in streams.received if told)


def skipped(reason: str) -> Section:
    return Section(TITLE, ABOUT, notes=[f"Skipped: {reason}."])


TITLE = "19. The viewer in a browser"
ABOUT = (
    "`agentledger ui --port 0` served as a process on a synthetic SQLite ledger, read by "
    "Chromium headless through Playwright: each page's time to first byte and to a rendered page "
    "(Navigation Timing), and the delay from a step committed by another process to its "
    "appearance in an open page, with other pages' event streams open."
)


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    return [run_plan(PLANS[sizes.name], tmp)]


def run_plan(plan: Plan, tmp: Path) -> Section:
    reason = unavailable()
    if reason is not None:
        return skipped(reason)
    from playwright.sync_api import sync_playwright

    path = tmp / "viewer.db"
    built = build(path, runs=plan.runs, steps=plan.steps)
    long = long_conversation(path, plan.turns)
    with served(path) as address, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=find_chromium(), headless=True, args=FLAGS, timeout=WAIT_MS
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT_MS)
            listing = page_times(page, address, plan.reps)
            conversation = page_times(page, f"{address}c/{long}", plan.reps)
            shown = page.locator("section.turn").count()
            delays, told = live_delays(page, address, path, plan)
        finally:
            browser.close()
    median = statistics.median
    named = f"{built.rows['conversations']:,} conversations, {built.rows['step_executions']:,}"
    return Section(
        TITLE,
        ABOUT,
        rows=[
            seconds("`/`: first byte", median(listing[0]), TARGET_PAGE),
            seconds("`/`: rendered page", median(listing[1]), TARGET_PAGE, headline=True),
            seconds(
                f"`/c/…` of {plan.turns:,} turns: first byte", median(conversation[0]), TARGET_PAGE
            ),
            seconds(
                f"`/c/…` of {plan.turns:,} turns: rendered page",
                median(conversation[1]),
                TARGET_PAGE,
                headline=True,
            ),
            seconds(
                f"a committed step shown in an open page, {plan.streams + 1} pages open",
                median(delays),
                TARGET_LIVE,
                headline=True,
            ),
            seconds("the same, the slowest of the steps", max(delays), TARGET_LIVE),
        ],
        notes=[
            f"The ledger: {named} steps (synthetic, built in {built.seconds:.0f} s), and one "
            f"conversation of {plan.turns:,} turns recorded through `Ledger.turn` (its page shows "
            f"{shown:,} of them); "
            f"{plan.reps} loads of each page after a warm-up, medians.",
            f"The live run: {plan.live_steps} steps, one every {plan.pause:g} s, written by "
            f"another process; the page open on its conversation, {plan.streams} plain "
            f"event-stream clients on `/events` beside it ({told} of them were told of the "
            "changes). The viewer's one poller asks the ledger what changed every 0.25 s.",
        ],
    )
