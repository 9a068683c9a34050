-- The most expensive runs
--
-- The top-level runs (what users asked for), most expensive first, each with everything its
-- run tree spent: its own steps and every subagent run's below it (inclusive), summed from the
-- step rows. Runs whose cost is unknown (NULL, never free) come last, by tokens; fully_priced
-- is 0 when some step of the tree that called a model has no known cost.
WITH spend AS (
    SELECT
        a.root_run_id AS run_id,
        count(DISTINCT a.id) AS runs,
        count(s.id) AS steps,
        coalesce(sum(s.input_tokens), 0) AS input_tokens,
        coalesce(sum(s.output_tokens), 0) AS output_tokens,
        coalesce(sum(s.cache_read_tokens), 0) AS cache_read_tokens,
        coalesce(sum(s.reasoning_tokens), 0) AS reasoning_tokens,
        sum(s.cost_usd) AS cost_usd,
        min(s.message_id IS NULL OR s.cost_usd IS NOT NULL) AS fully_priced
    FROM agent_runs AS a
    LEFT JOIN step_executions AS s ON s.run_id = a.id
    GROUP BY a.root_run_id
)
SELECT
    r.id AS run_id,
    r.conversation_id,
    r.agent_name,
    r.status,
    r.started_at,
    sp.runs,
    sp.steps,
    sp.input_tokens,
    sp.output_tokens,
    sp.cache_read_tokens,
    sp.reasoning_tokens,
    sp.cost_usd,
    sp.fully_priced
FROM agent_runs AS r
JOIN spend AS sp ON sp.run_id = r.id
WHERE r.parent_run_id IS NULL
ORDER BY sp.cost_usd DESC NULLS LAST, sp.input_tokens + sp.output_tokens DESC, r.id
LIMIT 100
