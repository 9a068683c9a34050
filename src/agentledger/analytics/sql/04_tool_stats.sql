-- agentledger analytics, 04: tools.
--
-- tool_stats: per tool, its calls, errors, error rate and duration percentiles (milliseconds);
-- tool_stats_by_agent and tool_stats_by_model split the same by the agent that called the
-- tool and by the model whose step asked for it; tool_stats_by_server per MCP server the tools
-- came from (the server a call went to is in the tool execution's metadata, mcp_server), with
-- how many of its tools were called: the agent's own tools (Python functions, spawned
-- subagents) have a NULL server.

CREATE OR REPLACE MACRO _tool_stats_columns(duration_ms, is_error) AS (
    struct_pack(
        calls := count(*),
        errors := count(*) FILTER (WHERE is_error),
        error_rate := count(*) FILTER (WHERE is_error) / count(*),
        mean_ms := avg(duration_ms),
        p50_ms := quantile_cont(duration_ms, 0.50),
        p95_ms := quantile_cont(duration_ms, 0.95),
        p99_ms := quantile_cont(duration_ms, 0.99),
        max_ms := max(duration_ms)
    )
);

CREATE OR REPLACE VIEW tool_stats AS
SELECT tool_name, unnest(_tool_stats_columns(duration_ms, CAST(is_error AS BOOLEAN)))
FROM ledger.tool_executions  -- the tool rows alone: no join needed
GROUP BY tool_name;

CREATE OR REPLACE VIEW tool_stats_by_agent AS
SELECT tool_name, agent_name, unnest(_tool_stats_columns(duration_ms, is_error))
FROM tool_calls
GROUP BY tool_name, agent_name;

CREATE OR REPLACE VIEW tool_stats_by_model AS
SELECT tool_name, model, unnest(_tool_stats_columns(duration_ms, is_error))
FROM tool_calls
GROUP BY tool_name, model;

CREATE OR REPLACE VIEW tool_stats_by_server AS
SELECT
    json_extract_string(metadata, '$.mcp_server') AS server,
    count(DISTINCT tool_name) AS tools,
    unnest(_tool_stats_columns(duration_ms, CAST(is_error AS BOOLEAN)))
FROM ledger.tool_executions
GROUP BY server;
