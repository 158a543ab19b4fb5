-- The pipeline gauges count operations in non-terminal states every few seconds; this
-- partial index keeps that cheap however many finished operations accumulate.
CREATE INDEX operations_unsettled_status ON operations (status)
    WHERE status IN ('PENDING', 'IN_PROGRESS', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW');
