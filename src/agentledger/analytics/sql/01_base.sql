-- agentledger analytics, 01: typed views over the attached ledger.
--
-- Every file in this folder runs in DuckDB after the ledger is attached read-only as `ledger`:
--   ATTACH 'agentledger.db' AS ledger (TYPE sqlite, READ_ONLY);                  -- SQLite
--   ATTACH 'dbname=agentledger host=localhost' AS ledger (TYPE postgres, READ_ONLY); -- PostgreSQL
--   SET TimeZone = 'UTC';
-- Timestamps are UTC. These views give both backends the same types (SQLite stores booleans
-- as integers), so everything after them is one SQL for both.

CREATE OR REPLACE VIEW runs AS
SELECT
    id AS run_id,
    conversation_id,
    parent_run_id,
    root_run_id,
    CAST(depth AS INTEGER) AS depth,
    agent_name,
    model,
    status,
    stop_reason,
    error,
    CAST(started_at AS TIMESTAMP) AS started_at,
    CAST(finished_at AS TIMESTAMP) AS finished_at,
    CAST(heartbeat_at AS TIMESTAMP) AS heartbeat_at
FROM ledger.agent_runs;

CREATE OR REPLACE VIEW steps AS
SELECT
    s.id AS step_id,
    s.run_id,
    r.agent_name,
    CAST(s.step_index AS INTEGER) AS step_index,
    s.step_type,
    s.model,
    s.finish_reason,
    CAST(s.started_at AS TIMESTAMP) AS started_at,
    CAST(s.finished_at AS TIMESTAMP) AS finished_at,
    s.duration_ms,
    s.input_tokens,
    s.output_tokens,
    s.cache_read_tokens,
    s.cache_write_tokens,
    s.reasoning_tokens,
    s.cache_write_1h_tokens,
    s.cost_usd,
    -- a step called a model when it holds the model's message; without a cost it is unpriced
    s.message_id IS NOT NULL AS called_model,
    s.message_id IS NOT NULL AND s.cost_usd IS NULL AS unpriced,
    s.error,
    -- the step its run was in when it was cancelled, as far as it came
    CAST(s.interrupted AS BOOLEAN) AS interrupted
FROM ledger.step_executions AS s
JOIN ledger.agent_runs AS r ON r.id = s.run_id;

CREATE OR REPLACE VIEW tool_calls AS
SELECT
    t.id AS tool_execution_id,
    t.run_id,
    r.agent_name,
    s.model,
    t.step_id,
    CAST(t.step_index AS INTEGER) AS step_index,
    t.tool_name,
    CAST(t.is_error AS BOOLEAN) AS is_error,
    t.error,
    CAST(t.started_at AS TIMESTAMP) AS started_at,
    CAST(t.finished_at AS TIMESTAMP) AS finished_at,
    t.duration_ms,
    t.child_run_id
FROM ledger.tool_executions AS t
JOIN ledger.agent_runs AS r ON r.id = t.run_id
JOIN ledger.step_executions AS s ON s.id = t.step_id;
