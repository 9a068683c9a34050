"""The cache's run rollup, kept as a table: ``run_rollup``'s rows, brought up to date at every
sync, so that the cache's ``run_rollup`` and ``run_tree`` read a table instead of walking the
tree and summing a million steps at every query (most of their time over the copy).

Over the ledger itself the views compute everything (``sql/02_run_tree.sql``,
``sql/03_run_rollup.sql``); this module computes the same rows for the runs a sync touched,
and the cache's two views read them (:data:`VIEWS`). A run's row changes when its own row,
steps or tool calls change (its usage and its columns), when a run on its path changes (its
root, depth, path and agent names: a new, re-parented, renamed or deleted run changes its
whole subtree), and when a run below it changes (its inclusive sums). So a sync notes the runs
whose rows it replaced or deleted (:func:`note`, before and after: a step moved to another run
changes both), then :func:`refresh` rewrites only the rows of those runs, of the runs below
the moved ones, and of every run above them all. The first sync computes every row the same
way, from nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ledger.tables import USAGE_COLUMNS

if TYPE_CHECKING:
    import duckdb

TABLE = "agentledger_cache_run_rollup"
"""The table holding ``run_rollup``'s rows in the cache file."""
TOUCHED = "_rollup_touched"
"""The runs a sync touched (``moved``: the run's own row, else its steps or tool calls)."""
_MOVED, _CHANGED, _ROWS = "_rollup_moved", "_rollup_changed", "_rollup_rows"
_ABOVE, _FINAL = "_rollup_above", "_rollup_final"
"""What :func:`refresh` stages in the cache, dropped before it returns."""

KEYS = {"agent_runs": "id", "step_executions": "run_id", "tool_executions": "run_id"}
"""The tables whose rows make a run's row in the rollup, and the column naming that run."""

_TOKENS = USAGE_COLUMNS
_SUMS = ("steps", *_TOKENS, "cost_usd", "unpriced_steps", "tool_calls", "tool_errors")
"""What ``run_rollup`` sums per run (``exclusive_*``) and per subtree (``inclusive_*``)."""
_TREE = ("run_id", "root_run_id", "parent_run_id", "depth", "path", "agent_path")
_RUN = ("conversation_id", "agent_name", "model", "status", "started_at", "finished_at")
_EXCLUSIVE = ("wall_ms", "own_step_ms", *(f"exclusive_{name}" for name in _SUMS))
_ROW = (*_TREE, *_RUN, *_EXCLUSIVE)
"""A row's columns before its inclusive sums, in the view's order."""

VIEWS = f"""
CREATE OR REPLACE VIEW run_tree AS
SELECT {", ".join((*_TREE, *_RUN))} FROM ledger.{TABLE};

CREATE OR REPLACE VIEW run_rollup AS
SELECT * FROM ledger.{TABLE};
"""
"""The cache's ``run_tree`` and ``run_rollup``: the kept rows, the views' columns."""


def start(connection: duckdb.DuckDBPyConnection, cache: str) -> None:
    """An empty list of touched runs, for a sync's :func:`note` calls."""
    connection.execute(f"CREATE OR REPLACE TABLE {cache}.{TOUCHED} (run_id VARCHAR, moved BOOLEAN)")


def note(
    connection: duckdb.DuckDBPyConnection,
    cache: str,
    table: str,
    rows: str,
    params: list[object] | None = None,
) -> None:
    """Note the runs of the rows of ``table`` that ``rows`` (a ``WHERE`` condition, with
    ``params``) picks in the cache's copy, as they are now: called before rows are replaced or
    deleted, and after."""
    key = KEYS.get(table)
    if key is None:
        return
    moved = "true" if table == "agent_runs" else "false"
    connection.execute(
        f"INSERT INTO {cache}.{TOUCHED} SELECT {key}, {moved} FROM {cache}.{table} "
        f"WHERE ({rows}) AND {key} IS NOT NULL",
        params,
    )


def refresh(connection: duckdb.DuckDBPyConnection, cache: str, *, full: bool) -> None:
    """Rewrite the rows of the touched runs and of the runs below and above them (``full``:
    every row, from nothing)."""
    kept = f"{cache}.{TABLE}"
    try:
        _find_moved(connection, cache, kept, full=full)
        _compute_rows(connection, cache, kept, full=full)
        if full:
            connection.execute(f"CREATE OR REPLACE TABLE {kept} AS {_final(cache, kept, full)}")
        else:
            _find_above(connection, cache, kept)
            final = f"{cache}.{_FINAL}"
            connection.execute(f"CREATE OR REPLACE TABLE {final} AS {_final(cache, kept, full)}")
            connection.execute(
                f"DELETE FROM {kept} WHERE run_id IN (SELECT run_id FROM {cache}.{_CHANGED}) "
                f"OR run_id IN (SELECT run_id FROM {cache}.{_ABOVE})"
            )
            connection.execute(f"INSERT INTO {kept} SELECT * FROM {final}")
    finally:
        for staged in (TOUCHED, _MOVED, _CHANGED, _ROWS, _ABOVE, _FINAL):
            connection.execute(f"DROP TABLE IF EXISTS {cache}.{staged}")


