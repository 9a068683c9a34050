"""The demo's prompt-caching turns: ``AnthropicMessages`` against a loopback server that answers
as Anthropic's Messages API does and counts its prompt cache as the API does.

The server reads the ``cache_control`` breakpoints the provider placed. A prompt is a sequence
of blocks (the tools, the system prompt, then each message's content blocks); at each
breakpoint the prefix that ends there is written to the cache, and a later request reads the
longest prefix, ending at one of its block boundaries, that was written before. The tokens
after the last breakpoint are plain input. A prefix shorter than the model's minimum (1,024
tokens for Claude Sonnet) is not cached. Tokens are counted as a character-based stand-in for
the tokenizer (four characters a token), so the figures are the API's arithmetic on
approximate counts: nothing here is hard-coded to show a saving.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from .._builder import AgentBuilder
from .._recording import RunResult
from ..ledger import Ledger
from ..llm import AnthropicMessages
from ._demo_file import demo_conversation
from ._demo_script import convert_currency, get_weather, search_hotels

MINIMUM_CACHEABLE_TOKENS = 1024
"""The shortest prefix Claude Sonnet caches; a shorter one is sent as plain input."""
CHARACTERS_PER_TOKEN = 4


def tokens(block: Any) -> int:
    """A block's tokens: its JSON without the cache mark, four characters a token."""
    return _count(_text(block))


def _text(block: Any) -> str:
    """What the cache compares and counts of a block: its JSON without the cache mark."""
    return json.dumps(_unmarked(block), ensure_ascii=False, sort_keys=True)


def _count(text: str) -> int:
    return -(-len(text) // CHARACTERS_PER_TOKEN)


def prompt_blocks(body: Mapping[str, Any]) -> list[tuple[Any, bool]]:
    """The request's prompt as the cache sees it, in order: each block and whether it carries
    a ``cache_control`` breakpoint. A message's blocks carry its role."""
    system = body.get("system") or []
    blocks: list[tuple[Any, bool]] = [(t, "cache_control" in t) for t in body.get("tools") or []]
    if isinstance(system, str):
        blocks.append((system, False))
    else:
        blocks += [(b, "cache_control" in b) for b in system]
    for message in body.get("messages") or []:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks += [({"role": message["role"], **b}, "cache_control" in b) for b in content]
    return blocks


class PromptCache:
    """The entries written so far: the hash of each cached prefix."""

    def __init__(self) -> None:
        self.entries: set[str] = set()
        self.lock = threading.Lock()

    def usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The input side of a response's ``usage`` for ``body``, writing what it marks."""
        blocks = prompt_blocks(body)
        hashes, sizes, digest, size = [], [], hashlib.sha256(), 0
        for block, _ in blocks:
            text = _text(block)
            digest.update(text.encode())
            size += _count(text)
            hashes.append(digest.copy().hexdigest())
            sizes.append(size)
        marked = [i for i, (_, mark) in enumerate(blocks) if mark]
        last = marked[-1] if marked else -1
        with self.lock:
            read = max((sizes[i] for i in range(last + 1) if hashes[i] in self.entries), default=0)
            for i in marked:
                if sizes[i] >= MINIMUM_CACHEABLE_TOKENS:
                    self.entries.add(hashes[i])
        cached_end = sizes[last] if last >= 0 and sizes[last] >= MINIMUM_CACHEABLE_TOKENS else 0
        written = max(cached_end - read, 0)
        one_hour = any(
            isinstance(b, dict) and (b.get("cache_control") or {}).get("ttl") == "1h"
            for b, _ in blocks
        )
        return {
            "input_tokens": (sizes[-1] if sizes else 0) - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 0 if one_hour else written,
                "ephemeral_1h_input_tokens": written if one_hour else 0,
            },
        }


def _unmarked(block: Any) -> Any:
    return (
        {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(block, dict)
        else block
    )


class CachingServer:
    """A loopback Messages API: each request is answered with the next of ``answers`` and the
    usage :class:`PromptCache` counts for it."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.cache = PromptCache()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        text = self.answers.pop(0) if self.answers else "Done."
        return {
            "id": f"msg_demo_{len(self.answers)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": self.cache.usage(body) | {"output_tokens": tokens(text)},
        }


def _handler(owner: CachingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            answer = json.dumps(owner.reply(json.loads(self.rfile.read(length)))).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the demo prints what matters."""

    return Handler


@contextmanager
def caching_server(answers: list[str]) -> Iterator[CachingServer]:
    """A :class:`CachingServer` serving on loopback while the block runs."""
    served = CachingServer(answers)
    served.thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


MODEL = "claude-sonnet-4-5"
QUESTIONS = ("Which of the hotels on the list suit a family of four?", "And one with a pool?")
ANSWERS = [
    "Casa do Largo has family rooms for four, near the tram; Hotel Miradouro has two.",
    "Palácio Sol has the only pool on the list, an outdoor one open from May.",
]


def reference_prompt() -> str:
    """A system prompt long enough to cache (over 1,024 tokens): the assistant's instructions
    and the hotel notes it answers from, as an app would send with every turn."""
    notes = [
        f"- {name} ({city}): {tier}, {rooms} rooms, breakfast {breakfast}, {extra}."
        for city, hotels in _HOTEL_NOTES.items()
        for name, tier, rooms, breakfast, extra in hotels
    ]
    rules = "\n".join(f"{i}. {rule}" for i, rule in enumerate(_RULES, start=1))
    return (
        "You are a travel assistant for a small agency. Follow these rules:\n"
        f"{rules}\n\nHotel notes, checked this season:\n" + "\n".join(notes * 6)
    )


_RULES = (
    "Quote prices in euros, rounded to the euro, and say whether breakfast is included.",
    "Recommend at most three hotels, and say why each one fits the request.",
    "Mention accessibility, family rooms and pools only when the notes say so.",
    "Never promise availability: the agency confirms every booking by email.",
    "Keep answers under eighty words unless the traveller asks for more.",
)
_HOTEL_NOTES = {
    "Lisbon": [
        ("Casa do Largo", "mid-range", 24, "included", "family rooms for four, near tram 28"),
        ("Hotel Miradouro", "mid-range", 40, "extra", "two family rooms, roof terrace"),
        ("Palácio Sol", "luxury", 60, "included", "outdoor pool open May to October"),
    ],
    "Porto": [
        ("Ribeira Rooms", "budget", 12, "extra", "by the river, steep stairs, no lift"),
        ("Hotel Clérigos", "mid-range", 35, "included", "lift, step-free entrance"),
    ],
}


def cached_turns(ledger: Ledger, cache: Literal["5m", "1h"] | None) -> list[RunResult]:
    """Two turns of one conversation with the travel assistant on Claude Sonnet 4.5, through
    ``AnthropicMessages(cache=cache)`` against a :class:`CachingServer`, recorded in
    ``ledger``."""
    results: list[RunResult] = []
    with (
        caching_server(ANSWERS) as server,
        AnthropicMessages(MODEL, api_key="demo", base_url=server.url, cache=cache) as llm,
    ):
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_ledger(ledger)
            .with_name("travel-assistant-cached" if cache else "travel-assistant-uncached")
            .with_system_prompt(reference_prompt())
            .with_tools([get_weather, search_hotels, convert_currency])
            .build()
        )
        conversation_id = demo_conversation(ledger, f"Prompt caching {'on' if cache else 'off'}")
        for question in QUESTIONS:
            results.append(agent.run(question, conversation_id))
    return results
