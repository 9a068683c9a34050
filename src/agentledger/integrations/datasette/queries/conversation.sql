-- A conversation as the user saw it
--
-- Every message of one conversation in order: what the user said and what the agent answered
-- (in inline mode, the runs' tool calls and results too), those a summary replaced included,
-- the summaries left out; as Ledger.history(conversation_id) reads it. interrupted marks an
-- answer cut short: exactly what the user was shown. conversation_id: the id, or a prefix of
-- 8 characters or more that begins no other conversation's id, as agentledger conversations
-- prints it (a prefix that begins several finds nothing: the ids query lists them).
WITH chosen AS (
    SELECT coalesce(
        (SELECT id FROM conversations WHERE id = :conversation_id),
        (
            SELECT min(id) FROM conversations  -- the ids that begin with it, if only one does
            WHERE length(:conversation_id) >= 8
                AND id >= :conversation_id AND id < :conversation_id || char(1114111)
            HAVING count(*) = 1
        )
    ) AS id
)
SELECT
    seq,
    role,
    content,
    name,
    tool_calls,
    tool_call_id,
    interrupted,
    run_id,
    created_at,
    id
FROM conversation_messages
WHERE conversation_id = (SELECT id FROM chosen) AND section IN ('messages', 'buffer')
ORDER BY seq