def _find_moved(
    connection: duckdb.DuckDBPyConnection, cache: str, kept: str, *, full: bool
) -> None:
    """The runs whose place in the tree may have changed (every run below a touched run's
    row, before and after, that still has a row), and the runs whose rows change (those, and
    the touched runs: whose steps or tool calls changed, or that were deleted)."""
    if full:
        moved = f"SELECT id AS run_id FROM {cache}.agent_runs"
    else:
        # UNION, not UNION ALL: a cycle of parents (made by hand) is walked once
        moved = f"""
            WITH RECURSIVE below(run_id) AS (
                SELECT run_id FROM {cache}.{TOUCHED} WHERE moved
                UNION
                SELECT r.id FROM {cache}.agent_runs AS r JOIN below AS b
                ON r.parent_run_id = b.run_id
            )
            SELECT run_id FROM (
                SELECT run_id FROM below
                UNION
                SELECT run_id FROM (SELECT run_id, unnest(path) AS above_id FROM {kept})
                WHERE above_id IN (SELECT run_id FROM {cache}.{TOUCHED} WHERE moved)
            )
            -- a deleted run has no row left to place; the runs below it are placed anew
            WHERE run_id IN (SELECT id FROM {cache}.agent_runs)"""
    connection.execute(f"CREATE OR REPLACE TABLE {cache}.{_MOVED} AS {moved}")
    connection.execute(
        f"CREATE OR REPLACE TABLE {cache}.{_CHANGED} AS SELECT run_id FROM {cache}.{_MOVED} "
        f"UNION SELECT run_id FROM {cache}.{TOUCHED}"
    )


def _compute_rows(
    connection: duckdb.DuckDBPyConnection, cache: str, kept: str, *, full: bool
) -> None:
    """The changed runs' new rows, but for their inclusive sums: their place in the tree (a
    moved run's computed as ``run_tree`` does, from its nearest unmoved ancestor's row, the
    others' kept), their run's columns and their own usage, as ``run_own_usage`` sums it."""
    moved, changed = f"{cache}.{_MOVED}", f"{cache}.{_CHANGED}"
    prior = _EMPTY_TREE if full else kept
    connection.execute(
        f"""
CREATE OR REPLACE TABLE {cache}.{_ROWS} AS
WITH RECURSIVE moved_runs AS MATERIALIZED (
    -- read once: a few among many runs, walked down level by level below
    SELECT id, parent_run_id, agent_name FROM {cache}.agent_runs
    WHERE id IN (SELECT run_id FROM {moved})
),
tops AS MATERIALIZED (
    -- the moved runs whose parent did not move
    SELECT * FROM moved_runs
    WHERE parent_run_id IS NULL OR parent_run_id NOT IN (SELECT run_id FROM {moved})
),
parents AS MATERIALIZED (
    SELECT run_id, root_run_id, depth, path, agent_path FROM {prior}
    WHERE run_id IN (SELECT parent_run_id FROM tops)
),
runs AS MATERIALIZED (
    SELECT * FROM {cache}.agent_runs WHERE id IN (SELECT run_id FROM {changed})
),
moved_tree(run_id, root_run_id, depth, path, agent_path) AS (
    -- a moved run under an unmoved one continues its path; one whose parent row is gone, or
    -- that has none, roots a tree of its own; one under a run in no tree is in none either
    SELECT
        r.id,
        CASE WHEN p.id IS NULL THEN r.id ELSE a.root_run_id END,
        CASE WHEN p.id IS NULL THEN 0 ELSE a.depth + 1 END,
        CASE WHEN p.id IS NULL THEN [r.id] ELSE list_append(a.path, r.id) END,
        CASE WHEN p.id IS NULL THEN r.agent_name ELSE a.agent_path || ' > ' || r.agent_name END
    FROM tops AS r
    LEFT JOIN {cache}.agent_runs AS p ON p.id = r.parent_run_id
    LEFT JOIN parents AS a ON a.run_id = r.parent_run_id
    WHERE p.id IS NULL OR a.run_id IS NOT NULL
    UNION ALL
    SELECT c.id, t.root_run_id, t.depth + 1, list_append(t.path, c.id),
           t.agent_path || ' > ' || c.agent_name
    FROM moved_runs AS c
    JOIN moved_tree AS t ON c.parent_run_id = t.run_id
),
placed AS (
    SELECT * FROM moved_tree
    UNION ALL
    SELECT run_id, root_run_id, depth, path, agent_path FROM {prior}
    WHERE run_id IN (SELECT run_id FROM {changed}) AND run_id NOT IN (SELECT run_id FROM {moved})
),
own_steps AS (
    SELECT
        run_id,
        count(*) AS steps,
{_lines("        CAST(sum({name}) AS BIGINT) AS {name}", _TOKENS)},
        sum(cost_usd) AS cost_usd,
        count(*) FILTER (WHERE message_id IS NOT NULL AND cost_usd IS NULL) AS unpriced_steps,
        sum(duration_ms) AS step_ms
    FROM {cache}.step_executions
    WHERE run_id IN (SELECT run_id FROM {changed})
    GROUP BY run_id
),
own_tools AS (
    SELECT
        run_id,
        count(*) AS tool_calls,
        count(*) FILTER (WHERE CAST(is_error AS BOOLEAN)) AS tool_errors
    FROM {cache}.tool_executions
    WHERE run_id IN (SELECT run_id FROM {changed})
    GROUP BY run_id
)
SELECT
    t.run_id,
    t.root_run_id,
    r.parent_run_id,
    t.depth,
    t.path,
    t.agent_path,
    r.conversation_id,
    r.agent_name,
    r.model,
    r.status,
    CAST(r.started_at AS TIMESTAMP) AS started_at,
    CAST(r.finished_at AS TIMESTAMP) AS finished_at,
    epoch_ms(CAST(r.finished_at AS TIMESTAMP)) - epoch_ms(CAST(r.started_at AS TIMESTAMP))
        AS wall_ms,
    coalesce(s.step_ms, 0) AS own_step_ms,
{_lines("    coalesce(s.{name}, 0) AS exclusive_{name}", ("steps", *_TOKENS))},
    s.cost_usd AS exclusive_cost_usd,
    coalesce(s.unpriced_steps, 0) AS exclusive_unpriced_steps,
    coalesce(o.tool_calls, 0) AS exclusive_tool_calls,
    coalesce(o.tool_errors, 0) AS exclusive_tool_errors
FROM placed AS t
JOIN runs AS r ON r.id = t.run_id
LEFT JOIN own_steps AS s ON s.run_id = t.run_id
LEFT JOIN own_tools AS o ON o.run_id = t.run_id
"""
    )


