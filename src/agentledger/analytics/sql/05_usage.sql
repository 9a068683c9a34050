-- agentledger analytics, 05: usage by model, agent, conversation and time.
--
-- All of it is summed from the step rows, where usage is recorded once.

CREATE OR REPLACE MACRO _usage_columns(s) AS (
    struct_pack(
        steps := count(s.step_id),
        input_tokens := CAST(coalesce(sum(s.input_tokens), 0) AS BIGINT),
        output_tokens := CAST(coalesce(sum(s.output_tokens), 0) AS BIGINT),
        cache_read_tokens := CAST(coalesce(sum(s.cache_read_tokens), 0) AS BIGINT),
        cache_write_tokens := CAST(coalesce(sum(s.cache_write_tokens), 0) AS BIGINT),
        reasoning_tokens := CAST(coalesce(sum(s.reasoning_tokens), 0) AS BIGINT),
        cache_write_1h_tokens := CAST(coalesce(sum(s.cache_write_1h_tokens), 0) AS BIGINT),
        cost_usd := sum(s.cost_usd),
        unpriced_steps := count(s.step_id) FILTER (WHERE s.unpriced)
    )
);

-- model_usage: per model (as the provider reported it on each step).
CREATE OR REPLACE VIEW model_usage AS
SELECT s.model, count(DISTINCT s.run_id) AS runs, unnest(_usage_columns(s))
FROM steps AS s
GROUP BY s.model;

-- agent_usage: per agent, its own steps (a subagent's usage counts for the subagent).
CREATE OR REPLACE VIEW agent_usage AS
SELECT s.agent_name, count(DISTINCT s.run_id) AS runs, unnest(_usage_columns(s))
FROM steps AS s
GROUP BY s.agent_name;

-- conversation_usage: per conversation a user had, including the subagent runs its runs
-- started (their own conversations, of kind 'subagent', are counted here, not listed apart).
CREATE OR REPLACE VIEW conversation_usage AS
SELECT
    top.conversation_id,
    c.kind,
    c.title,
    count(DISTINCT top.run_id) AS runs,
    count(DISTINCT t.run_id) FILTER (WHERE t.run_id <> top.run_id) AS subagent_runs,
    min(top.started_at) AS first_run_at,
    max(coalesce(top.finished_at, top.started_at)) AS last_run_at,
    unnest(_usage_columns(s))
FROM run_tree AS t
JOIN runs AS top ON top.run_id = t.root_run_id
LEFT JOIN steps AS s ON s.run_id = t.run_id
JOIN ledger.conversations AS c ON c.id = top.conversation_id
GROUP BY top.conversation_id, c.kind, c.title;

-- usage_over_time(unit): per time bucket ('hour', 'day', 'week', ...), agent and model, by
-- when each step started.  SELECT * FROM usage_over_time('day');
CREATE OR REPLACE MACRO usage_over_time(unit) AS TABLE
SELECT
    date_trunc(unit, s.started_at) AS bucket,
    s.agent_name,
    s.model,
    unnest(_usage_columns(s))
FROM steps AS s
GROUP BY date_trunc(unit, s.started_at), s.agent_name, s.model
ORDER BY bucket, s.agent_name, s.model;
