-- agentledger analytics, 02: the run tree.
--
-- run_tree: every run with its root, its depth (0 for a top-level run) and its path, the ids
-- from the root down to the run itself, plus the same path as agent names.

-- (the runs are read once, then walked in memory, level by level)
CREATE OR REPLACE VIEW run_tree AS
WITH RECURSIVE base AS MATERIALIZED (
    SELECT run_id, parent_run_id, conversation_id, agent_name, model, status, started_at,
           finished_at
    FROM runs
),
tree(run_id, root_run_id, parent_run_id, depth, path, agent_path) AS (
    SELECT run_id, run_id, parent_run_id, 0, [run_id], agent_name
    FROM base
    -- a top-level run, or one whose parent row is gone: it roots a tree of its own
    WHERE parent_run_id IS NULL OR parent_run_id NOT IN (SELECT run_id FROM base)
    UNION ALL
    SELECT c.run_id, t.root_run_id, c.parent_run_id, t.depth + 1,
           list_append(t.path, c.run_id), t.agent_path || ' > ' || c.agent_name
    FROM base AS c
    JOIN tree AS t ON c.parent_run_id = t.run_id
)
SELECT
    t.run_id,
    t.root_run_id,
    t.parent_run_id,
    t.depth,
    t.path,
    t.agent_path,
    b.conversation_id,
    b.agent_name,
    b.model,
    b.status,
    b.started_at,
    b.finished_at
FROM tree AS t
JOIN base AS b USING (run_id);
