-- Agents list their own operations, newest first, a page at a time
-- (`GET /agent/operations`, MCP's `list_operations`): one index scan per page, however
-- many operations the agent has. It replaces operations_spend_window
-- (agent_id, currency, created_at), whose one remaining reader (a budget's refill from
-- the agent's operations, V10) filters by agent and time, not currency, and is served
-- as well by this one: the table keeps the same number of indexes to maintain.
CREATE INDEX operations_agent_newest
    ON operations (agent_id, created_at DESC, operation_id DESC);
DROP INDEX operations_spend_window;
