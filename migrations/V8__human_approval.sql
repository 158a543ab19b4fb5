-- Human approval above a threshold: an operation registered as AWAITING_APPROVAL has no
-- outbox event (nothing can be sent) until an operator approves it, which moves it to
-- PENDING and enqueues it in one statement; rejection, or no decision by
-- approval_expires_at, makes it FAILED. The set of states is the domain's.
ALTER TABLE operations DROP CONSTRAINT operations_status_check;
ALTER TABLE operations ADD CONSTRAINT operations_status_check
    CHECK (status IN ('AWAITING_APPROVAL', 'PENDING', 'IN_PROGRESS', 'SUCCEEDED', 'FAILED',
                      'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'));
ALTER TABLE operation_events DROP CONSTRAINT operation_events_from_status_check;
ALTER TABLE operation_events ADD CONSTRAINT operation_events_from_status_check
    CHECK (from_status IN ('AWAITING_APPROVAL', 'PENDING', 'IN_PROGRESS', 'SUCCEEDED',
                           'FAILED', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'));
ALTER TABLE operation_events DROP CONSTRAINT operation_events_to_status_check;
ALTER TABLE operation_events ADD CONSTRAINT operation_events_to_status_check
    CHECK (to_status IN ('AWAITING_APPROVAL', 'PENDING', 'IN_PROGRESS', 'SUCCEEDED',
                         'FAILED', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW'));

-- When an undecided approval expires.
ALTER TABLE operations ADD COLUMN approval_expires_at TIMESTAMPTZ;
CREATE INDEX operations_awaiting_approval ON operations (approval_expires_at)
    WHERE status = 'AWAITING_APPROVAL';

-- {"USD": "500.00"}: amounts above which the agent's operations wait for an operator.
ALTER TABLE agents ADD COLUMN approval_above JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE agents ADD CONSTRAINT agents_approval_above_object
    CHECK (jsonb_typeof(approval_above) = 'object');
