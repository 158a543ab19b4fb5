//! The executor's write after a provider rate-limited a call (HTTP 429): the provider
//! did not take the request on, so the operation goes back to PENDING, its outbox event
//! due when the provider's `Retry-After` has passed, and the call is not counted: the
//! claim's `attempts` increment is undone and `retry_count` is left alone, so throttling
//! never uses up `--max-attempts` nor lengthens the backoff of a later requeue. Fenced
//! like every write after the claim.

use std::time::Duration;

use crate::error::StoreError;
use crate::execution::Requeue;
use crate::fenced::FencedWrite;
use crate::lease::Lease;
use crate::pool::Store;

/// `$1` operation, `$2` fencing token, `$3` last error, `$4` wait in ms, `$5` actor,
/// `$6` audit reason, `$7` agent. The claim counted one attempt (operation and outbox event) for
/// the call now refused: taken back here, in the same statement.
const REQUEUE_RATE_LIMITED: &str = "
WITH updated AS (
    UPDATE operations
    SET status = 'PENDING',
        attempts = GREATEST(attempts - 1, 0),
        last_error = $3,
        lease_owner = NULL,
        lease_expires_at = NULL,
        next_attempt_at = now() + $4::float8 * interval '1 millisecond',
        updated_at = now()
    WHERE operation_id = $1 AND agent_id = $7 AND fencing_token = $2 AND status = 'IN_PROGRESS'
    RETURNING operation_id, agent_id, next_attempt_at
), requeued AS (
    UPDATE outbox
    SET claimed_by = NULL, claimed_until = NULL, available_at = updated.next_attempt_at,
        attempts = GREATEST(outbox.attempts - 1, 0)
    FROM updated WHERE outbox.agent_id = $7 AND outbox.operation_id = updated.operation_id
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'IN_PROGRESS', 'PENDING', $5, $6, $2 FROM updated
)
SELECT count(*) FROM updated";

impl Store {
    /// Puts a rate-limited operation back to PENDING, due again after `retry_after`,
    /// without counting the refused call as an attempt.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn requeue_rate_limited(
        &self,
        lease: &Lease,
        actor: &str,
        retry_after: Duration,
    ) -> Result<FencedWrite, StoreError> {
        let reason = format!(
            "provider rate limited the request; retry after {} ms, not counted as an attempt",
            retry_after.as_millis()
        );
        let requeue = Requeue {
            lease,
            actor,
            delay: retry_after,
            last_error: "provider rate limited the request (HTTP 429)",
            reason: &reason,
        };
        self.requeue(REQUEUE_RATE_LIMITED, &requeue).await
    }
}
