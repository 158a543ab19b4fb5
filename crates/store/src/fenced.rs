//! Fenced transitions, shared by the executor and the reconciler: one conditional
//! `UPDATE … WHERE status = <from> AND fencing_token = <mine>` plus its audit row (and
//! the removal of the outbox event) in one statement. Zero rows means the worker's
//! lease has passed to another; the refusal itself is audited, nothing else written.

use std::collections::HashSet;
use std::sync::LazyLock;

use opgate_domain::{OperationStatus, Transition};
use uuid::Uuid;

use crate::audit_apart::{returning_audit_rows, write_then_audit};
use crate::citus::for_one_agent;
use crate::error::StoreError;
use crate::execution::millis;
use crate::lease::Lease;
use crate::pool::{query_rerunning_deadlock_victim, Store};

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

/// A transition of a leased operation, applied only while the worker's fencing token
/// and the operation's state are still `fencing_token` and `from`. Owns its values, so
/// it can wait in a group-commit queue.
#[derive(Debug, Clone)]
pub struct FencedTransition {
    pub lease: Lease,
    pub from: OperationStatus,
    pub transition: Transition,
}

/// Any number of fenced transitions in one statement: each row is updated only if its
/// fencing token and state are still the ones given, and only updated rows lose their
/// outbox event and gain an audit row. Returns the ids it applied.
///
/// The arrays are read through a materialized CTE so that no plan knows how many
/// transitions there are: a custom plan that saw one always looked cheaper than the
/// generic plan, which assumes ten, so once `operations` held rows PostgreSQL planned
/// the statement again on every execution (0.5-0.6 ms of planning per batch, on every
/// executor completion and reconciler transition). With the length hidden it keeps the
/// generic plan after five executions (`store_plans.rs`), as for the group commit's
/// statement.
pub const TRANSITION: &str = "
WITH arrays AS MATERIALIZED (
    SELECT $1::uuid[] AS operation_id, $2::int8[] AS fencing_token, $3::text[] AS from_status,
           $4::text[] AS to_status, $5::text[] AS provider_reference, $6::text[] AS last_error,
           $7::text[] AS reason, $8::float8[] AS next_check_ms, $10::text[] AS agent_id
), input AS (
    -- The times are worked out here, not in the UPDATE: Citus refuses non-immutable
    -- functions inside CASE in an update that spans shards.
    SELECT t.*, now() AS at, now() + t.next_check_ms * interval '1 millisecond' AS next_check_at
    FROM arrays, unnest(arrays.operation_id, arrays.fencing_token, arrays.from_status,
                        arrays.to_status, arrays.provider_reference, arrays.last_error,
                        arrays.reason, arrays.next_check_ms, arrays.agent_id)
        AS t(operation_id, fencing_token, from_status, to_status, provider_reference,
             last_error, reason, next_check_ms, agent_id)
), updated AS (
    UPDATE operations op
    SET status = i.to_status,
        provider_reference = COALESCE(i.provider_reference, op.provider_reference),
        last_error = i.last_error,
        lease_owner = NULL,
        lease_expires_at = NULL,
        next_attempt_at = CASE WHEN i.to_status = 'UNKNOWN' THEN i.next_check_at END,
        unknown_since = CASE WHEN i.to_status = 'UNKNOWN' AND i.from_status <> 'RECONCILING'
                             THEN i.at ELSE op.unknown_since END,
        updated_at = i.at
    FROM input i
    WHERE op.operation_id = i.operation_id AND op.agent_id = i.agent_id
      AND op.fencing_token = i.fencing_token
      AND op.status = i.from_status
    RETURNING op.operation_id, op.agent_id, i.fencing_token, i.from_status, i.to_status, i.reason
), removed AS (
    DELETE FROM outbox WHERE (operation_id, agent_id) IN (SELECT operation_id, agent_id FROM updated)
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, from_status, to_status, $9, reason, fencing_token FROM updated
)
SELECT operation_id FROM updated";

