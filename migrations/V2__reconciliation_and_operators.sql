-- The reconciler's bookkeeping and operators' credentials.

-- Provider lookups made for this operation since it last became UNKNOWN from
-- MANUAL_REVIEW (or ever): the reconciler escalates after a configurable number.
ALTER TABLE operations ADD COLUMN reconcile_checks INTEGER NOT NULL DEFAULT 0
    CHECK (reconcile_checks >= 0);

-- When the operation last became UNKNOWN from execution or from manual review: the
-- reconciler's not-found grace and age limit count from here, not from registration,
-- since an operation may wait in the outbox long before it is sent.
ALTER TABLE operations ADD COLUMN unknown_since TIMESTAMPTZ;

-- The reconciler's sweep: due UNKNOWN rows, and RECONCILING rows whose lease expired.
CREATE INDEX operations_reconcile_due ON operations (next_attempt_at)
    WHERE status = 'UNKNOWN';
CREATE INDEX operations_reconciling_lease ON operations (lease_expires_at)
    WHERE status = 'RECONCILING';

-- Operators work the manual-review queue. Their keys are a different kind from
-- agents' keys (prefix opo_), stored only as SHA-256.
CREATE TABLE operators (
    operator_id  TEXT        PRIMARY KEY CHECK (operator_id ~ '^[A-Za-z0-9._-]{1,100}$'),
    key_id       TEXT        NOT NULL UNIQUE,
    api_key_hash CHAR(64)    NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at   TIMESTAMPTZ
);
