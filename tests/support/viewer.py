"""A ledger to look at in the viewer and ``agentledger ui`` serving it: what the browser tests
drive and the screenshots of ``docs/ui.md`` show (``make screenshots``).

The ledger is the demo's (``agentledger demo --db``), with a conversation in each of two
tenants and one whose every text is markup that would run if a page interpreted it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from agentledger import ToolCall, Usage
from agentledger.ledger import Ledger
from support.cli import Interactive, ok

HOSTILE = (
    "<script>window.ran = 'script'; alert('script')</script>",
    "\"><img src=x onerror=\"window.ran = 'img'; alert('img')\">",
    "<svg onload=\"window.ran = 'svg'\"></svg>",
    "javascript:window.ran='link'",
)
"""Markup that sets ``window.ran`` (and opens a dialog) if a page ever runs it."""
HOSTILE_TITLE = f"Hostile {HOSTILE[0]}"


def viewer_ledger(path: Path) -> dict[str, str]:
    """The demo's ledger at ``path``, with a conversation of tenant ``acme``, one of tenant
    ``other`` and the hostile one; their ids by name."""
    ok("demo", "--db", str(path))
    with Ledger.open(path) as ledger:
        with ledger.scoped("acme").turn(user="Plan our offsite", agent_name="planner") as ours:
            ours.answer("Lisbon in May.", usage=Usage(input_tokens=40, output_tokens=8))
        with ledger.scoped("other").turn(user="Their secret plan", agent_name="planner") as theirs:
            theirs.answer("Not for acme's eyes.")
        hostile = _hostile_turn(ledger)
    return {
        "acme": ours.conversation_id,
        "other": theirs.conversation_id,
        "hostile": hostile,
    }


def _hostile_turn(ledger: Ledger) -> str:
    calls = [
        ToolCall(id=f"c{n}", name="lookup", arguments={"q": text}) for n, text in enumerate(HOSTILE)
    ]
    conversation = ledger.create_conversation(title=HOSTILE_TITLE)
    with ledger.turn(
        user=HOSTILE[1],
        conversation_id=conversation.id,
        agent_name=HOSTILE[2],
        model=HOSTILE[3],
    ) as turn:
        step = turn.step(tool_calls=calls, reasoning=HOSTILE[0], usage=Usage(input_tokens=9))
        for n, text in enumerate(HOSTILE):
            step.tool_result(f"c{n}", text)
        turn.answer(" ".join(HOSTILE))
    return conversation.id


@contextlib.contextmanager
def viewer(path: Path, *options: str) -> Iterator[str]:
    """``agentledger ui`` on the ledger at ``path`` (any free port), in a process of its own;
    the address it prints. Stopped on exit."""
    served = Interactive("--db", str(path), "ui", "--port", "0", *options)
    try:
        served.wait_for("/\n", after=served.wait_for("agentledger ui: "))
        found = re.search(r"at (http://127\.0\.0\.1:\d+/)\n", served.output)
        assert found, served.output
        yield found[1]
    finally:
        served.close()
