"""An ``llm`` logs database (``llm logs path``): each llm conversation a conversation; each
prompt the user typed begins a turn, and the calls that only carried tool results back to the
model (llm's tool chains) are further steps of it; the usage of each call on its step, priced
from the price table for its model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._values import ToolCall
from ..errors import ImportSourceError
from ._history import ModelCall, SourceConversation, SourceTurn, ToolRun
from ._llm_calls import LlmCall, ToolOutput, legacy_calls, store_calls
from ._sources import columns

if TYPE_CHECKING:
    from sqlite_utils import Database

KNOWN_MIGRATIONS = frozenset(
    (
        "m001_initial",
        "m002_id_primary_key",
        "m003_chat_id_foreign_key",
        "m004_column_order",
        "m004_drop_provider",
        "m005_debug",
        "m006_new_logs_table",
        "m007_finish_logs_table",
        "m008_reply_to_id_foreign_key",
        "m008_fix_column_order_in_logs",
        "m009_delete_logs_table_if_empty",
        "m010_create_new_log_tables",
        "m011_fts_for_responses",
        "m012_attachments_tables",
        "m013_usage",
        "m014_schemas",
        "m015_fragments_tables",
        "m016_fragments_table_pks",
        "m017_tools_tables",
        "m017_tools_plugin",
        "m018_tool_instances",
        "m019_resolved_model",
        "m020_tool_results_attachments",
        "m021_tool_results_exception",
        "m022_response_reasoning",
        "m023_message_store",
        "m024_tool_instance_references",
        "m025_turn_tools_instance_backfill",
        "m026_message_tree_view",
        "m027_turns_response_json",
    )
)
"""The schema migrations of llm's logs up to 0.36, the newest this importer reads: a database
that a newer llm migrated further is refused rather than misread."""
FIRST_READ = "m010_create_new_log_tables"
"""The migration that made the ``responses`` table (llm 0.4): older logs are not read."""
RESPONSE_KEY = "llm_response"
"""In an imported step's metadata: the id of llm's response (or turn) it was."""


class LlmLogs:
    """simonw's ``llm`` logs databases, up to llm 0.36."""

    kind = "llm"
    called = "an llm logs database"
    records_usage = True

    def recognises(self, db: Database) -> bool:
        return {"name", "applied_at"} <= columns(db, "_llm_migrations")

    def check_version(self, db: Database, path: Path) -> None:
        applied = {str(row["name"]) for row in db.query("select name from _llm_migrations")}
        newer = sorted(applied - KNOWN_MIGRATIONS)
        if newer:
            raise ImportSourceError(
                f"{path} is {self.called} of a newer llm than this importer reads (llm up to "
                f"0.36): its schema has the migrations {', '.join(newer)}. Upgrade agentledger"
            )
        if FIRST_READ not in applied:
            raise ImportSourceError(
                f"{path} is {self.called} of an llm older than 0.4 (no responses table): run "
                "any newer llm once (`llm logs`) to migrate it, then import it"
            )

    def count(self, db: Database) -> int:
        return len(_conversations(db))

    def conversations(self, db: Database) -> Iterator[SourceConversation]:
        calls: dict[str, list[LlmCall]] = {}
        for call in [*legacy_calls(db), *store_calls(db)]:
            calls.setdefault(call.conversation_id, []).append(call)
        names = _conversations(db)
        for key, held in sorted(calls.items(), key=lambda kv: min(c.at for c in kv[1])):
            held.sort(key=lambda c: (c.at, c.id))
            yield SourceConversation(key=key, turns=turns_of(held), title=names.get(key))


def _conversations(db: Database) -> dict[str, str | None]:
    """The conversations' names by id (legacy conversations, then 0.36's threads)."""
    names: dict[str, str | None] = {}
    for table in ("conversations", "threads"):
        if db[table].exists():
            for row in db.query(f"select id, name from [{table}]"):
                names.setdefault(str(row["id"]), row["name"])
    return names


def turns_of(calls: list[LlmCall]) -> tuple[SourceTurn, ...]:
    """A conversation's calls as turns: a call with a prompt begins one, a call that only
    carried tool results goes on with the one before."""
    groups: list[list[LlmCall]] = []
    for call in calls:
        if call.prompt is not None or not groups:
            groups.append([call])
        else:
            groups[-1].append(call)
    return tuple(_turn(group) for group in groups)


def _turn(group: list[LlmCall]) -> SourceTurn:
    following = [*group[1:], None]
    model_calls = tuple(
        _model_call(call, after) for call, after in zip(group, following, strict=True)
    )
    first = group[0]
    return SourceTurn(key=first.id, user=first.prompt or "", at=first.at, calls=model_calls)


def _model_call(call: LlmCall, after: LlmCall | None) -> ModelCall:
    """``call`` as a step, each tool call with the result the next call carried back."""
    results = after.results if after is not None else ()
    tools = tuple(
        _ran(tool_call, _result_of(tool_call.id, n, results), after)
        for n, tool_call in enumerate(call.tool_calls)
    )
    return ModelCall(
        content=call.content,
        at=call.ended,
        started_at=call.at,
        tools=tools,
        usage=call.usage,
        model=call.model,
        reasoning=call.reasoning,
        metadata={RESPONSE_KEY: call.id},
    )


def _result_of(call_id: str, n: int, results: tuple[ToolOutput, ...]) -> ToolOutput | None:
    """The result of the call: by its id, or by position when llm logged no ids."""
    for result in results:
        if result.call_id == call_id:
            return result
    unnamed = [r for r in results if r.call_id is None]
    return unnamed[n] if n < len(unnamed) else None


def _ran(tool_call: ToolCall, result: ToolOutput | None, after: LlmCall | None) -> ToolRun:
    if result is None:
        return ToolRun(tool_call, None)
    return ToolRun(tool_call, result.output, error=result.exception, at=after.at if after else None)