/// `TRANSITION` for the transitions of one agent (`$11`): every table in it is then
/// filtered on the distribution column, so on Citus it runs on that agent's node alone.
/// It writes its audit rows apart (`audit_apart`). Its arrays are inlined, as before
/// they were hidden from the planner: Citus plans a statement itself, and how it routes
/// a materialized CTE beside the agent's tables is not verified here (no Citus cluster).
static TRANSITION_FOR_AGENT: LazyLock<String> = LazyLock::new(|| {
    for_one_agent(
        &returning_audit_rows(TRANSITION),
        &[
            (
                "WITH arrays AS MATERIALIZED (",
                "WITH arrays AS NOT MATERIALIZED (",
            ),
            (
                "WHERE op.operation_id = i.operation_id",
                "WHERE op.agent_id = $11 AND op.operation_id = i.operation_id",
            ),
            (
                "DELETE FROM outbox WHERE",
                "DELETE FROM outbox WHERE agent_id = $11 AND",
            ),
        ],
    )
});

/// Whether this worker's transition was applied already: the same fencing token, the
/// same target state and actor, audited as applied. A worker that retries a write whose
/// commit succeeded but whose reply was lost finds its own transition here, and it is
/// not a stale write.
const ALREADY_APPLIED: &str = "
SELECT EXISTS (
    SELECT 1 FROM operation_events
    WHERE operation_id = $1 AND agent_id = $5 AND fencing_token = $2 AND to_status = $3
      AND actor = $4 AND outcome = 'applied')";

const RECORD_STALE_WRITE: &str = "
INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token, outcome)
SELECT operation_id, agent_id, status, $3, $4, $5, $2, 'rejected_stale'
FROM operations WHERE operation_id = $1 AND agent_id = $6";

impl Store {
    /// One fenced transition (see `transition_batch_with_fence`).
    pub async fn transition_with_fence(
        &self,
        actor: &str,
        transition: FencedTransition,
    ) -> Result<FencedWrite, StoreError> {
        let writes = self
            .transition_batch_with_fence(actor, std::slice::from_ref(&transition))
            .await?;
        Ok(writes[0])
    }

    /// Many fenced transitions in one statement (on Citus, one per agent), answered in
    /// order. A refused one
    /// is audited as `rejected_stale`, unless it is this worker's own transition applied
    /// by an earlier attempt whose reply was lost (then it is `Applied`, audited once);
    /// the others are applied regardless.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations", db.operation.batch.size = batch.len()))]
    pub async fn transition_batch_with_fence(
        &self,
        actor: &str,
        batch: &[FencedTransition],
    ) -> Result<Vec<FencedWrite>, StoreError> {
        for t in batch {
            debug_assert!(OperationStatus::can_transition(t.from, t.transition.to));
        }
        // One lock order for every batch (see the deadlock rerun below).
        let mut ordered: Vec<&FencedTransition> = batch.iter().collect();
        ordered.sort_by_key(|t| t.lease.operation_id);
        let applied = if self.is_distributed().await? {
            // Agent by agent, each on its node; the transitions are independent.
            ordered.sort_by(|a, b| a.lease.agent_id.cmp(&b.lease.agent_id));
            let mut applied = HashSet::new();
            for one_agent in ordered.chunk_by(|a, b| a.lease.agent_id == b.lease.agent_id) {
                let agent = one_agent[0].lease.agent_id.as_str();
                applied.extend(self.transition(one_agent, actor, Some(agent)).await?);
            }
            applied
        } else {
            self.transition(&ordered, actor, None).await?
        };
        let mut writes = Vec::with_capacity(batch.len());
        for t in batch {
            if applied.contains(&t.lease.operation_id) || self.already_applied(t, actor).await? {
                writes.push(FencedWrite::Applied);
            } else {
                self.record_stale_write(
                    &t.lease,
                    t.transition.to.as_str(),
                    actor,
                    &t.transition.reason,
                )
                .await?;
                writes.push(FencedWrite::RejectedStale);
            }
        }
        Ok(writes)
    }

