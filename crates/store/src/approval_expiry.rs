//! Approvals nobody gave: operations still AWAITING_APPROVAL past their
//! `approval_expires_at` become FAILED ("approval expired"), audited, a batch at a time.
//! They were never enqueued, so nothing was ever sent for them.

use std::sync::LazyLock;

use uuid::Uuid;

use crate::audit_apart::returning_audit_rows;
use crate::citus::{agent_by_agent, for_one_agent};
use crate::error::StoreError;
use crate::pool::Store;

const EXPIRE_APPROVALS: &str = "
WITH due AS (
    -- Found through held_operations (V15), locked and checked again on operations.
    SELECT op.operation_id, op.agent_id
    FROM held_operations h
    JOIN operations op ON op.operation_id = h.operation_id AND op.agent_id = h.agent_id
    WHERE h.status = 'AWAITING_APPROVAL' AND h.due_at <= now()
      AND op.status = 'AWAITING_APPROVAL' AND op.approval_expires_at <= now()
    ORDER BY h.due_at NULLS FIRST
    LIMIT $2
    FOR UPDATE OF op SKIP LOCKED
), expired AS (
    UPDATE operations op
    SET status = 'FAILED', last_error = 'approval expired', approval_expires_at = NULL,
        updated_at = now()
    FROM due
    WHERE op.operation_id = due.operation_id AND op.agent_id = due.agent_id
      AND op.status = 'AWAITING_APPROVAL'
    RETURNING op.operation_id, op.agent_id
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'AWAITING_APPROVAL', 'FAILED', $1,
           'approval expired: no operator decided in time', NULL::bigint
    FROM expired
)
SELECT operation_id FROM expired";

/// `EXPIRE_APPROVALS` for one agent (`$3`), which Citus runs on one node, its audit
/// rows written apart (`audit_apart`).
static EXPIRE_APPROVALS_OF_AGENT: LazyLock<String> = LazyLock::new(|| {
    for_one_agent(
        &returning_audit_rows(EXPIRE_APPROVALS),
        &[
            (
                "WHERE h.status = 'AWAITING_APPROVAL' AND",
                "WHERE h.agent_id = $3 AND op.agent_id = $3 AND h.status = 'AWAITING_APPROVAL' AND",
            ),
            (
                "WHERE op.operation_id = due.operation_id",
                "WHERE op.agent_id = $3 AND op.operation_id = due.operation_id",
            ),
        ],
    )
});

const EXPIRED_APPROVAL_AGENTS: &str = "
SELECT DISTINCT agent_id FROM held_operations
WHERE status = 'AWAITING_APPROVAL' AND due_at <= now()
LIMIT $1";

impl Store {
    /// Fails up to `batch` operations whose approval expired; returns their ids.
    #[tracing::instrument(level = "debug", name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn expire_approvals(&self, actor: &str, batch: i64) -> Result<Vec<Uuid>, StoreError> {
        // Before the connection: the first call takes one of its own.
        let distributed = self.is_distributed().await?;
        let mut client = self.client().await?;
        if !distributed {
            let statement = client.prepare_cached(EXPIRE_APPROVALS).await?;
            let rows = client.query(&statement, &[&actor, &batch]).await?;
            return Ok(rows.iter().map(|row| row.get("operation_id")).collect());
        }
        let rows = agent_by_agent(
            &mut client,
            EXPIRED_APPROVAL_AGENTS,
            &EXPIRE_APPROVALS_OF_AGENT,
            &[&actor],
            batch,
        )
        .await?;
        Ok(rows.iter().map(|row| row.get("operation_id")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::EXPIRE_APPROVALS_OF_AGENT;

    #[test]
    fn the_per_agent_expiry_names_the_agent_on_both_tables() {
        let of_agent = EXPIRE_APPROVALS_OF_AGENT.as_str();
        assert!(
            of_agent.contains("WHERE h.agent_id = $3 AND op.agent_id = $3"),
            "{of_agent}"
        );
        assert!(
            of_agent.contains("WHERE op.agent_id = $3 AND op.operation_id"),
            "{of_agent}"
        );
    }
}
