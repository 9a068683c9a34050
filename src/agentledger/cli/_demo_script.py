"""The demo's travel assistant, offline: its three tools, and the steps its scripted models take.

Each scripted step is a function of the request, so the answers are built from the real tool
results the model was sent. The models stream their text in small chunks, a little apart, so
the demo shows answers arriving as a provider's do.
"""

from __future__ import annotations

import json

from pydantic import JsonValue

from .._core import tool
from .._loop import SubagentSpec
from .._values import InferenceRequest, InferenceResponse, Role, ToolCall, Usage
from ..llm import Price, PriceTable, ScriptedLLM, ScriptItem

CHUNK_SIZE = 6
"""Characters per streamed chunk of the scripted models' text."""
CHUNK_DELAY = 0.015
"""Seconds between two chunks when the demo runs (its whole text streams in about 3 s)."""

SYSTEM_PROMPT = "You are a travel assistant. Use the tools; quote prices in euros."

_WEATHER = {"lisbon": "24°C, sunny, light wind from the Atlantic"}
_HOTELS = {
    "lisbon": [
        {"name": "Casa do Largo", "tier": "mid-range", "usd_per_night": 142},
        {"name": "Hotel Miradouro", "tier": "mid-range", "usd_per_night": 128},
        {"name": "Palácio Sol", "tier": "luxury", "usd_per_night": 390},
    ]
}
_USD_TO_EUR = 0.92


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name, in English.
    """
    return _WEATHER.get(city.lower(), "no forecast available")


@tool
def search_hotels(city: str, nights: int, tier: str = "mid-range") -> list[dict[str, object]]:
    """Hotels in a city with their price per night in US dollars.

    Args:
        city: The city name, in English.
        nights: How many nights the stay lasts.
        tier: "budget", "mid-range" or "luxury".
    """
    found = [h for h in _HOTELS.get(city.lower(), []) if h["tier"] == tier]
    return [
        {**h, "nights": nights, "usd_total": int(str(h["usd_per_night"])) * nights} for h in found
    ]


@tool
def convert_currency(amount: float, from_currency: str, to_currency: str) -> str:
    """Convert an amount of money between USD and EUR.

    Args:
        amount: How much money.
        from_currency: ISO code of the currency of ``amount``.
        to_currency: ISO code of the currency wanted.
    """
    pair = (from_currency.upper(), to_currency.upper())
    if pair == ("USD", "EUR"):
        return f"{amount * _USD_TO_EUR:.2f} EUR"
    if pair == ("EUR", "USD"):
        return f"{amount / _USD_TO_EUR:.2f} USD"
    raise ValueError(f"no exchange rate for {pair[0]} to {pair[1]}")


def _tool_result(request: InferenceRequest, tool_name: str) -> str:
    """The most recent result of ``tool_name`` among the messages the model was sent."""
    for message in reversed(tuple(request.messages)):
        if message.role is Role.TOOL and message.name == tool_name:
            return message.content
    raise LookupError(f"the model was not shown a result of {tool_name}")


def _usage(request: InferenceRequest, output_tokens: int) -> Usage:
    """Plausible token counts: about four characters a token for what the model was sent."""
    sent = sum(
        len(m.content) + len(json.dumps([c.arguments for c in m.tool_calls]))
        for m in request.messages
    )
    sent += sum(len(t.model_dump_json()) for t in request.tools)
    return Usage(input_tokens=sent // 4 + 12, output_tokens=output_tokens)


def _call(
    request: InferenceRequest, text: str, calls: list[ToolCall], output_tokens: int
) -> InferenceResponse:
    return InferenceResponse(
        content=text,
        tool_calls=calls,
        usage=_usage(request, output_tokens),
        finish_reason="tool_calls",
    )


def _cheapest(request: InferenceRequest) -> dict[str, JsonValue]:
    hotels: list[dict[str, JsonValue]] = json.loads(_tool_result(request, "search_hotels"))
    return min(hotels, key=lambda h: int(str(h["usd_total"])))


def travel_script() -> list[ScriptItem]:
    """Two turns. Turn 1: weather and hotels in parallel, a conversion, the answer.
    Turn 2: a new search, a conversion with a malformed argument (fed back as an error), the
    corrected call, the answer."""

    def t1_search(r: InferenceRequest) -> InferenceResponse:
        return _call(
            r,
            "I'll check the weather and mid-range hotels in Lisbon.",
            [
                ToolCall(id="call_w1", name="get_weather", arguments={"city": "Lisbon"}),
                ToolCall(
                    id="call_h1", name="search_hotels", arguments={"city": "Lisbon", "nights": 2}
                ),
            ],
            46,
        )

    def t1_convert(r: InferenceRequest) -> InferenceResponse:
        best = _cheapest(r)
        args: dict[str, JsonValue] = {
            "amount": best["usd_total"],
            "from_currency": "USD",
            "to_currency": "EUR",
        }
        return _call(r, "", [ToolCall(id="call_c1", name="convert_currency", arguments=args)], 28)

    def t1_answer(r: InferenceRequest) -> InferenceResponse:
        best, eur = _cheapest(r), _tool_result(r, "convert_currency")
        text = (
            f"Lisbon next Friday: {_tool_result(r, 'get_weather')}. The best mid-range option is "
            f"{best['name']}: two nights for about {eur} (${best['usd_total']})."
        )
        reasoning = "Two hotels match; the cheaper total wins. Converted at the tool's rate."
        return InferenceResponse(
            content=text, reasoning=reasoning, usage=_usage(r, 58), finish_reason="stop"
        )

    def t2_search(r: InferenceRequest) -> InferenceResponse:
        args: dict[str, JsonValue] = {"city": "Lisbon", "nights": 3}
        return _call(r, "", [ToolCall(id="call_h2", name="search_hotels", arguments=args)], 24)

    def t2_bad_convert(r: InferenceRequest) -> InferenceResponse:
        args: dict[str, JsonValue] = {
            "amount": "three nights' worth",
            "from_currency": "USD",
            "to_currency": "EUR",
        }
        return _call(r, "", [ToolCall(id="call_c2", name="convert_currency", arguments=args)], 27)

    def t2_convert(r: InferenceRequest) -> InferenceResponse:
        args: dict[str, JsonValue] = {
            "amount": _cheapest(r)["usd_total"],
            "from_currency": "USD",
            "to_currency": "EUR",
        }
        return _call(
            r,
            "The amount must be a number; retrying.",
            [ToolCall(id="call_c3", name="convert_currency", arguments=args)],
            31,
        )

    def t2_answer(r: InferenceRequest) -> InferenceResponse:
        best, eur = _cheapest(r), _tool_result(r, "convert_currency")
        text = f"Three nights at {best['name']} come to about {eur} (${best['usd_total']})."
        return InferenceResponse(content=text, usage=_usage(r, 22), finish_reason="stop")

    return [t1_search, t1_convert, t1_answer, t2_search, t2_bad_convert, t2_convert, t2_answer]


def coordinator_script() -> list[ScriptItem]:
    """Turn 3: the assistant delegates the research, then the review, then answers."""

    def research(r: InferenceRequest) -> InferenceResponse:
        task = (
            "Weather in Lisbon next Friday, and the cheapest mid-range hotel for 3 nights, in EUR."
        )
        call = ToolCall(
            id="call_r3", name="spawn_subagent", arguments={"subagent": "researcher", "task": task}
        )
        return _call(r, "I'll have the researcher gather the facts.", [call], 38)

    def review(r: InferenceRequest) -> InferenceResponse:
        task = f"Check this trip plan before the user books it: {_tool_result(r, 'spawn_subagent')}"
        call = ToolCall(
            id="call_v3", name="spawn_subagent", arguments={"subagent": "reviewer", "task": task}
        )
        return _call(r, "", [call], 41)

    def answer(r: InferenceRequest) -> InferenceResponse:
        results = [
            m.content for m in r.messages if m.role is Role.TOOL and m.name == "spawn_subagent"
        ]
        text = f"Here is the plan. {results[-2]} The reviewer says: {results[-1]}"
        return InferenceResponse(content=text, usage=_usage(r, 64), finish_reason="stop")

    return [research, review, answer]


def _researcher_script() -> list[ScriptItem]:
    """The researcher: weather and hotels at once, a conversion, its findings."""

    def lookup(r: InferenceRequest) -> InferenceResponse:
        calls = [
            ToolCall(id="r_w", name="get_weather", arguments={"city": "Lisbon"}),
            ToolCall(id="r_h", name="search_hotels", arguments={"city": "Lisbon", "nights": 3}),
        ]
        return _call(r, "", calls, 40)

    def convert(r: InferenceRequest) -> InferenceResponse:
        args: dict[str, JsonValue] = {
            "amount": _cheapest(r)["usd_total"],
            "from_currency": "USD",
            "to_currency": "EUR",
        }
        return _call(r, "", [ToolCall(id="r_c", name="convert_currency", arguments=args)], 26)

    def findings(r: InferenceRequest) -> InferenceResponse:
        best = _cheapest(r)
        text = (
            f"Weather: {_tool_result(r, 'get_weather')}. Cheapest mid-range hotel: {best['name']}, "
            f"3 nights for {_tool_result(r, 'convert_currency')} (${best['usd_total']})."
        )
        return InferenceResponse(content=text, usage=_usage(r, 44), finish_reason="stop")

    return [lookup, convert, findings]


def _reviewer_script() -> list[ScriptItem]:
    def verdict(r: InferenceRequest) -> InferenceResponse:
        text = "The total matches three nights at the quoted rate; fine to book."
        return InferenceResponse(content=text, usage=_usage(r, 19), finish_reason="stop")

    return [verdict]


DEMO_PRICES = PriceTable.default().with_prices(
    {
        "scripted-travel-model": Price(input=0.15, output=0.60),
        "scripted-research-model": Price(input=0.40, output=1.60),
        "scripted-review-model": Price(input=1.00, output=5.00),
    },
    version="demo",
)
"""Made-up prices (US dollars per million tokens) for the scripted models, so that the demo's
steps have a cost the way a real provider's do."""


def scripted(
    script: list[ScriptItem], model: str, prices: PriceTable | None, chunk_delay: float
) -> ScriptedLLM:
    """A scripted model that streams its text in chunks, ``chunk_delay`` seconds apart."""
    return ScriptedLLM(
        script, model=model, prices=prices, chunk_size=CHUNK_SIZE, chunk_delay=chunk_delay
    )


def team(
    prices: PriceTable | None = DEMO_PRICES, *, chunk_delay: float = 0.0
) -> list[SubagentSpec]:
    """The subagents the assistant may delegate to: a researcher with tools, a reviewer."""
    return [
        SubagentSpec(
            name="researcher",
            description="Looks up weather, hotels and prices with its tools; reports facts.",
            system_prompt="You research trips. Use your tools; report only facts, prices in EUR.",
            tools=[get_weather, search_hotels, convert_currency],
            llm=scripted(_researcher_script(), "scripted-research-model", prices, chunk_delay),
        ),
        SubagentSpec(
            name="reviewer",
            description="Checks a plan for mistakes before the user acts on it.",
            system_prompt="You review travel plans. Say what is wrong, or that it is fine.",
            llm=scripted(_reviewer_script(), "scripted-review-model", prices, chunk_delay),
        ),
    ]
