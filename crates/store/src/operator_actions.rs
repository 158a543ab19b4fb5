//! What operators do to operations: list them, resolve one out of MANUAL_REVIEW, send
//! it back to the reconciler, or decide one that is AWAITING_APPROVAL (approve: it is
//! enqueued for the executors; reject: it fails, never sent). Every write is one
//! statement, conditional on the state it leaves, and is audited with the operator's
//! name.

use opgate_domain::OperationStatus;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::audit_apart::{returning_audit_rows, write_then_audit_in};
use crate::error::StoreError;
use crate::operations::{
    operation_columns, operation_from_row, OperationRecord, INSERT_OUTBOX_EVENT,
};
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
    /// A resolution found the operation not in MANUAL_REVIEW (it may have been resolved
    /// already); nothing changed. Carries the status it is in.
    NotInReview(OperationStatus),
    /// An approval or rejection found the operation not AWAITING_APPROVAL (decided
    /// already, or expired); nothing changed. Carries the status it is in.
    NotAwaitingApproval(OperationStatus),
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

/// `LIST_OPERATIONS` for a status that held_operations lists (V15): operators' usual
/// question (what is in MANUAL_REVIEW, what awaits approval) reads those few rows, not
/// every operation.
const LIST_HELD_OPERATIONS: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations
     WHERE (operation_id, agent_id) IN (
         SELECT operation_id, agent_id FROM held_operations
         WHERE status = $1 AND ($2::text IS NULL OR agent_id = $2))
       AND status = $1
     ORDER BY created_at DESC, operation_id
     LIMIT $3"
);

/// The statuses held_operations lists.
fn is_held(status: OperationStatus) -> bool {
    matches!(
        status,
        OperationStatus::AwaitingApproval
            | OperationStatus::Unknown
            | OperationStatus::Reconciling
            | OperationStatus::ManualReview
    )
}

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
    WHERE operation_id = $1 AND agent_id = $6 AND status = 'MANUAL_REVIEW'
    RETURNING *
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'MANUAL_REVIEW', $2, $5, $4, NULL::bigint FROM updated
)
SELECT ",
    operation_columns!(),
    " FROM updated"
);

/// AWAITING_APPROVAL → PENDING, its outbox event (the first and only one: nothing was
/// enqueued while it waited) and its audit row, in one statement: the executors can
/// claim it as soon as this commits, and only if this applied.
macro_rules! outbox_event_cte {
    () => {
        "), outbox_event AS (
    INSERT INTO outbox (operation_id, agent_id, event_type, trace_context)
    SELECT operation_id, agent_id, 'execute', trace_context FROM updated
"
    };
}
const OUTBOX_EVENT_CTE: &str = outbox_event_cte!();

const APPROVE_OPERATION: &str = concat!(
    "WITH updated AS (
    UPDATE operations
    SET status = 'PENDING',
        approval_expires_at = NULL,
        updated_at = now()
    WHERE operation_id = $1 AND agent_id = $4 AND status = 'AWAITING_APPROVAL'
    RETURNING *
", outbox_event_cte!(), "), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'AWAITING_APPROVAL', 'PENDING', $2, $3, NULL::bigint FROM updated
)
SELECT ",
    operation_columns!(),
    " FROM updated"
);

/// AWAITING_APPROVAL → FAILED with the operator's reason, audited; no outbox event, so
/// it is never sent. (A refund's reservation is given back by the V5 trigger.)
const REJECT_OPERATION: &str = concat!(
    "WITH updated AS (
    UPDATE operations
    SET status = 'FAILED',
        last_error = $3,
        approval_expires_at = NULL,
        updated_at = now()
    WHERE operation_id = $1 AND agent_id = $4 AND status = 'AWAITING_APPROVAL'
    RETURNING *
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'AWAITING_APPROVAL', 'FAILED', $2, $3, NULL::bigint FROM updated
)
SELECT ",
    operation_columns!(),
    " FROM updated"
);

/// The audit reason of an approval.
fn approval_reason(reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("approved by operator: {reason}"),
        None => "approved by operator".to_owned(),
    }
}

/// The audit reason and `last_error` of a rejection.
fn rejection_reason(reason: &str) -> String {
    format!("rejected by operator: {reason}")
}

/// An operator names an operation by its id alone; the statements that change it also
/// name its agent, read first here, so that on Citus they run on the agent's node (this
/// read, of every shard, takes no lock). The agent of an operation never changes.
const AGENT_OF: &str = "SELECT agent_id FROM operations WHERE operation_id = $1";

const CURRENT_STATUS: &str =
    "SELECT status FROM operations WHERE operation_id = $1 AND agent_id = $2";