    /// Runs `TRANSITION` (or, given an agent, `TRANSITION_FOR_AGENT`) over `ordered`;
    /// returns the ids it applied.
    async fn transition(
        &self,
        ordered: &[&FencedTransition],
        actor: &str,
        agent: Option<&str>,
    ) -> Result<HashSet<Uuid>, StoreError> {
        let ids: Vec<Uuid> = ordered.iter().map(|t| t.lease.operation_id).collect();
        let agents: Vec<&str> = ordered.iter().map(|t| t.lease.agent_id.as_str()).collect();
        let tokens: Vec<i64> = ordered.iter().map(|t| t.lease.fencing_token).collect();
        let from: Vec<&str> = ordered.iter().map(|t| t.from.as_str()).collect();
        let to: Vec<&str> = ordered.iter().map(|t| t.transition.to.as_str()).collect();
        let references: Vec<Option<&str>> = ordered
            .iter()
            .map(|t| t.transition.provider_reference.as_deref())
            .collect();
        let errors: Vec<Option<&str>> = ordered
            .iter()
            .map(|t| t.transition.last_error.as_deref())
            .collect();
        let reasons: Vec<&str> = ordered
            .iter()
            .map(|t| t.transition.reason.as_str())
            .collect();
        let next_checks: Vec<f64> = ordered
            .iter()
            .map(|t| millis(t.transition.next_check_in.unwrap_or_default()))
            .collect();
        let mut client = self.client().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
            &ids,
            &tokens,
            &from,
            &to,
            &references,
            &errors,
            &reasons,
            &next_checks,
            &actor,
            &agents,
            &agent,
        ];
        // Batches hold different leases, but a stale worker's write can still touch a
        // row another batch holds; a deadlock victim was rolled back whole, so rerun it.
        let rows = match agent {
            Some(_) => write_then_audit(&mut client, &TRANSITION_FOR_AGENT, &params).await?,
            None => {
                let statement = client.prepare_cached(TRANSITION).await?;
                let params = &params[..10];
                query_rerunning_deadlock_victim(&client, &statement, params, "transition batch")
                    .await?
            }
        };
        Ok(rows.iter().map(|row| row.get("operation_id")).collect())
    }

    async fn already_applied(
        &self,
        transition: &FencedTransition,
        actor: &str,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                ALREADY_APPLIED,
                &[
                    &transition.lease.operation_id,
                    &transition.lease.fencing_token,
                    &transition.transition.to.as_str(),
                    &actor,
                    &transition.lease.agent_id,
                ],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Records, without changing the operation, that this worker found its lease lost
    /// and discarded what it was doing.
    #[tracing::instrument(name = "INSERT operation_events", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operation_events"))]
    pub async fn record_lease_lost(&self, lease: &Lease, actor: &str) -> Result<(), StoreError> {
        let why = format!(
            "lease lost (fencing token {} no longer current); result discarded, nothing written",
            lease.fencing_token
        );
        self.record_refusal(lease, "IN_PROGRESS", actor, &why).await
    }

    pub(crate) async fn record_stale_write(
        &self,
        lease: &Lease,
        attempted_status: &str,
        actor: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        let why = format!(
            "stale write rejected (fencing token {} no longer current): {reason}",
            lease.fencing_token
        );
        self.record_refusal(lease, attempted_status, actor, &why)
            .await
    }

    async fn record_refusal(
        &self,
        lease: &Lease,
        attempted_status: &str,
        actor: &str,
        why: &str,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &lease.operation_id,
            &lease.fencing_token,
            &attempted_status,
            &actor,
            &why,
            &lease.agent_id,
        ];
        client.execute(RECORD_STALE_WRITE, &params).await?;
        Ok(())
    }
}
