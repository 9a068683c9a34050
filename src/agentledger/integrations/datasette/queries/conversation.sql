-- A conversation as the user saw it
--
-- Every message of one conversation in order: what the user said and what the agent answered
-- (in inline mode, the runs' tool calls and results too), those a summary replaced included,
-- the summaries left out; as Ledger.history(conversation_id) reads it. interrupted marks an
-- answer cut short: exactly what the user was shown.
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
WHERE conversation_id = :conversation_id AND section IN ('messages', 'buffer')
ORDER BY seq