impl Store {
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn list_operations(
        &self,
        filter: &OperationFilter,
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let client = self.client().await?;
        let statement = match filter.status {
            Some(status) if is_held(status) => LIST_HELD_OPERATIONS,
            _ => LIST_OPERATIONS,
        };
        let status = filter.status.map(|s| s.as_str());
        let rows = client
            .query(statement, &[&status, &filter.agent_id, &filter.limit])
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
        let Some(agent_id) = agent_of(&client, operation_id).await? else {
            return Ok(OperatorAction::NotFound);
        };
        let params: [&(dyn ToSql + Sync); 6] = [
            &operation_id,
            &to.as_str(),
            &provider_reference,
            &reason,
            &actor,
            &agent_id,
        ];
        let row = self.decide(RESOLVE_FROM_REVIEW, &params).await?;
        if let Some(row) = row {
            return Ok(OperatorAction::Applied(operation_from_row(&row)?));
        }
        Ok(
            match current_status(&client, operation_id, &agent_id).await? {
                None => OperatorAction::NotFound,
                Some(status) => OperatorAction::NotInReview(status),
            },
        )
    }

    /// Approves an operation that is AWAITING_APPROVAL: it becomes PENDING and its
    /// outbox event is written in the same statement, audited as `operator:<operator>`
    /// with "approved by operator" (and the operator's reason, if given). Anything else
    /// is left as it is: `NotAwaitingApproval` with its status, or `NotFound`. Callers
    /// wake the executors after this returns `Applied` (it has committed).
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn approve_operation(
        &self,
        operation_id: Uuid,
        operator: &str,
        reason: Option<&str>,
    ) -> Result<OperatorAction, StoreError> {
        let actor = format!("operator:{operator}");
        let reason = approval_reason(reason);
        self.decide_approval(APPROVE_OPERATION, operation_id, &actor, &reason)
            .await
    }

    /// Rejects an operation that is AWAITING_APPROVAL: it becomes FAILED with
    /// `last_error` "rejected by operator: <reason>", audited as `operator:<operator>`,
    /// and is never sent. Anything else is left as it is: `NotAwaitingApproval` with
    /// its status, or `NotFound`.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn reject_operation(
        &self,
        operation_id: Uuid,
        operator: &str,
        reason: &str,
    ) -> Result<OperatorAction, StoreError> {
        let actor = format!("operator:{operator}");
        let reason = rejection_reason(reason);
        self.decide_approval(REJECT_OPERATION, operation_id, &actor, &reason)
            .await
    }

    /// Runs an approval decision (`$1` the operation, `$2` the actor, `$3` the reason,
    /// `$4` its agent);
    /// when it did not apply, reads what the operation is now, with a fresh snapshot.
    async fn decide_approval(
        &self,
        statement: &str,
        operation_id: Uuid,
        actor: &str,
        reason: &str,
    ) -> Result<OperatorAction, StoreError> {
        debug_assert!(OperationStatus::can_transition(
            OperationStatus::AwaitingApproval,
            OperationStatus::Pending
        ));
        debug_assert!(OperationStatus::can_transition(
            OperationStatus::AwaitingApproval,
            OperationStatus::Failed
        ));
        let client = self.client().await?;
        let Some(agent_id) = agent_of(&client, operation_id).await? else {
            return Ok(OperatorAction::NotFound);
        };
        let params: [&(dyn ToSql + Sync); 4] = [&operation_id, &actor, &reason, &agent_id];
        let row = self.decide(statement, &params).await?;
        if let Some(row) = row {
            return Ok(OperatorAction::Applied(operation_from_row(&row)?));
        }
        Ok(
            match current_status(&client, operation_id, &agent_id).await? {
                None => OperatorAction::NotFound,
                Some(status) => OperatorAction::NotAwaitingApproval(status),
            },
        )
    }
}

impl Store {
    /// Runs an operator's decision; its row if it applied. On Citus its outbox event
    /// and audit row are written apart (`audit_apart`), in one transaction on the
    /// agent's node: from the update's CTE they would be committed on every worker.
    async fn decide(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let distributed = self.is_distributed().await?;
        let mut client = self.client().await?;
        if !distributed {
            return Ok(client.query_opt(statement, params).await?);
        }
        let enqueues = statement.contains(OUTBOX_EVENT_CTE);
        let apart = returning_audit_rows(&statement.replacen(OUTBOX_EVENT_CTE, "", 1));
        let transaction = client.transaction().await?;
        let rows = write_then_audit_in(&transaction, &apart, params).await?;
        if enqueues {
            for row in &rows {
                let (id, agent): (Uuid, String) = (row.get("operation_id"), row.get("agent_id"));
                let trace: Option<String> = row.get("trace_context");
                transaction
                    .execute(INSERT_OUTBOX_EVENT, &[&id, &agent, &trace])
                    .await?;
            }
        }
        transaction.commit().await?;
        Ok(rows.into_iter().next())
    }
}

/// The agent of the operation, if it exists.
async fn agent_of(
    client: &tokio_postgres::Client,
    operation_id: Uuid,
) -> Result<Option<String>, StoreError> {
    let row = client.query_opt(AGENT_OF, &[&operation_id]).await?;
    Ok(row.map(|row| row.get(0)))
}

/// The operation's status now, if it exists.
async fn current_status(
    client: &tokio_postgres::Client,
    operation_id: Uuid,
    agent_id: &str,
) -> Result<Option<OperationStatus>, StoreError> {
    let row = client
        .query_opt(CURRENT_STATUS, &[&operation_id, &agent_id])
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let status: String = row.get(0);
    Ok(Some(status.parse()?))
}
