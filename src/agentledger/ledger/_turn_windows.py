"""A window of a conversation's turns, read without the rest of it: the last turns (or the last
before a given message) and the runs that wrote them with their steps. A conversation of a
thousand turns is shown from its end, as a chat is, in a few statements that read only the
window's rows, found through the ``(conversation_id, section, seq)`` index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._values import Role, StepExecution
from ._queries import SEEN_SQL, ConversationTurn, steps_where, turns_of
from ._row_mapping import in_sequence
from ._sql import Reads, listed, select_rows


class TurnWindow(BaseModel):
    """Turns of a conversation as the user saw it (``Ledger.latest_turns``), in order."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    turns: tuple[ConversationTurn, ...]
    first_seq: int
    """The ``seq`` of the window's first message: 0 when the window begins the conversation;
    else give it as ``before_seq`` to read the turns before it."""


def _first_of_window(before: int | None) -> str:
    bound = "AND seq < :before " if before is not None else ""
    return (
        "SELECT seq FROM conversation_messages WHERE conversation_id = :c "
        f"AND section IN ({SEEN_SQL}) AND role = '{Role.USER.value}' {bound}"
        "ORDER BY seq DESC LIMIT 1 OFFSET :skip"
    )


def turn_window(reads: Reads, conversation_id: str, last: int, before: int | None) -> TurnWindow:
    """The last ``last`` turns of the conversation (its full id) before the message ``before``
    (``None``: its end), each beginning where its user spoke."""
    params: dict[str, Any] = {"c": conversation_id, "before": before, "skip": last - 1}
    found = reads.rows(_first_of_window(before), params)
    start = found[0]["seq"] if found else 0
    bound = "AND seq < :before " if before is not None else ""
    sql = (
        select_rows("conversation_messages")
        + f"WHERE conversation_id = :c AND seq >= :start {bound}ORDER BY seq"
    )
    rows = reads.rows(sql, {**params, "start": start}, "conversation_messages")
    in_sequence(rows, "seq", start, f"conversation {conversation_id}")
    return TurnWindow(turns=tuple(turns_of(rows)), first_seq=start)


def steps_of_runs(reads: Reads, run_ids: Sequence[str]) -> dict[str, tuple[StepExecution, ...]]:
    """The steps of the runs ``run_ids``, by run id, in two statements however many runs."""
    if not run_ids:
        return {}
    names, params = listed("run", run_ids)
    return steps_where(reads, f"WHERE run_id IN ({names}) ", params)


def runs_condition(run_ids: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The condition keeping the runs ``run_ids`` (``AND id IN (...)``), and its parameters."""
    names, params = listed("run", run_ids)
    return (f"AND id IN ({names}) " if run_ids else "AND 1 = 0 "), params
