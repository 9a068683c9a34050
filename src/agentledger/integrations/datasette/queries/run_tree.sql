-- A run tree, with exclusive and inclusive usage
--
-- One run and every subagent run below it, depth first in the order they started (level 0 is
-- the run given; give a top-level run's id for the whole tree). The plain columns are the
-- run's own steps (exclusive); inclusive_* adds every run below it. Both are summed from the
-- step rows, where usage is recorded once, so nothing is counted twice; as Ledger.run_tree
-- gives them. A NULL cost is unknown, never free; fully_priced is 0 when some step that called
-- a model has no known cost. run_id: the id, or a prefix of 8 characters or more that begins
-- no other run's id, as agentledger runs prints it (a prefix that begins several finds
-- nothing: the ids query lists them).
WITH RECURSIVE chosen AS (
    SELECT coalesce(
        (SELECT id FROM agent_runs WHERE id = :run_id),
        (
            SELECT min(id) FROM agent_runs  -- the ids that begin with it, if only one does
            WHERE length(:run_id) >= 8 AND id >= :run_id AND id < :run_id || char(1114111)
            HAVING count(*) = 1
        )
    ) AS id
),
tree (id, level, path) AS (
    SELECT id, 0, started_at || ' ' || id
    FROM agent_runs
    WHERE id = (SELECT id FROM chosen)
    UNION ALL
    SELECT r.id, t.level + 1, t.path || ' / ' || r.started_at || ' ' || r.id
    FROM agent_runs AS r
    JOIN tree AS t ON r.parent_run_id = t.id
    WHERE instr(t.path, r.id) = 0
),
own AS (
    SELECT
        run_id,
        count(*) AS steps,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(reasoning_tokens) AS reasoning_tokens,
        sum(cost_usd) AS cost_usd,
        min(message_id IS NULL OR cost_usd IS NOT NULL) AS fully_priced
    FROM step_executions
    WHERE run_id IN (SELECT id FROM tree)
    GROUP BY run_id
),
inclusive AS (
    SELECT
        a.id,
        coalesce(sum(o.steps), 0) AS steps,
        coalesce(sum(o.input_tokens), 0) AS input_tokens,
        coalesce(sum(o.output_tokens), 0) AS output_tokens,
        coalesce(sum(o.cache_read_tokens), 0) AS cache_read_tokens,
        coalesce(sum(o.cache_write_tokens), 0) AS cache_write_tokens,
        coalesce(sum(o.reasoning_tokens), 0) AS reasoning_tokens,
        sum(o.cost_usd) AS cost_usd,
        min(coalesce(o.fully_priced, 1)) AS fully_priced
    FROM tree AS a
    JOIN tree AS d ON substr(d.path, 1, length(a.path)) = a.path
    LEFT JOIN own AS o ON o.run_id = d.id
    GROUP BY a.id
)
SELECT
    t.level,
    r.id AS run_id,
    r.parent_run_id,
    r.agent_name,
    r.status,
    r.model,
    coalesce(o.steps, 0) AS steps,
    coalesce(o.input_tokens, 0) AS input_tokens,
    coalesce(o.output_tokens, 0) AS output_tokens,
    o.cost_usd,
    coalesce(o.fully_priced, 1) AS fully_priced,
    i.steps AS inclusive_steps,
    i.input_tokens AS inclusive_input_tokens,
    i.output_tokens AS inclusive_output_tokens,
    i.cache_read_tokens AS inclusive_cache_read_tokens,
    i.cache_write_tokens AS inclusive_cache_write_tokens,
    i.reasoning_tokens AS inclusive_reasoning_tokens,
    i.cost_usd AS inclusive_cost_usd,
    i.fully_priced AS inclusive_fully_priced
FROM tree AS t
JOIN agent_runs AS r ON r.id = t.id
JOIN inclusive AS i ON i.id = t.id
LEFT JOIN own AS o ON o.run_id = t.id
ORDER BY t.path
