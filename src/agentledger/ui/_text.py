"""How the viewer writes the ledger's values into a page: every text goes through Jinja's
escaping, after its control characters are written out (:func:`shown`); the few numbers,
times and costs have one wording each, shared with the command line where it has one."""

from __future__ import annotations

import json
import threading
import zlib
from datetime import datetime
from typing import Any
from urllib.parse import quote

from .._agents_sdk_items import SESSION_KEY
from .._values import Spend, cost_text, terminal_text

FOLD_AT = 400
"""Values longer than this many characters are folded: their beginning shown, the whole on
demand (a ``<details>`` element, no script)."""

_WRITERS = {
    "turn": "recording API",
    "langgraph": "LangGraph",
    "agentledger import": "import",
}
"""Who recorded a run, by its ``metadata["recorded_by"]``."""

_THROUGH_TURNS = {"pydantic-ai": "pydantic-ai", "adk": "ADK"}
"""The integrations that record through the recording API, by the agent name they give their
runs (agentledger.integrations.pydantic_ai and .adk)."""

_AGENTS_SDK = "openai-agents"
"""The agent name of the runs the OpenAI Agents SDK's session records (their metadata holds
the session's key)."""


HUE_COUNT = 9
"""How many colours agents and models are shown in: the analytics report's palette, which
``ui.css`` names ``hue-0`` to ``hue-8``."""


class Hues:
    """The colour each agent and each model is shown in (a number below :data:`HUE_COUNT`), the
    same on every page and in every chart of a viewer while it runs. A name takes the colour
    its own text picks (so it mostly keeps it from one run of the viewer to the next), unless
    another name of its kind holds it already: then the next free one, so that names seen
    together differ until more than :data:`HUE_COUNT` of a kind are shown."""

    def __init__(self) -> None:
        self._given: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()  # pages are written in several threads at once

    def of(self, name: str | None, kind: str = "agent") -> int:
        given = self._given.setdefault(kind, {})
        text = name or ""
        with self._lock:
            if text not in given:
                given[text] = self._free(text, set(given.values()))
            return given[text]

    @staticmethod
    def _free(name: str, taken: set[int]) -> int:
        first = zlib.crc32(name.encode()) % HUE_COUNT
        tried = ((first + step) % HUE_COUNT for step in range(HUE_COUNT))
        return next((hue for hue in tried if hue not in taken), first)


def shown(value: Any) -> Any:
    """Every value a template writes (Jinja's ``finalize``): a text with its control
    characters written as escapes (``\\x1b``), so that none reaches the page; Jinja then
    escapes its markup."""
    return terminal_text(value) if isinstance(value, str) else value


def path_part(value: str) -> str:
    """An id as one segment of an address: every character but letters, digits and ``-_.~``
    percent-encoded, slashes included (an id may hold any text)."""
    return quote(value, safe="")


def writer(agent_name: str | None, recorded_by: str | None, metadata: dict[str, Any]) -> str:
    """Who recorded a run, when the ledger knows it: the agent loop, the recording API, or a
    framework's store."""
    if recorded_by == "turn" and agent_name in _THROUGH_TURNS:
        return _THROUGH_TURNS[agent_name]
    if recorded_by is not None:
        return _WRITERS.get(recorded_by, recorded_by)
    if agent_name == _AGENTS_SDK and SESSION_KEY in metadata:
        return "Agents SDK"
    return "agentledger" if agent_name is not None else ""


def cost(spend: Spend) -> str:
    return cost_text(spend.cost_usd, fully_priced=spend.fully_priced)


def run_cost(run: Any) -> str:
    """A run's own cost, from its row (``cost_usd``, ``fully_priced``)."""
    return cost_text(run.cost_usd, fully_priced=run.fully_priced)


def milliseconds(value: float | None) -> str:
    if value is None:
        return "running"
    return f"{value:,.0f} ms" if value < 10_000 else f"{value / 1000:,.1f} s"


def time_text(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def iso(value: datetime | None) -> str:
    """A time as the ``datetime`` attribute of ``<time>`` takes it (the script shows it in the
    reader's own zone)."""
    return "" if value is None else value.isoformat()


def json_text(value: Any) -> str:
    """Arguments and other JSON values, indented, their text as it is (not ``\\u`` escapes)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def folded(text: str) -> bool:
    return len(text) > FOLD_AT


def beginning(text: str) -> str:
    """What a folded value shows before it is opened."""
    return text[:FOLD_AT] + "…"
