-- agentledger analytics, 02: the run tree.
--
-- run_tree: every run with its root, its depth (0 for a top-level run) and its path, the ids
-- from the root down to the run itself, plus the same path as agent names.

CREATE OR REPLACE VIEW run_tree AS
WITH RECURSIVE tree(run_id, root_run_id, parent_run_id, depth, path, agent_path) AS (
    SELECT run_id, run_id, parent_run_id, 0, [run_id], agent_name
    FROM runs
    -- a top-level run, or one whose parent row is gone: it roots a tree of its own
    WHERE parent_run_id IS NULL OR parent_run_id NOT IN (SELECT run_id FROM runs)
    UNION ALL
    SELECT c.run_id, t.root_run_id, c.parent_run_id, t.depth + 1,
           list_append(t.path, c.run_id), t.agent_path || ' > ' || c.agent_name
    FROM runs AS c
    JOIN tree AS t ON c.parent_run_id = t.run_id
)
SELECT
    t.run_id,
    t.root_run_id,
    t.parent_run_id,
    t.depth,
    t.path,
    t.agent_path,
    r.conversation_id,
    r.agent_name,
    r.model,
    r.status,
    r.started_at,
    r.finished_at
FROM tree AS t
JOIN runs AS r USING (run_id);
