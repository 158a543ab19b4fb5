-- An agent's rate limit ("50/s" or "600/m") and its burst, enforced by each intake
-- replica before any database work; NULL is no limit.
ALTER TABLE agents ADD COLUMN rate_limit TEXT;
ALTER TABLE agents ADD COLUMN rate_limit_burst INTEGER;
ALTER TABLE agents ADD CONSTRAINT agents_rate_limit_form
    CHECK (rate_limit ~ '^[1-9][0-9]{0,6}/[sm]$');
ALTER TABLE agents ADD CONSTRAINT agents_rate_limit_burst_complete
    CHECK ((rate_limit IS NULL) = (rate_limit_burst IS NULL) AND rate_limit_burst > 0);
