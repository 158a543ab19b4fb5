//! An agent's reads of its own operations: by idempotency key (an agent that lost the
//! operation id finds it without re-sending the body), and its list, newest first, a
//! page at a time. Every statement is scoped by `agent_id`: another agent's
//! operations do not exist here.

use opgate_domain::OperationStatus;
use uuid::Uuid;

use crate::error::StoreError;
use crate::operations::{operation_columns, operation_from_row, FIND_BY_IDEMPOTENCY_KEY};
use crate::pool::Store;
use crate::OperationRecord;

/// Which of an agent's operations to list.
#[derive(Debug, Clone)]
pub struct AgentOperationFilter<'a> {
    pub agent_id: &'a str,
    pub status: Option<OperationStatus>,
    pub kind: Option<&'a str>,
    /// At most this many (the caller bounds it).
    pub limit: i64,
    /// Only operations listed after this one (the previous page's last).
    pub after: Option<Uuid>,
}

/// Newest first; ties on `created_at` broken by id, so pages never overlap or skip.
/// The cursor operation is looked up within the same agent: another agent's id as a
/// cursor finds nothing to continue from, and the page is empty.
/// `created_at IS NOT NULL` (always true) names the listing index's predicate (V12):
/// that index is partial so that no other statement, the key lookup above all, can use
/// it.
const LIST_AGENT_OPERATIONS: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations
     WHERE agent_id = $1 AND created_at IS NOT NULL
       AND ($2::text IS NULL OR status = $2)
       AND ($3::text IS NULL OR operation_type = $3)
       AND ($5::uuid IS NULL OR (created_at, operation_id) < (
             SELECT created_at, operation_id FROM operations
             WHERE agent_id = $1 AND operation_id = $5))
     ORDER BY created_at DESC, operation_id DESC
     LIMIT $4"
);

impl Store {
    /// The operation this agent registered under `idempotency_key`, if any.
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn find_operation_by_key(
        &self,
        agent_id: &str,
        idempotency_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let client = self.client().await?;
        let find = client.prepare_cached(FIND_BY_IDEMPOTENCY_KEY).await?;
        client
            .query_opt(&find, &[&agent_id, &idempotency_key])
            .await?
            .map(|row| operation_from_row(&row))
            .transpose()
    }

    /// One page of the agent's operations, newest first.
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn list_agent_operations(
        &self,
        filter: &AgentOperationFilter<'_>,
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let client = self.client().await?;
        let list = client.prepare_cached(LIST_AGENT_OPERATIONS).await?;
        let status = filter.status.map(|s| s.as_str());
        let rows = client
            .query(
                &list,
                &[
                    &filter.agent_id,
                    &status,
                    &filter.kind,
                    &filter.limit,
                    &filter.after,
                ],
            )
            .await?;
        rows.iter().map(operation_from_row).collect()
    }
}