_EMPTY_TREE = (
    "(SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS root_run_id, NULL::INTEGER AS depth, "
    "NULL::VARCHAR[] AS path, NULL::VARCHAR AS agent_path WHERE false)"
)
"""No kept rows: what the first sync computes from."""


def _find_above(connection: duckdb.DuckDBPyConnection, cache: str, kept: str) -> None:
    """Every run on a changed run's path, before or after the change: their inclusive sums
    change."""
    connection.execute(
        f"""
CREATE OR REPLACE TABLE {cache}.{_ABOVE} AS
SELECT DISTINCT unnest(path) AS run_id FROM (
    SELECT path FROM {kept} WHERE run_id IN (SELECT run_id FROM {cache}.{_CHANGED})
    UNION ALL
    SELECT path FROM {cache}.{_ROWS}
)"""
    )


def _final(cache: str, kept: str, full: bool) -> str:
    """The rows to write, with their inclusive sums: the changed runs' new rows, and the kept
    rows of the runs above them; each summed over every run whose path holds it, as
    ``run_rollup`` sums them."""
    rows, changed, above = f"{cache}.{_ROWS}", f"{cache}.{_CHANGED}", f"{cache}.{_ABOVE}"
    own = ", ".join(f"exclusive_{name}" for name in _SUMS)
    if full:
        every, rewritten, wanted = f"SELECT path, {own} FROM {rows}", rows, ""
    else:
        unchanged = f"run_id NOT IN (SELECT run_id FROM {changed})"
        every = (
            f"SELECT path, {own} FROM {rows} "
            f"UNION ALL SELECT path, {own} FROM {kept} WHERE {unchanged}"
        )
        rewritten = (
            f"(SELECT * FROM {rows} UNION ALL SELECT {', '.join(_ROW)} FROM {kept} "
            f"WHERE run_id IN (SELECT run_id FROM {above}) AND {unchanged})"
        )
        wanted = f"WHERE ancestor_id IN (SELECT run_id FROM {above})"
    return f"""
WITH every_run AS ({every}),
ancestry AS (SELECT unnest(path) AS ancestor_id, * EXCLUDE (path) FROM every_run),
inclusive AS (
    SELECT
        ancestor_id AS run_id,
        count(*) AS runs,
{_lines("        CAST(sum(exclusive_{name}) AS BIGINT) AS {name}", ("steps", *_TOKENS))},
        sum(exclusive_cost_usd) AS cost_usd,
{_lines("        CAST(sum(exclusive_{name}) AS BIGINT) AS {name}", _SUMS[-3:])}
    FROM ancestry
    {wanted}
    GROUP BY ancestor_id
)
SELECT
    {", ".join(f"w.{name}" for name in _ROW)},
    i.runs AS inclusive_runs,
{_lines("    i.{name} AS inclusive_{name}", _SUMS)}
FROM {rewritten} AS w
JOIN inclusive AS i ON i.run_id = w.run_id"""


def _lines(template: str, names: tuple[str, ...]) -> str:
    return ",\n".join(template.format(name=name) for name in names)
