//! The reconciler's claim: due UNKNOWN operations, and RECONCILING ones whose
//! reconciler died (lease expired), move to RECONCILING under a new fencing token, in
//! one statement with their audit rows. Its outcome is written by
//! `transition_with_fence` from RECONCILING.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use opgate_domain::OperationStatus;
use rust_decimal::Decimal;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::audit_apart::returning_audit_rows;
use crate::citus::{agent_by_agent, for_one_agent};
use crate::error::StoreError;
use crate::execution::millis;
use crate::lease::Lease;
use crate::pool::Store;

#[derive(Debug, Clone)]
pub struct ClaimedReconciliation {
    pub operation_id: Uuid,
    pub agent_id: String,
    /// The kind, and the provider that executed it: the one asked.
    pub operation_type: String,
    pub provider: String,
    pub fencing_token: i64,
    /// RECONCILING means a previous reconciler's lease expired: a rescue.
    pub previous_status: OperationStatus,
    /// Lookups made so far, this one included.
    pub checks: i32,
    pub provider_reference: Option<String>,
    pub payload: serde_json::Value,
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When it last became UNKNOWN from execution or review (`created_at` if never
    /// recorded): the reference for the not-found grace and the age limit.
    pub unknown_since: DateTime<Utc>,
    /// W3C `traceparent` of the registering request.
    pub trace_context: Option<String>,
}

const CLAIM_DUE_RECONCILIATIONS: &str = "
-- Found through held_operations (V15), locked and checked again on operations: a row
-- of operations changed since this statement's snapshot is read again once locked, and
-- only the conditions on op hold for its new version.
WITH due_unknown AS (
    SELECT op.operation_id, op.agent_id, op.status AS previous_status
    FROM held_operations h
    JOIN operations op ON op.operation_id = h.operation_id AND op.agent_id = h.agent_id
    WHERE h.status = 'UNKNOWN' AND (h.due_at IS NULL OR h.due_at <= now())
      AND op.status = 'UNKNOWN' AND (op.next_attempt_at IS NULL OR op.next_attempt_at <= now())
    ORDER BY h.due_at NULLS FIRST
    -- A subquery, so that PostgreSQL can keep one plan for every batch size.
    LIMIT (SELECT $3::bigint)
    FOR UPDATE OF op SKIP LOCKED
), due_abandoned AS (
    SELECT op.operation_id, op.agent_id, op.status AS previous_status
    FROM held_operations h
    JOIN operations op ON op.operation_id = h.operation_id AND op.agent_id = h.agent_id
    WHERE h.status = 'RECONCILING' AND h.due_at < now()
      AND op.status = 'RECONCILING' AND op.lease_expires_at < now()
    ORDER BY h.due_at NULLS FIRST
    LIMIT (SELECT $3::bigint)
    FOR UPDATE OF op SKIP LOCKED
), due AS (
    SELECT * FROM due_unknown UNION ALL SELECT * FROM due_abandoned
), claimed AS (
    UPDATE operations op
    SET status = 'RECONCILING',
        fencing_token = op.fencing_token + 1,
        lease_owner = $1,
        lease_expires_at = now() + $2::float8 * interval '1 millisecond',
        reconcile_checks = op.reconcile_checks + 1,
        updated_at = now()
    FROM due
    WHERE op.operation_id = due.operation_id AND op.agent_id = due.agent_id
    RETURNING op.operation_id, op.agent_id, op.operation_type, op.provider, op.fencing_token,
              due.previous_status, op.reconcile_checks, op.provider_reference,
              op.request_payload, op.amount, op.currency, op.created_at,
              COALESCE(op.unknown_since, op.created_at) AS unknown_since,
              op.trace_context
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, previous_status, 'RECONCILING', $1,
           CASE WHEN previous_status = 'RECONCILING'
                THEN 'lease expired; rescued (check ' || reconcile_checks || ')'
                ELSE 'provider lookup (check ' || reconcile_checks || ')' END,
           fencing_token
    FROM claimed
)
SELECT * FROM claimed";

/// `CLAIM_DUE_RECONCILIATIONS` for one agent (`$4`), which Citus runs on one node, its
/// audit rows written apart (`audit_apart`). Its batch size is a plain parameter, as the
/// executor's per-agent claim's is (the subquery has not been through Citus's router).
static CLAIM_DUE_RECONCILIATIONS_OF_AGENT: LazyLock<String> = LazyLock::new(|| {
    for_one_agent(
        &returning_audit_rows(CLAIM_DUE_RECONCILIATIONS),
        &[
            ("LIMIT (SELECT $3::bigint)", "LIMIT $3"),
            ("LIMIT (SELECT $3::bigint)", "LIMIT $3"),
            (
                "WHERE h.status = 'UNKNOWN' AND",
                "WHERE h.agent_id = $4 AND op.agent_id = $4 AND h.status = 'UNKNOWN' AND",
            ),
            (
                "WHERE h.status = 'RECONCILING' AND",
                "WHERE h.agent_id = $4 AND op.agent_id = $4 AND h.status = 'RECONCILING' AND",
            ),
            (
                "WHERE op.operation_id = due.operation_id",
                "WHERE op.agent_id = $4 AND op.operation_id = due.operation_id",
            ),
        ],
    )
});

/// Agents with operations the reconciler would claim (on Citus, the agents to claim for).
const DUE_RECONCILIATION_AGENTS: &str = "
SELECT DISTINCT agent_id FROM held_operations
WHERE (status = 'UNKNOWN' AND (due_at IS NULL OR due_at <= now()))
   OR (status = 'RECONCILING' AND due_at < now())
LIMIT $1";

impl Store {
    /// Claims up to `batch` due UNKNOWN operations plus up to `batch` abandoned
    /// RECONCILING ones, each under a lease with a new fencing token. On Citus, agent
    /// by agent, until the batch is full.
    #[tracing::instrument(level = "debug", name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn claim_due_reconciliations(
        &self,
        owner: &str,
        lease: Duration,
        batch: i64,
    ) -> Result<Vec<ClaimedReconciliation>, StoreError> {
        // Before the connection: the first call takes one of its own.
        let distributed = self.is_distributed().await?;
        let mut client = self.client().await?;
        if !distributed {
            let statement = client.prepare_cached(CLAIM_DUE_RECONCILIATIONS).await?;
            let rows = client
                .query(&statement, &[&owner, &millis(lease), &batch])
                .await?;
            return rows.iter().map(claimed_from_row).collect();
        }
        let rows = agent_by_agent(
            &mut client,
            DUE_RECONCILIATION_AGENTS,
            &CLAIM_DUE_RECONCILIATIONS_OF_AGENT,
            &[&owner, &millis(lease)],
            batch,
        )
        .await?;
        rows.iter().map(claimed_from_row).collect()
    }
}

