-- Every key of a per-operation table includes agent_id, the column opgate distributes
-- by on Citus (docs/scale-out.md): Citus accepts a primary key, unique constraint or
-- foreign key on a distributed table only when it contains the distribution column,
-- because only then can one shard check it alone. On a single PostgreSQL nothing
-- changes for the statements: every key still leads with the column they look rows up
-- by (operation_id, event_id), and an operation's agent never changes.
--
-- operation_id stays unique by construction (random UUIDs); the key that PostgreSQL
-- enforces becomes (operation_id, agent_id).
--
-- operation_events.event_id becomes a plain sequence default instead of an identity
-- column, which Citus cannot distribute; it counts on from where the identity was.
--
-- Expand-only for running binaries: no column, name or default a statement uses
-- changes. The tables are locked at the start, all at once: a migration under load
-- waits there, and if it meets a running statement that holds one of them and waits
-- for another, the migration's lock_timeout (half of deadlock_timeout) rolls it back
-- and it runs again, before PostgreSQL would pick a victim (crates/store/src/migrate.rs).

LOCK TABLE operations, outbox, operation_events IN ACCESS EXCLUSIVE MODE;

ALTER TABLE outbox DROP CONSTRAINT outbox_operation_id_fkey;
ALTER TABLE operation_events DROP CONSTRAINT operation_events_operation_id_fkey;

ALTER TABLE operations DROP CONSTRAINT operations_pkey;
ALTER TABLE operations ADD CONSTRAINT operations_pkey PRIMARY KEY (operation_id, agent_id);

ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (event_id, agent_id, slot);
ALTER TABLE outbox ADD CONSTRAINT outbox_operation_fkey
    FOREIGN KEY (operation_id, agent_id) REFERENCES operations (operation_id, agent_id)
    ON DELETE CASCADE;

CREATE SEQUENCE operation_event_seq AS BIGINT;
SELECT setval('operation_event_seq', COALESCE(max(event_id), 0) + 1, false) FROM operation_events;
ALTER TABLE operation_events ALTER COLUMN event_id DROP IDENTITY;
ALTER TABLE operation_events ALTER COLUMN event_id SET DEFAULT nextval('operation_event_seq');
ALTER SEQUENCE operation_event_seq OWNED BY operation_events.event_id;

ALTER TABLE operation_events DROP CONSTRAINT operation_events_pkey;
ALTER TABLE operation_events ADD CONSTRAINT operation_events_pkey PRIMARY KEY (event_id, agent_id);
ALTER TABLE operation_events ADD CONSTRAINT operation_events_operation_fkey
    FOREIGN KEY (operation_id, agent_id) REFERENCES operations (operation_id, agent_id)
    ON DELETE CASCADE;
