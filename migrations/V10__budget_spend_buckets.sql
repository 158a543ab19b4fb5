-- What each agent spent per currency per hour (UTC), for budgets: a budgeted
-- registration reads at most 25 of these rows instead of summing the agent's
-- operations, a cost that grew with every registration (measured: 342 → 155
-- registrations/s for one budgeted agent within half a minute). The window read is the
-- last 24 hours rounded out to whole hours (between 24 and 25 hours), so spending is
-- never under-counted. Setting or changing a budget fills the rows from the agent's
-- operations (`opgate agents update`), so spending from before the budget counts too.
CREATE TABLE agent_spend (
    agent_id TEXT      NOT NULL REFERENCES agents (agent_id),
    currency TEXT      NOT NULL,
    hour     TIMESTAMP NOT NULL,
    amount   NUMERIC   NOT NULL DEFAULT 0,
    PRIMARY KEY (agent_id, currency, hour)
);

-- Which operations a budget counted: only those give their amount back when they fail.
ALTER TABLE operations ADD COLUMN counted_in_budget BOOLEAN NOT NULL DEFAULT false;

CREATE FUNCTION release_failed_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE agent_spend
    SET amount = amount - NEW.amount
    WHERE agent_id = NEW.agent_id AND currency = NEW.currency
      AND hour = date_trunc('hour', NEW.created_at AT TIME ZONE 'UTC');
    RETURN NULL;
END
$$;

CREATE TRIGGER failed_operation_releases_spend
    AFTER UPDATE OF status ON operations
    FOR EACH ROW
    WHEN (NEW.status = 'FAILED' AND OLD.status <> 'FAILED' AND NEW.counted_in_budget)
    EXECUTE FUNCTION release_failed_spend();