impl ClaimedReconciliation {
    /// The lease this claim took, for the transition that follows it.
    pub fn lease(&self) -> Lease {
        Lease {
            operation_id: self.operation_id,
            agent_id: self.agent_id.clone(),
            fencing_token: self.fencing_token,
        }
    }
}

fn claimed_from_row(row: &Row) -> Result<ClaimedReconciliation, StoreError> {
    let previous: String = row.get("previous_status");
    Ok(ClaimedReconciliation {
        operation_id: row.get("operation_id"),
        agent_id: row.get("agent_id"),
        operation_type: row.get("operation_type"),
        provider: row.get("provider"),
        fencing_token: row.get("fencing_token"),
        previous_status: previous.parse()?,
        checks: row.get("reconcile_checks"),
        provider_reference: row.get("provider_reference"),
        payload: row.get("request_payload"),
        amount: row.get("amount"),
        currency: row.get("currency"),
        created_at: row.get("created_at"),
        unknown_since: row.get("unknown_since"),
        trace_context: row.get("trace_context"),
    })
}

#[cfg(test)]
mod tests {
    use super::{CLAIM_DUE_RECONCILIATIONS, CLAIM_DUE_RECONCILIATIONS_OF_AGENT};

    #[test]
    fn the_per_agent_claim_names_the_agent_everywhere_and_keeps_a_plain_limit() {
        assert_eq!(
            CLAIM_DUE_RECONCILIATIONS
                .matches("LIMIT (SELECT $3::bigint)")
                .count(),
            2
        );
        let of_agent = CLAIM_DUE_RECONCILIATIONS_OF_AGENT.as_str();
        assert!(!of_agent.contains("(SELECT $3"), "{of_agent}");
        assert_eq!(of_agent.matches("LIMIT $3\n").count(), 2);
        assert_eq!(
            of_agent
                .matches("h.agent_id = $4 AND op.agent_id = $4")
                .count(),
            2
        );
    }
}
