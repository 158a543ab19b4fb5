-- The unique (agent_id, idempotency_key) index becomes (idempotency_key, agent_id): the
-- same constraint, name and columns, so every statement and `ON CONFLICT (agent_id,
-- idempotency_key)` finds it as before, but it no longer leads with agent_id.
--
-- Led by agent_id, it served a foreign-key check of operations (`operation_id = $1 AND
-- agent_id = $2`, run for every outbox and audit row inserted) as well as the primary
-- key did while the table was nearly empty: both cost the same, and PostgreSQL could
-- keep the plan that looked the agent up and filtered on operation_id. That plan stays
-- with the connection until an ANALYZE, and reads all of the agent's operations for
-- every row inserted: on a new deployment a budgeted batch's checks took 20 ms, and
-- registrations fell to 400-800 a second within twelve seconds, against 4,500-6,000
-- when the connection kept the primary key (auto_explain, pg_stat_user_indexes). Led by the key, this index cannot serve a
-- lookup by agent, so the checks use the primary key whatever the statistics say.
--
-- Nothing else looks operations up by agent alone through it: listings use the partial
-- `operations_agent_newest`, key lookups name both columns. Rebuilding the index locks
-- operations for the time it takes (nothing has been released yet).

LOCK TABLE operations IN ACCESS EXCLUSIVE MODE;

ALTER TABLE operations DROP CONSTRAINT operations_agent_idempotency_key;
ALTER TABLE operations
    ADD CONSTRAINT operations_agent_idempotency_key UNIQUE (idempotency_key, agent_id);
