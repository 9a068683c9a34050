-- agentledger analytics, 07: what the numbers do not cover yet.
--
-- running_runs: runs not finished (in progress, or whose process died: see heartbeat_at and
-- `agentledger recover`). Failed runs can be resumed; interrupted ones were abandoned.
-- unpriced_steps: steps that called a model with no known price, so
-- the costs above leave them out. completeness: both counted, in one row.

CREATE OR REPLACE VIEW running_runs AS
SELECT run_id, conversation_id, agent_name, depth, started_at, heartbeat_at
FROM runs
WHERE status = 'running';

CREATE OR REPLACE VIEW unpriced_steps AS
SELECT step_id, run_id, agent_name, step_index, model, started_at
FROM steps
WHERE unpriced;

CREATE OR REPLACE VIEW completeness AS
SELECT
    (SELECT count(*) FROM runs) AS runs,
    (SELECT count(*) FROM running_runs) AS running_runs,
    (SELECT count(*) FROM runs WHERE status = 'failed') AS failed_runs,
    (SELECT count(*) FROM runs WHERE status = 'interrupted') AS interrupted_runs,
    (SELECT count(*) FROM steps) AS steps,
    (SELECT count(*) FROM unpriced_steps) AS unpriced_steps,
    (SELECT list(DISTINCT coalesce(model, '(unknown)') ORDER BY coalesce(model, '(unknown)'))
     FROM unpriced_steps) AS unpriced_models;
