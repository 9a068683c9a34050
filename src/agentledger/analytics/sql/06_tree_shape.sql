-- agentledger analytics, 06: the shape of run trees.
--
-- tree_shape: per tree (a top-level run and its subagent runs), how many runs, how deep, and
-- how wide: fan-out is the number of subagent runs a run started directly.
-- tree_shape_summary: the same over all trees, in one row.

CREATE OR REPLACE VIEW run_fan_out AS
SELECT t.run_id, t.root_run_id, t.depth, count(c.run_id) AS fan_out
FROM run_tree AS t
LEFT JOIN runs AS c ON c.parent_run_id = t.run_id
GROUP BY t.run_id, t.root_run_id, t.depth;

CREATE OR REPLACE VIEW tree_shape AS
SELECT
    root_run_id,
    count(*) AS runs,
    max(depth) AS max_depth,
    max(fan_out) AS max_fan_out,
    avg(fan_out) FILTER (WHERE fan_out > 0) AS mean_fan_out
FROM run_fan_out
GROUP BY root_run_id;

-- (fan-out and shape are computed once and reused: the PostgreSQL scanner must not evaluate
-- the recursive run_tree several times at once)
CREATE OR REPLACE VIEW tree_shape_summary AS
WITH fan AS MATERIALIZED (SELECT * FROM run_fan_out),
shape AS MATERIALIZED (
    SELECT root_run_id, count(*) AS runs, max(depth) AS max_depth FROM fan GROUP BY root_run_id
)
SELECT
    (SELECT count(*) FROM shape) AS trees,
    (SELECT count(*) FROM shape WHERE runs > 1) AS trees_with_subagents,
    (SELECT avg(runs) FROM shape) AS mean_runs_per_tree,
    (SELECT max(runs) FROM shape) AS max_runs_per_tree,
    (SELECT max(max_depth) FROM shape) AS max_depth,
    (SELECT histogram(depth) FROM fan) AS runs_by_depth,
    (SELECT avg(fan_out) FROM fan WHERE fan_out > 0) AS mean_fan_out,
    (SELECT quantile_cont(fan_out, 0.95) FROM fan WHERE fan_out > 0) AS p95_fan_out,
    (SELECT max(fan_out) FROM fan) AS max_fan_out;
