-- The outbox becomes a ring of four partitions that executors rotate: every couple of
-- seconds the partitions no longer written to have their few live events moved into
-- the current one and are then truncated. TRUNCATE hands the table a new, empty file,
-- so the dead rows of drained events go with it even while a forgotten transaction's
-- snapshot stops VACUUM from removing anything: the claim's index scan never walks more
-- than a few seconds of dead events (docs/architecture.md, "The rotating outbox").
--
-- The table keeps its name and every column, so statements written for the single
-- table (the previous release's binaries, during a rolling upgrade) keep working.
-- Two things change:
-- - event_id takes its values from a sequence: PostgreSQL 15 has no identity columns
--   on partitioned tables.
-- - UNIQUE (operation_id, event_type) cannot hold across partitions (a unique index on
--   a partitioned table must contain the partition key). One event per operation rests
--   on the statements that write events: registration inserts the event only for the
--   operation row it has just inserted (ON CONFLICT on the operation's key), approval
--   only on its conditional AWAITING_APPROVAL → PENDING update, and a rotation moves
--   and truncates under one ACCESS EXCLUSIVE lock.

-- The partition new events go to: it changes every two seconds, round a ring of four.
-- now() is the transaction's start, so a registration still open when the slot moves
-- on writes to the previous one; the rotation waits for it (lock) and moves it later.
CREATE FUNCTION outbox_current_slot() RETURNS SMALLINT
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (floor(extract(epoch FROM now()) / 2)::BIGINT % 4)::SMALLINT;

ALTER TABLE outbox RENAME TO outbox_before_v13;
-- Constraint and index names are taken per schema: the new table's are the old ones.
ALTER TABLE outbox_before_v13 RENAME CONSTRAINT outbox_claim_complete TO outbox_before_v13_claim_complete;
ALTER TABLE outbox_before_v13 RENAME CONSTRAINT outbox_pkey TO outbox_before_v13_pkey;
ALTER TABLE outbox_before_v13 RENAME CONSTRAINT outbox_one_event_per_operation TO outbox_before_v13_one_event;
ALTER TABLE outbox_before_v13 RENAME CONSTRAINT outbox_attempts_check TO outbox_before_v13_attempts;
ALTER TABLE outbox_before_v13 RENAME CONSTRAINT outbox_event_type_check TO outbox_before_v13_event_type;
ALTER TABLE outbox_before_v13 RENAME CONSTRAINT outbox_operation_id_fkey TO outbox_before_v13_operation;
ALTER INDEX outbox_due RENAME TO outbox_before_v13_due;

CREATE SEQUENCE outbox_event_seq AS BIGINT;

CREATE TABLE outbox (
    event_id       BIGINT      NOT NULL DEFAULT nextval('outbox_event_seq'),
    operation_id   UUID        NOT NULL REFERENCES operations (operation_id) ON DELETE CASCADE,
    agent_id       TEXT        NOT NULL,
    event_type     TEXT        NOT NULL CHECK (event_type IN ('execute')),
    available_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_by     TEXT,
    claimed_until  TIMESTAMPTZ,
    attempts       INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    trace_context  TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    slot           SMALLINT    NOT NULL DEFAULT outbox_current_slot(),
    PRIMARY KEY (event_id, slot),
    CONSTRAINT outbox_claim_complete CHECK ((claimed_by IS NULL) = (claimed_until IS NULL))
) PARTITION BY LIST (slot);

ALTER SEQUENCE outbox_event_seq OWNED BY outbox.event_id;

CREATE TABLE outbox_s0 PARTITION OF outbox FOR VALUES IN (0);
CREATE TABLE outbox_s1 PARTITION OF outbox FOR VALUES IN (1);
CREATE TABLE outbox_s2 PARTITION OF outbox FOR VALUES IN (2);
CREATE TABLE outbox_s3 PARTITION OF outbox FOR VALUES IN (3);

-- The claim path: due events in order. Per-operation writes (heartbeat, requeue,
-- release, completion) find their event by operation.
CREATE INDEX outbox_due ON outbox (available_at, event_id);
CREATE INDEX outbox_by_operation ON outbox (operation_id);

-- What V4 set on the single table, now per partition (a partitioned table has no
-- storage of its own to vacuum). Between rotations autovacuum still cleans up when
-- it can; the rotation is for when it cannot.
ALTER TABLE outbox_s0 SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE outbox_s1 SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE outbox_s2 SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE outbox_s3 SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- Every pending event, as it was, into the current partition.
INSERT INTO outbox (event_id, operation_id, agent_id, event_type, available_at, claimed_by,
                    claimed_until, attempts, trace_context, created_at)
SELECT event_id, operation_id, agent_id, event_type, available_at, claimed_by,
       claimed_until, attempts, trace_context, created_at
FROM outbox_before_v13;

-- Ids carry on from where the identity column's sequence stopped.
SELECT setval('outbox_event_seq',
              GREATEST((SELECT last_value FROM outbox_event_id_seq),
                       (SELECT COALESCE(max(event_id), 0) FROM outbox_before_v13)) + 1,
              false);

DROP TABLE outbox_before_v13;
