-- opgate's initial schema: agents, operations, their outbox and their audit trail.
-- Every table carries agent_id so that an operation, its outbox event and its audit rows
-- can be co-located on one shard when distributed by agent_id.

CREATE TABLE agents (
    agent_id           TEXT        PRIMARY KEY
                                   CHECK (agent_id ~ '^[A-Za-z0-9._-]{1,100}$'),
    key_id             TEXT        NOT NULL UNIQUE,
    api_key_hash       CHAR(64)    NOT NULL,
    allowed_operations TEXT[]      NOT NULL DEFAULT ARRAY['payment'],
    -- {"USD": "1000.00"}: per-currency maximum amount; empty means no limit.
    max_amounts        JSONB       NOT NULL DEFAULT '{}'::jsonb
                                   CHECK (jsonb_typeof(max_amounts) = 'object'),
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at         TIMESTAMPTZ
);

CREATE TABLE operations (
    operation_id       UUID         PRIMARY KEY,
    agent_id           TEXT         NOT NULL REFERENCES agents (agent_id),
    idempotency_key    VARCHAR(255) NOT NULL,
    operation_type     TEXT         NOT NULL CHECK (operation_type IN ('payment')),
    customer_id        TEXT         NOT NULL,
    request_hash       CHAR(64)     NOT NULL,
    request_payload    JSONB        NOT NULL,
    status             TEXT         NOT NULL DEFAULT 'PENDING'
                                    CHECK (status IN ('PENDING', 'IN_PROGRESS', 'SUCCEEDED',
                                                      'FAILED', 'UNKNOWN', 'RECONCILING',
                                                      'MANUAL_REVIEW')),
    provider_reference TEXT,
    retry_count        INTEGER      NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    attempts           INTEGER      NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error         TEXT,
    -- Incremented on every claim; every write by a worker is conditional on it.
    fencing_token      BIGINT       NOT NULL DEFAULT 0,
    lease_owner        TEXT,
    lease_expires_at   TIMESTAMPTZ,
    next_attempt_at    TIMESTAMPTZ,
    -- W3C trace context (traceparent) of the request that registered the operation.
    trace_context      TEXT,
    created_at         TIMESTAMPTZ  NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ  NOT NULL DEFAULT now(),
    -- Keys are scoped per agent: one agent can neither collide with nor probe another's.
    CONSTRAINT operations_agent_idempotency_key UNIQUE (agent_id, idempotency_key),
    CONSTRAINT operations_lease_complete
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

CREATE INDEX operations_status_next_attempt ON operations (status, next_attempt_at)
    WHERE status IN ('UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW');

CREATE TABLE outbox (
    event_id       BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id   UUID        NOT NULL REFERENCES operations (operation_id) ON DELETE CASCADE,
    agent_id       TEXT        NOT NULL,
    event_type     TEXT        NOT NULL CHECK (event_type IN ('execute')),
    available_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_by     TEXT,
    claimed_until  TIMESTAMPTZ,
    attempts       INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    trace_context  TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- One execute event per operation, ever: a replay can never enqueue a second one.
    CONSTRAINT outbox_one_event_per_operation UNIQUE (operation_id, event_type),
    CONSTRAINT outbox_claim_complete CHECK ((claimed_by IS NULL) = (claimed_until IS NULL))
);

-- The claim path: due events in order.
CREATE INDEX outbox_due ON outbox (available_at, event_id);

CREATE TABLE operation_events (
    event_id       BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id   UUID        NOT NULL REFERENCES operations (operation_id) ON DELETE CASCADE,
    agent_id       TEXT        NOT NULL,
    from_status    TEXT        CHECK (from_status IN ('PENDING', 'IN_PROGRESS', 'SUCCEEDED',
                                                      'FAILED', 'UNKNOWN', 'RECONCILING',
                                                      'MANUAL_REVIEW')),
    to_status      TEXT        NOT NULL
                               CHECK (to_status IN ('PENDING', 'IN_PROGRESS', 'SUCCEEDED',
                                                    'FAILED', 'UNKNOWN', 'RECONCILING',
                                                    'MANUAL_REVIEW')),
    actor          TEXT        NOT NULL,
    reason         TEXT,
    fencing_token  BIGINT,
    -- 'applied': the transition happened. 'rejected_stale': a worker whose fencing token
    -- was no longer current tried it and was refused; kept so that takeovers are visible.
    outcome        TEXT        NOT NULL DEFAULT 'applied'
                               CHECK (outcome IN ('applied', 'rejected_stale')),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX operation_events_by_operation ON operation_events (operation_id, event_id);
