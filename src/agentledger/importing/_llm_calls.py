"""The model calls of an ``llm`` logs database, from either of the two stores llm has kept.

llm (simonw's command-line tool and library) logged each model call as a row of ``responses``
(its ``prompt`` and ``response``, with ``tool_calls`` and ``tool_results`` beside it) up to
0.35; from 0.36 on it logs a row of ``turns`` pointing into a content-addressed tree of
``messages`` and their ``parts``, and keeps the old tables as they were, for the history they
hold. A database used before and after holds both, and a conversation continued under 0.36
goes on in a thread of the same id. Both read here into one form, :class:`LlmCall`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._values import ToolCall, Usage
from ._history import utc

if TYPE_CHECKING:
    from sqlite_utils import Database


@dataclass(frozen=True)
class ToolOutput:
    """A tool result llm sent a model: which call it answers, and what it returned."""

    call_id: str | None
    name: str
    output: str
    exception: str | None = None


@dataclass(frozen=True)
class LlmCall:
    """One model call llm logged."""

    id: str
    conversation_id: str
    at: datetime
    """When it started."""
    ended: datetime
    prompt: str | None
    """What the user typed (None: the call carried only tool results)."""
    results: tuple[ToolOutput, ...]
    """The tool results it was sent: those of the calls the call before it made."""
    content: str
    tool_calls: tuple[ToolCall, ...]
    reasoning: str | None
    model: str | None
    usage: Usage | None


def legacy_calls(db: Database) -> Iterator[LlmCall]:
    """The calls of the ``responses`` table (llm up to 0.35)."""
    if not db["responses"].exists():
        return
    calls = _by_response(db, "tool_calls")
    results = _by_response(db, "tool_results")
    for row in db.query("select * from responses order by datetime_utc, id"):
        response_id = str(row["id"])
        made = [_legacy_call(c, n) for n, c in enumerate(calls.get(response_id, []))]
        yield LlmCall(
            id=response_id,
            conversation_id=str(row["conversation_id"] or response_id),
            at=utc(row["datetime_utc"]),
            ended=utc(row["datetime_utc"]) + timedelta(milliseconds=row["duration_ms"] or 0),
            prompt=row["prompt"] or None,
            results=tuple(_legacy_result(r) for r in results.get(response_id, [])),
            content=row["response"] or "",
            tool_calls=tuple(made),
            reasoning=row.get("reasoning") or None,
            model=row.get("resolved_model") or row["model"],
            usage=_usage(row.get("input_tokens"), row.get("output_tokens")),
        )


def _by_response(db: Database, table: str) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    if db[table].exists():
        for row in db.query(f"select * from [{table}] order by id"):
            rows.setdefault(str(row["response_id"]), []).append(row)
    return rows


def _legacy_call(row: Mapping[str, Any], n: int) -> ToolCall:
    arguments = _arguments(row["arguments"])
    return _tool_call(row["tool_call_id"], n, str(row["name"]), arguments)


def _legacy_result(row: Mapping[str, Any]) -> ToolOutput:
    return ToolOutput(
        row["tool_call_id"], str(row["name"]), row["output"] or "", row.get("exception")
    )


def _arguments(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _tool_call(call_id: Any, n: int, name: str, arguments: Any) -> ToolCall:
    """A tool call as the ledger holds it: arguments that are not a JSON object kept raw; a
    call llm logged without an id named by its position."""
    given = str(call_id) if call_id else f"call-{n}"
    if isinstance(arguments, dict):
        return ToolCall(id=given, name=name, arguments=arguments)
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=given, name=name, arguments={}, raw_arguments=raw)


def _usage(inputs: Any, outputs: Any) -> Usage | None:
    if inputs is None and outputs is None:
        return None
    return Usage(input_tokens=int(inputs or 0), output_tokens=int(outputs or 0))


# --- the message store (llm 0.36) ---------------------------------------------------------------


def store_calls(db: Database) -> Iterator[LlmCall]:
    """The calls of the ``turns`` table (llm 0.36), read through the message tree."""
    if not db["turns"].exists():
        return
    tree = {
        str(row["hash"]): (row["parent_hash"], str(row["role"]))
        for row in db.query("select hash, parent_hash, role from messages")
    }
    for row in db.query("select * from turns order by datetime_utc, id"):
        sent = _sent(tree, row["parent_message_hash"])
        said = _said(tree, row["tip_message_hash"], row["parent_message_hash"])
        parts = _parts(db, [*sent, *said])
        yield _store_call(row, [(tree[h][1], parts.get(h, [])) for h in sent], parts, said)


def _sent(tree: dict[str, tuple[Any, str]], tip: Any) -> list[str]:
    """The messages a call was sent that no call before it answered: those after the last
    assistant message of its input (the user's message, tool results), oldest first."""
    hashes: list[str] = []
    while tip is not None and tip in tree and tree[tip][1] != "assistant":
        hashes.append(tip)
        tip = tree[tip][0]
    return hashes[::-1]


def _said(tree: dict[str, tuple[Any, str]], tip: Any, parent: Any) -> list[str]:
    """The messages a call produced: from its tip back to its input's."""
    hashes: list[str] = []
    while tip is not None and tip != parent and tip in tree:
        hashes.append(tip)
        tip = tree[tip][0]
    return hashes[::-1]


def _parts(db: Database, hashes: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each message's parts as llm's dicts (type, text, and the rest of their payload)."""
    found: dict[str, list[dict[str, Any]]] = {}
    if not hashes:
        return found
    marks = ", ".join("?" for _ in hashes)
    query = f"select * from parts where message_hash in ({marks}) order by position"
    for row in db.query(query, hashes):
        part = json.loads(row["payload"]) if row["payload"] else {}
        part["type"] = row["type"]
        if row["text"] is not None:
            part["text"] = row["text"]
        elif "text_ref" in part:
            part["text"] = _text_of_refs(db, part.pop("text_ref"))
        found.setdefault(str(row["message_hash"]), []).append(part)
    return found


def _text_of_refs(db: Database, pieces: list[dict[str, Any]]) -> str:
    """Text llm stored as literal pieces and references to fragments, put back together."""
    texts = []
    for piece in pieces:
        if "literal" in piece:
            texts.append(str(piece["literal"]))
        else:
            rows = list(db.query("select content from fragments where id = ?", [piece["fragment"]]))
            texts.append(str(rows[0]["content"]) if rows else "")
    return "".join(texts)


def _store_call(
    row: Mapping[str, Any],
    sent: list[tuple[str, list[dict[str, Any]]]],
    parts: dict[str, list[dict[str, Any]]],
    said: list[str],
) -> LlmCall:
    typed = [p["text"] for role, ps in sent if role == "user" for p in ps if p["type"] == "text"]
    output = [part for h in said for part in parts.get(h, [])]
    results = [p for _, ps in sent for p in ps if p["type"] == "tool_result"]
    at = utc(row["datetime_utc"])
    return LlmCall(
        id=str(row["id"]),
        conversation_id=str(row["thread_id"] or row["id"]),
        at=at,
        ended=at + timedelta(milliseconds=row["duration_ms"] or 0),
        prompt="\n".join(typed) if typed else None,
        results=tuple(_store_result(p) for p in results),
        content="".join(p.get("text", "") for p in output if p["type"] == "text"),
        tool_calls=tuple(
            _tool_call(p.get("tool_call_id"), n, str(p.get("name")), p.get("arguments"))
            for n, p in enumerate(p for p in output if p["type"] == "tool_call")
        ),
        reasoning="\n".join(p["text"] for p in output if p["type"] == "reasoning" and p.get("text"))
        or None,
        model=row["resolved_model"] or row["model"],
        usage=_usage(row["input_tokens"], row["output_tokens"]),
    )


def _store_result(part: Mapping[str, Any]) -> ToolOutput:
    return ToolOutput(
        part.get("tool_call_id"),
        str(part.get("name")),
        str(part.get("output") or ""),
        part.get("exception"),
    )
