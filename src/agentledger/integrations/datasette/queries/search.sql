-- Search the conversations
--
-- The conversation messages holding every word of the query, best matches first (SQLite's
-- full-text index, conversation_messages_fts); as Ledger.search(query) finds them. Each word
-- is matched as a word, never as search syntax: quotes, operators and SQL are plain text.
SELECT
    m.conversation_id,
    m.seq,
    m.role,
    snippet(conversation_messages_fts, 0, '[', ']', '…', 16) AS snippet,
    m.content,
    m.section,
    m.run_id,
    m.created_at,
    m.id
FROM conversation_messages_fts AS f
JOIN conversation_messages AS m ON m.id = f.message_id
WHERE conversation_messages_fts MATCH '"' || replace(replace(trim(:query), '"', '""'), ' ', '" "') || '"'
ORDER BY f.rank, m.seq
LIMIT 100
