-- Operations that wait on something other than an executor (an operator's approval,
-- the reconciler, an operator's review) are listed in a table of their own, kept by a
-- trigger, and operations loses the five indexes that named its status.
--
-- Why: PostgreSQL can update a row in place on its page without touching any index
-- (a HOT update) only when the update changes no column that an index keys on or
-- filters by. status was in five indexes of operations, and the lease and next-attempt
-- times in two more, so the executor's claim (PENDING → IN_PROGRESS) and its completion
-- (→ SUCCEEDED) each wrote a new entry into every index of operations, the random
-- (agent, Idempotency-Key) index included: about 16 buffers per claimed operation.
-- Measured on a copy with these indexes dropped: claim 3.4-3.7 → 2.7 ms, completion
-- 3.7 → 2.7-2.9 ms for a batch of 32.
--
-- The rows the dropped indexes served are few (no more than the operations waiting on
-- an operator or the reconciler), so they move to held_operations, one row per such
-- operation with the time it is due:
--   AWAITING_APPROVAL: approval_expires_at   (approval expiry)
--   UNKNOWN:           next_attempt_at       (the reconciler's next lookup)
--   RECONCILING:       lease_expires_at      (a dead reconciler's rescue)
--   MANUAL_REVIEW:     NULL                  (operators list them)
-- The trigger writes it in the same transaction as the operation's row, after the
-- row's lock is taken, so the two cannot disagree and every path that changes a status
-- (executor, reconciler, operators, approvals, a hand-written UPDATE) keeps it, the way
-- V5's and V10's triggers keep refunds and budgets. Its WHEN clause is false for the
-- executor's path (PENDING, IN_PROGRESS, SUCCEEDED, FAILED on both sides), so a claim or
-- a completion calls no function.
--
-- PENDING and IN_PROGRESS are counted from the outbox, which holds exactly one event
-- for each such operation (claimed while it is IN_PROGRESS).
--
-- fillfactor 80 leaves room on each page for the two new versions of a row that the
-- claim and the completion write, so they stay on its page.
--
-- The previous release's binaries keep working against this schema: no column they
-- read or write changes. Their status lookups lose their indexes and become slower,
-- for as long as a rolling upgrade lasts.

LOCK TABLE operations IN ACCESS EXCLUSIVE MODE;

-- On a database already distributed with Citus, creating a trigger on operations needs
-- this (as `opgate migrate --citus` sets when it distributes); on PostgreSQL without
-- Citus it sets a placeholder that nothing reads.
SET LOCAL citus.enable_unsafe_triggers TO on;

CREATE TABLE held_operations (
    operation_id UUID        NOT NULL,
    agent_id     TEXT        NOT NULL,
    status       TEXT        NOT NULL
                             CHECK (status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING',
                                               'MANUAL_REVIEW')),
    due_at       TIMESTAMPTZ,
    PRIMARY KEY (operation_id, agent_id)
);

-- Citus refuses a foreign key from a local table to a distributed one: on a database
-- already distributed, held_operations is distributed by `opgate migrate --citus`
-- after this migration, without the key (the trigger is what keeps it in step).
DO $$
DECLARE
    distributed BOOLEAN := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                                WHERE logicalrelid = ''operations''::regclass)'
            INTO distributed;
    END IF;
    IF NOT distributed THEN
        ALTER TABLE held_operations ADD CONSTRAINT held_operations_operation_fkey
            FOREIGN KEY (operation_id, agent_id) REFERENCES operations (operation_id, agent_id)
            ON DELETE CASCADE;
    END IF;
END
$$;

-- Every reader walks one status in due order: the reconciler's UNKNOWN (never-set
-- times first) and RECONCILING, approval expiry, operators' MANUAL_REVIEW.
CREATE INDEX held_operations_due ON held_operations (status, due_at NULLS FIRST);

CREATE FUNCTION hold_operation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') THEN
        INSERT INTO held_operations (operation_id, agent_id, status, due_at)
        VALUES (NEW.operation_id, NEW.agent_id, NEW.status,
                CASE NEW.status
                    WHEN 'AWAITING_APPROVAL' THEN NEW.approval_expires_at
                    WHEN 'UNKNOWN' THEN NEW.next_attempt_at
                    WHEN 'RECONCILING' THEN NEW.lease_expires_at
                END)
        ON CONFLICT (operation_id, agent_id)
        DO UPDATE SET status = EXCLUDED.status, due_at = EXCLUDED.due_at;
    ELSE
        DELETE FROM held_operations
        WHERE operation_id = NEW.operation_id AND agent_id = NEW.agent_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER operation_held_on_insert
    AFTER INSERT ON operations
    FOR EACH ROW
    WHEN (NEW.status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'))
    EXECUTE FUNCTION hold_operation();

CREATE TRIGGER operation_held_on_update
    AFTER UPDATE OF status, approval_expires_at, next_attempt_at, lease_expires_at
    ON operations
    FOR EACH ROW
    WHEN (OLD.status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW')
          OR NEW.status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'))
    EXECUTE FUNCTION hold_operation();

INSERT INTO held_operations (operation_id, agent_id, status, due_at)
SELECT operation_id, agent_id, status,
       CASE status
           WHEN 'AWAITING_APPROVAL' THEN approval_expires_at
           WHEN 'UNKNOWN' THEN next_attempt_at
           WHEN 'RECONCILING' THEN lease_expires_at
       END
FROM operations
WHERE status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW');

DROP INDEX operations_status_next_attempt;
DROP INDEX operations_reconcile_due;
DROP INDEX operations_reconciling_lease;
DROP INDEX operations_unsettled_status;
DROP INDEX operations_awaiting_approval;

ALTER TABLE operations SET (fillfactor = 80);
