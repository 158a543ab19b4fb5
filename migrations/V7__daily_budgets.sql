-- Spend budgets per agent and currency over a rolling 24 hours: {"USD": "5000.00"}.
-- What an agent has spent is read from its operations (money-moving, not refunds, not
-- FAILED, registered in the last 24 hours), under a lock on the agent's row taken by
-- every budgeted registration, so concurrent registrations cannot spend the same
-- headroom; a FAILED operation gives its amount back by no longer counting.
ALTER TABLE agents ADD COLUMN daily_budgets JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE agents ADD CONSTRAINT agents_daily_budgets_object
    CHECK (jsonb_typeof(daily_budgets) = 'object');

CREATE INDEX operations_spend_window ON operations (agent_id, currency, created_at)
    WHERE amount IS NOT NULL AND operation_type <> 'refund';
