-- V11's listing index (agent_id, created_at DESC, operation_id DESC) led with agent_id,
-- so on a table with no statistics yet (a new deployment's first minute, before
-- autovacuum analyzes it) the planner could pick it for the idempotency-key lookup on
-- every request, `agent_id = $1` with a filter on the key, and cache that plan: each
-- request then read all of the agent's operations (measured: intake at 8 clients fell
-- from about 1,800 to 500 registrations/s within seconds, falling further as rows came).
-- The index is now partial on a predicate only the listing query states, so no other
-- statement can use it and the key lookup has one index to choose, the unique one.
DROP INDEX operations_agent_newest;
CREATE INDEX operations_agent_newest
    ON operations (agent_id, created_at DESC, operation_id DESC)
    WHERE created_at IS NOT NULL;
