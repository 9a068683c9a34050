-- agentledger analytics, 03: usage per run, exclusive and inclusive.
--
-- Usage is recorded once, on the step that spent it. exclusive_* sums a run's own steps and
-- tool calls; inclusive_* sums them over the run's whole subtree (itself and every subagent
-- run below it), so a parent's totals include its subagents without counting anything twice.
-- wall_ms is the run's start to finish; own_step_ms sums its own steps' durations, and a step
-- that spawned subagents lasts as long as they ran, so it includes their time.
-- Costs are NULL, not zero, when no step in the sum has a known cost; *_unpriced_steps says
-- how many steps that called a model have no cost.

CREATE OR REPLACE VIEW run_own_usage AS
WITH own_steps AS (
    SELECT
        run_id,
        count(*) AS steps,
        CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
        CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
        CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
        CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
        CAST(sum(reasoning_tokens) AS BIGINT) AS reasoning_tokens,
        CAST(sum(cache_write_1h_tokens) AS BIGINT) AS cache_write_1h_tokens,
        sum(cost_usd) AS cost_usd,
        count(*) FILTER (WHERE message_id IS NOT NULL AND cost_usd IS NULL) AS unpriced_steps,
        sum(duration_ms) AS step_ms
    FROM ledger.step_executions
    GROUP BY run_id
),
own_tools AS (
    SELECT
        run_id,
        count(*) AS tool_calls,
        count(*) FILTER (WHERE CAST(is_error AS BOOLEAN)) AS tool_errors
    FROM ledger.tool_executions
    GROUP BY run_id
)
SELECT
    r.run_id,
    coalesce(s.steps, 0) AS steps,
    coalesce(s.input_tokens, 0) AS input_tokens,
    coalesce(s.output_tokens, 0) AS output_tokens,
    coalesce(s.cache_read_tokens, 0) AS cache_read_tokens,
    coalesce(s.cache_write_tokens, 0) AS cache_write_tokens,
    coalesce(s.reasoning_tokens, 0) AS reasoning_tokens,
    coalesce(s.cache_write_1h_tokens, 0) AS cache_write_1h_tokens,
    s.cost_usd,
    coalesce(s.unpriced_steps, 0) AS unpriced_steps,
    coalesce(t.tool_calls, 0) AS tool_calls,
    coalesce(t.tool_errors, 0) AS tool_errors,
    coalesce(s.step_ms, 0) AS step_ms
FROM runs AS r
LEFT JOIN own_steps AS s USING (run_id)
LEFT JOIN own_tools AS t USING (run_id);

CREATE OR REPLACE VIEW run_rollup AS
WITH tree AS MATERIALIZED (SELECT * FROM run_tree),
own AS MATERIALIZED (SELECT * FROM run_own_usage),
ancestry AS (
    -- each run paired with itself and every run above it
    SELECT unnest(path) AS ancestor_id, run_id FROM tree
),
inclusive AS (
    SELECT
        a.ancestor_id AS run_id,
        count(*) AS runs,
        CAST(sum(o.steps) AS BIGINT) AS steps,
        CAST(sum(o.input_tokens) AS BIGINT) AS input_tokens,
        CAST(sum(o.output_tokens) AS BIGINT) AS output_tokens,
        CAST(sum(o.cache_read_tokens) AS BIGINT) AS cache_read_tokens,
        CAST(sum(o.cache_write_tokens) AS BIGINT) AS cache_write_tokens,
        CAST(sum(o.reasoning_tokens) AS BIGINT) AS reasoning_tokens,
        CAST(sum(o.cache_write_1h_tokens) AS BIGINT) AS cache_write_1h_tokens,
        sum(o.cost_usd) AS cost_usd,
        CAST(sum(o.unpriced_steps) AS BIGINT) AS unpriced_steps,
        CAST(sum(o.tool_calls) AS BIGINT) AS tool_calls,
        CAST(sum(o.tool_errors) AS BIGINT) AS tool_errors
    FROM ancestry AS a
    JOIN own AS o ON o.run_id = a.run_id
    GROUP BY a.ancestor_id
)
SELECT
    t.run_id,
    t.root_run_id,
    t.parent_run_id,
    t.depth,
    t.path,
    t.agent_path,
    t.conversation_id,
    t.agent_name,
    t.model,
    t.status,
    t.started_at,
    t.finished_at,
    epoch_ms(t.finished_at) - epoch_ms(t.started_at) AS wall_ms,
    o.step_ms AS own_step_ms,
    o.steps AS exclusive_steps,
    o.input_tokens AS exclusive_input_tokens,
    o.output_tokens AS exclusive_output_tokens,
    o.cache_read_tokens AS exclusive_cache_read_tokens,
    o.cache_write_tokens AS exclusive_cache_write_tokens,
    o.reasoning_tokens AS exclusive_reasoning_tokens,
    o.cache_write_1h_tokens AS exclusive_cache_write_1h_tokens,
    o.cost_usd AS exclusive_cost_usd,
    o.unpriced_steps AS exclusive_unpriced_steps,
    o.tool_calls AS exclusive_tool_calls,
    o.tool_errors AS exclusive_tool_errors,
    i.runs AS inclusive_runs,
    i.steps AS inclusive_steps,
    i.input_tokens AS inclusive_input_tokens,
    i.output_tokens AS inclusive_output_tokens,
    i.cache_read_tokens AS inclusive_cache_read_tokens,
    i.cache_write_tokens AS inclusive_cache_write_tokens,
    i.reasoning_tokens AS inclusive_reasoning_tokens,
    i.cache_write_1h_tokens AS inclusive_cache_write_1h_tokens,
    i.cost_usd AS inclusive_cost_usd,
    i.unpriced_steps AS inclusive_unpriced_steps,
    i.tool_calls AS inclusive_tool_calls,
    i.tool_errors AS inclusive_tool_errors
FROM tree AS t
JOIN own AS o USING (run_id)
JOIN inclusive AS i USING (run_id);
