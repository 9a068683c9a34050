-- The trace of one run
--
-- What one run did before it answered: each assistant message that called tools (its calls in
-- tool_calls), then the tools' results, step by step; as Ledger.trace_messages(run_id) rebuilds
-- it from the step and tool rows, so it is there after the run's execution buffer was flushed.
-- A step whose output the driver rejected (ReAct) is trace too. Durations are milliseconds.
-- A tool that spawned a subagent names its run (child_run_id). run_id: the id, or a prefix of 8
-- characters or more that begins no other run's id, as agentledger runs prints it (a prefix
-- that begins several finds nothing: the ids query lists them).
WITH chosen AS (
    SELECT coalesce(
        (SELECT id FROM agent_runs WHERE id = :run_id),
        (
            SELECT min(id) FROM agent_runs  -- the ids that begin with it, if only one does
            WHERE length(:run_id) >= 8 AND id >= :run_id AND id < :run_id || char(1114111)
            HAVING count(*) = 1
        )
    ) AS id
),
traced AS (
    SELECT *
    FROM step_executions
    WHERE run_id = (SELECT id FROM chosen)
        AND message_id IS NOT NULL
        AND (tool_call_count > 0 OR json_type(metadata, '$.react.error') = 'text')
)
SELECT
    s.step_index,
    NULL AS position,
    'assistant' AS role,
    coalesce(s.content, '') AS content,
    NULL AS name,
    (
        SELECT json_group_array(json_object(
            'id', t.tool_call_id,
            'name', t.tool_name,
            'arguments', json(coalesce(t.arguments, '{}')),
            'raw_arguments', json_extract(t.metadata, '$.raw_arguments')
        ))
        FROM (SELECT * FROM tool_executions WHERE step_id = s.id ORDER BY position) AS t
    ) AS tool_calls,
    NULL AS tool_call_id,
    s.reasoning,
    NULL AS is_error,
    s.duration_ms,
    NULL AS child_run_id,
    s.message_id AS id
FROM traced AS s
UNION ALL
SELECT
    t.step_index,
    t.position,
    'tool' AS role,
    t.result AS content,
    t.tool_name AS name,
    NULL AS tool_calls,
    t.tool_call_id,
    NULL AS reasoning,
    t.is_error,
    t.duration_ms,
    t.child_run_id,
    t.id
FROM tool_executions AS t
JOIN traced AS s ON s.id = t.step_id
ORDER BY step_index, position NULLS FIRST
