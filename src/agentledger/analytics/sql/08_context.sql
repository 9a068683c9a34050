-- agentledger analytics, 08: the model's context, compacted, and its size over time.
--
-- conversation_runs: every run with its position in its conversation (run_number 1, 2, ...,
-- by start) and first_seq, the seq of its user message among the conversation's messages.
--
-- compaction_events: one row per compaction of a conversation's context, oldest first. kind
-- 'masking': old tool results of run_id replaced by placeholders before its step step_index
-- (messages: how many; masking starts from the whole results before every step that needs it,
-- so each row is what that step was spared). kind 'summary': between runs, the oldest messages
-- replaced by a summary message (summary_id); messages counts them with the summary before,
-- if any; first_seq and last_seq bound the conversation messages among them. status is
-- 'completed' or 'failed' (the conversation then unchanged: tokens_saved 0). tokens_saved is
-- tokens_before - tokens_after, the library's estimates. A summary's model call is not a step:
-- what it spent (model, input_tokens, ..., cost_usd) is here, and not in the usage of 03 and
-- 05; a masking calls no model (cost_usd NULL). before_run_id and before_step_index: the step
-- whose context it shrank first: a masking's own; a summary's, the first step of the
-- conversation's next run (the first run whose user message follows the summary's, or, for a
-- failed summary, the first run started since it): NULL until that run begins, and
-- before_step_index until it has a step. agent_name is that run's agent.
--
-- context_size: the context over the life of each main conversation (a user's: a subagent's
-- own conversations are left out), one row per step of its runs, in order (step_number counts
-- them over the conversation). input_tokens is what the provider reported the step sent the
-- model, the real size of the context (0 for a step that called no model: see called_model).
-- compactions, tokens_saved, masked_results and summarized_messages: what the compactions of
-- compaction_events placed on that step took out (completed ones; compactions counts failed
-- ones too). messages_in_context and messages_out_of_context: the conversation's messages when
-- the run began (its user message and the summaries included, the run's own tool trace not),
-- in the model's context or replaced by a summary by then.

CREATE OR REPLACE VIEW conversation_runs AS
WITH first_message AS (
    SELECT run_id, CAST(min(seq) AS INTEGER) AS first_seq
    FROM ledger.conversation_messages
    WHERE run_id IS NOT NULL
    GROUP BY run_id
)
SELECT
    r.run_id,
    r.conversation_id,
    c.kind AS conversation_kind,
    r.agent_name,
    r.status,
    r.started_at,
    r.finished_at,
    m.first_seq,
    row_number() OVER (
        PARTITION BY r.conversation_id ORDER BY r.started_at, m.first_seq, r.run_id
    ) AS run_number
FROM runs AS r
JOIN ledger.conversations AS c ON c.id = r.conversation_id
LEFT JOIN first_message AS m USING (run_id);

CREATE OR REPLACE VIEW compaction_events AS
WITH compactions AS MATERIALIZED (
    SELECT
        k.id AS compaction_id,
        k.conversation_id,
        k.run_id,
        CAST(k.step_index AS INTEGER) AS step_index,
        k.kind,
        k.status,
        CAST(k.messages AS INTEGER) AS messages,
        CAST(k.first_seq AS INTEGER) AS first_seq,
        CAST(k.last_seq AS INTEGER) AS last_seq,
        k.summary_id,
        CAST(s.seq AS INTEGER) AS summary_seq,
        CAST(k.tokens_before AS BIGINT) AS tokens_before,
        CAST(k.tokens_after AS BIGINT) AS tokens_after,
        k.model,
        CAST(k.input_tokens AS BIGINT) AS input_tokens,
        CAST(k.output_tokens AS BIGINT) AS output_tokens,
        CAST(k.cache_read_tokens AS BIGINT) AS cache_read_tokens,
        CAST(k.cache_write_tokens AS BIGINT) AS cache_write_tokens,
        CAST(k.reasoning_tokens AS BIGINT) AS reasoning_tokens,
        CAST(k.cache_write_1h_tokens AS BIGINT) AS cache_write_1h_tokens,
        k.cost_usd,
        k.error,
        CAST(k.created_at AS TIMESTAMP) AS created_at,
        CAST(k.duration_ms AS DOUBLE) AS duration_ms
    FROM ledger.context_compactions AS k
    LEFT JOIN ledger.conversation_messages AS s ON s.id = k.summary_id
),
conversation_run AS MATERIALIZED (SELECT * FROM conversation_runs),
next_run AS (
    -- a summary's next run: after the summary message, or (failed: none) started since
    SELECT k.compaction_id, arg_min(r.run_id, r.run_number) AS run_id
    FROM compactions AS k
    JOIN conversation_run AS r
        ON r.conversation_id = k.conversation_id
        AND CASE
            WHEN k.summary_seq IS NOT NULL THEN r.first_seq > k.summary_seq
            ELSE r.started_at >= k.created_at
        END
    WHERE k.run_id IS NULL
    GROUP BY k.compaction_id
),
first_step AS (
    SELECT run_id, CAST(min(step_index) AS INTEGER) AS step_index
    FROM ledger.step_executions
    GROUP BY run_id
)
SELECT
    k.compaction_id,
    k.conversation_id,
    c.kind AS conversation_kind,
    k.run_id,
    k.step_index,
    k.kind,
    k.status,
    k.messages,
    k.first_seq,
    k.last_seq,
    k.summary_id,
    k.tokens_before,
    k.tokens_after,
    k.tokens_before - k.tokens_after AS tokens_saved,
    k.model,
    k.input_tokens,
    k.output_tokens,
    k.cache_read_tokens,
    k.cache_write_tokens,
    k.reasoning_tokens,
    k.cache_write_1h_tokens,
    k.cost_usd,
    k.error,
    k.created_at,
    k.duration_ms,
    coalesce(k.run_id, n.run_id) AS before_run_id,
    CASE WHEN k.run_id IS NOT NULL THEN k.step_index ELSE f.step_index END AS before_step_index,
    r.agent_name
FROM compactions AS k
JOIN ledger.conversations AS c ON c.id = k.conversation_id
LEFT JOIN next_run AS n USING (compaction_id)
LEFT JOIN first_step AS f ON f.run_id = n.run_id
LEFT JOIN conversation_run AS r ON r.run_id = coalesce(k.run_id, n.run_id)
ORDER BY k.created_at, k.compaction_id;

-- (the messages are read once; the running counts are taken at each run's user message)
CREATE OR REPLACE VIEW context_size AS
WITH conversation_run AS MATERIALIZED (
    SELECT * FROM conversation_runs WHERE conversation_kind = 'main'
),
run_step AS (
    SELECT
        r.conversation_id,
        r.run_id,
        r.run_number,
        r.agent_name,
        r.first_seq,
        s.step_index,
        s.started_at,
        s.called_model,
        CAST(s.input_tokens AS BIGINT) AS input_tokens,
        row_number() OVER (
            PARTITION BY r.conversation_id ORDER BY r.run_number, s.step_index
        ) AS step_number
    FROM conversation_run AS r
    JOIN steps AS s USING (run_id)
),
compacted AS (
    SELECT
        before_run_id AS run_id,
        before_step_index AS step_index,
        count(*) AS compactions,
        CAST(coalesce(sum(tokens_saved) FILTER (WHERE status = 'completed'), 0) AS BIGINT)
            AS tokens_saved,
        CAST(
            coalesce(sum(messages) FILTER (WHERE kind = 'masking' AND status = 'completed'), 0)
            AS BIGINT
        ) AS masked_results,
        CAST(
            coalesce(sum(messages) FILTER (WHERE kind = 'summary' AND status = 'completed'), 0)
            AS BIGINT
        ) AS summarized_messages
    FROM compaction_events
    WHERE before_run_id IN (SELECT run_id FROM conversation_run)
    GROUP BY before_run_id, before_step_index
),
message AS MATERIALIZED (
    SELECT m.id, m.conversation_id, CAST(m.seq AS INTEGER) AS seq, m.summary_id
    FROM ledger.conversation_messages AS m
    WHERE m.conversation_id IN (SELECT conversation_id FROM conversation_run)
),
message_event AS (
    -- a message joins the conversation at its seq, and leaves the context at its summary's
    SELECT conversation_id, seq, 1 AS joined, 0 AS replaced FROM message
    UNION ALL
    SELECT m.conversation_id, s.seq, 0, 1
    FROM message AS m
    JOIN message AS s ON s.id = m.summary_id
),
running AS (
    SELECT
        conversation_id,
        seq,
        sum(sum(joined)) OVER w AS messages,
        sum(sum(replaced)) OVER w AS replaced
    FROM message_event
    GROUP BY conversation_id, seq
    WINDOW w AS (PARTITION BY conversation_id ORDER BY seq)
)
SELECT
    s.conversation_id,
    s.run_id,
    s.run_number,
    s.agent_name,
    s.step_index,
    s.step_number,
    s.started_at,
    s.called_model,
    s.input_tokens,
    coalesce(k.compactions, 0) AS compactions,
    coalesce(k.tokens_saved, 0) AS tokens_saved,
    coalesce(k.masked_results, 0) AS masked_results,
    coalesce(k.summarized_messages, 0) AS summarized_messages,
    CAST(m.messages - m.replaced AS BIGINT) AS messages_in_context,
    CAST(m.replaced AS BIGINT) AS messages_out_of_context
FROM run_step AS s
LEFT JOIN compacted AS k USING (run_id, step_index)
LEFT JOIN running AS m ON m.conversation_id = s.conversation_id AND m.seq = s.first_seq
ORDER BY s.conversation_id, s.step_number;
