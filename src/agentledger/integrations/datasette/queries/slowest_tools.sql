-- The slowest tools
--
-- Each tool by its mean duration, slowest first: how often it was called, how long it took
-- (milliseconds: mean, longest, in all) and how many calls were errors. A tool that spawned a
-- subagent lasts as long as the subagent's run.
SELECT
    tool_name,
    count(*) AS calls,
    avg(duration_ms) AS mean_ms,
    max(duration_ms) AS max_ms,
    sum(duration_ms) AS total_ms,
    sum(is_error) AS errors
FROM tool_executions
GROUP BY tool_name
ORDER BY mean_ms DESC, tool_name
LIMIT 100
