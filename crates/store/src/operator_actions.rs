//! What operators do to operations: list them, resolve one out of MANUAL_REVIEW, or
//! send it back to the reconciler. Every write is conditional on the operation being
//! in MANUAL_REVIEW and is audited with the operator's name.

use opgate_domain::OperationStatus;
use uuid::Uuid;

use crate::error::StoreError;
use crate::operations::{operation_columns, operation_from_row, OperationRecord};
use crate::pool::Store;

#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    pub status: Option<OperationStatus>,
    pub agent_id: Option<String>,
    pub limit: i64,
}

/// What an operator's action did.
#[derive(Debug, Clone, PartialEq)]
// One answer per request, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum OperatorAction {
    Applied(OperationRecord),
    /// The operation is not in MANUAL_REVIEW (it may have been resolved already).
    NotInReview(OperationStatus),
    NotFound,
}

const LIST_OPERATIONS: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations
     WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR agent_id = $2)
     ORDER BY created_at DESC, operation_id
     LIMIT $3"
);

const RESOLVE_FROM_REVIEW: &str = concat!(
    "WITH updated AS (
    UPDATE operations
    SET status = $2,
        provider_reference = COALESCE($3, provider_reference),
        last_error = CASE WHEN $2 = 'FAILED' THEN $4 ELSE NULL END,
        next_attempt_at = CASE WHEN $2 = 'UNKNOWN' THEN now() END,
        reconcile_checks = CASE WHEN $2 = 'UNKNOWN' THEN 0 ELSE reconcile_checks END,
        unknown_since = CASE WHEN $2 = 'UNKNOWN' THEN now() ELSE unknown_since END,
        updated_at = now()
    WHERE operation_id = $1 AND status = 'MANUAL_REVIEW'
    RETURNING *
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
    SELECT operation_id, agent_id, 'MANUAL_REVIEW', $2, $5, $4 FROM updated
)
SELECT ",
    operation_columns!(),
    " FROM updated"
);

const CURRENT_STATUS: &str = "SELECT status FROM operations WHERE operation_id = $1";

impl Store {
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn list_operations(
        &self,
        filter: &OperationFilter,
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let client = self.client().await?;
        let status = filter.status.map(|s| s.as_str());
        let rows = client
            .query(LIST_OPERATIONS, &[&status, &filter.agent_id, &filter.limit])
            .await?;
        rows.iter().map(operation_from_row).collect()
    }

    /// Moves an operation out of MANUAL_REVIEW: to SUCCEEDED or FAILED (an operator's
    /// decision), or to UNKNOWN (back to the reconciler, checks counted afresh).
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn resolve_manual_review(
        &self,
        operation_id: Uuid,
        to: OperationStatus,
        provider_reference: Option<&str>,
        reason: &str,
        actor: &str,
    ) -> Result<OperatorAction, StoreError> {
        debug_assert!(OperationStatus::can_transition(
            OperationStatus::ManualReview,
            to
        ));
        let client = self.client().await?;
        let row = client
            .query_opt(
                RESOLVE_FROM_REVIEW,
                &[
                    &operation_id,
                    &to.as_str(),
                    &provider_reference,
                    &reason,
                    &actor,
                ],
            )
            .await?;
        if let Some(row) = row {
            return Ok(OperatorAction::Applied(operation_from_row(&row)?));
        }
        let current = client.query_opt(CURRENT_STATUS, &[&operation_id]).await?;
        match current {
            None => Ok(OperatorAction::NotFound),
            Some(row) => {
                let status: String = row.get(0);
                let status = status.parse()?;
                Ok(OperatorAction::NotInReview(status))
            }
        }
    }
}
