//! Fenced transitions, shared by the executor and the reconciler: one conditional
//! `UPDATE … WHERE status = <from> AND fencing_token = <mine>` plus its audit row (and
//! the removal of the outbox event) in one statement. Zero rows means the worker's
//! lease has passed to another; the refusal itself is audited, nothing else written.

use std::time::Duration;

use opgate_domain::OperationStatus;
use uuid::Uuid;

use crate::error::StoreError;
use crate::execution::millis;
use crate::pool::Store;

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    Applied,
    /// The fencing token or state had moved on: nothing was written but the audit
    /// row that records the refusal.
    RejectedStale,
}

impl FencedWrite {
    pub(crate) fn from_count(rows: i64) -> Self {
        if rows == 1 {
            Self::Applied
        } else {
            Self::RejectedStale
        }
    }
}

/// The state a worker moves its leased operation to.
pub struct Completion<'a> {
    pub status: OperationStatus,
    pub provider_reference: Option<&'a str>,
    pub last_error: Option<&'a str>,
    pub reason: &'a str,
    /// For UNKNOWN: when the reconciler should check (now when `None`).
    pub next_check_in: Option<Duration>,
}

pub(crate) const TRANSITION: &str = "
WITH updated AS (
    UPDATE operations
    SET status = $4,
        provider_reference = COALESCE($5, provider_reference),
        last_error = $6,
        lease_owner = NULL,
        lease_expires_at = NULL,
        next_attempt_at = CASE WHEN $4 = 'UNKNOWN'
                               THEN now() + $9::float8 * interval '1 millisecond' END,
        unknown_since = CASE WHEN $4 = 'UNKNOWN' AND $3 <> 'RECONCILING' THEN now()
                             ELSE unknown_since END,
        updated_at = now()
    WHERE operation_id = $1 AND fencing_token = $2 AND status = $3
    RETURNING operation_id, agent_id
), removed AS (
    DELETE FROM outbox WHERE operation_id IN (SELECT operation_id FROM updated)
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, $3, $4, $7, $8, $2 FROM updated
)
SELECT count(*) FROM updated";

const RECORD_STALE_WRITE: &str = "
INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token, outcome)
SELECT operation_id, agent_id, status, $3, $4, $5, $2, 'rejected_stale'
FROM operations WHERE operation_id = $1";

impl Store {
    /// Moves a leased operation from `from` to `completion.status`, only if this
    /// worker's fencing token is still current.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn transition_with_fence(
        &self,
        operation_id: Uuid,
        fencing_token: i64,
        from: OperationStatus,
        actor: &str,
        completion: &Completion<'_>,
    ) -> Result<FencedWrite, StoreError> {
        debug_assert!(OperationStatus::can_transition(from, completion.status));
        let client = self.client().await?;
        let statement = client.prepare_cached(TRANSITION).await?;
        let next_check = millis(completion.next_check_in.unwrap_or_default());
        let row = client
            .query_one(
                &statement,
                &[
                    &operation_id,
                    &fencing_token,
                    &from.as_str(),
                    &completion.status.as_str(),
                    &completion.provider_reference,
                    &completion.last_error,
                    &actor,
                    &completion.reason,
                    &next_check,
                ],
            )
            .await?;
        let write = FencedWrite::from_count(row.get(0));
        if write == FencedWrite::RejectedStale {
            self.record_stale_write(
                operation_id,
                fencing_token,
                completion.status.as_str(),
                actor,
                completion.reason,
            )
            .await?;
        }
        Ok(write)
    }

    /// Records, without changing the operation, that this worker found its lease lost
    /// and discarded what it was doing.
    #[tracing::instrument(name = "INSERT operation_events", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operation_events"))]
    pub async fn record_lease_lost(
        &self,
        operation_id: Uuid,
        fencing_token: i64,
        actor: &str,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let why = format!(
            "lease lost (fencing token {fencing_token} no longer current); result discarded, nothing written"
        );
        client
            .execute(
                RECORD_STALE_WRITE,
                &[&operation_id, &fencing_token, &"IN_PROGRESS", &actor, &why],
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn record_stale_write(
        &self,
        operation_id: Uuid,
        fencing_token: i64,
        attempted_status: &str,
        actor: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let why = format!(
            "stale write rejected (fencing token {fencing_token} no longer current): {reason}"
        );
        client
            .execute(
                RECORD_STALE_WRITE,
                &[
                    &operation_id,
                    &fencing_token,
                    &attempted_status,
                    &actor,
                    &why,
                ],
            )
            .await?;
        Ok(())
    }
}
