-- The ids a prefix begins
--
-- Every run and conversation whose id begins with the prefix given, oldest first: the one a
-- short id the command line printed names, or, when the other queries find nothing for a
-- prefix that begins several ids, each of them, to choose from.
SELECT
    'run' AS kind,
    id,
    agent_name AS name,
    status,
    started_at AS at,
    id AS run_id,
    conversation_id
FROM agent_runs
WHERE id >= :prefix AND id < :prefix || char(1114111)
UNION ALL
SELECT
    'conversation' AS kind,
    id,
    coalesce(title, '') AS name,
    kind AS status,
    created_at AS at,
    NULL AS run_id,
    id AS conversation_id
FROM conversations
WHERE id >= :prefix AND id < :prefix || char(1114111)
ORDER BY at, id
LIMIT 100
