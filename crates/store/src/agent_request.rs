//! What an agent's request needs to know before anything is written, in one statement:
//! the active agent behind the key id (its hash and policy, for intake to verify) and
//! the operation its Idempotency-Key already names, if any. A replay is then answered
//! from this one read; only a key not seen before goes on to the registration.

use uuid::Uuid;

use crate::agents::{agent_columns, agent_from_row, AgentRecord};
use crate::error::StoreError;
use crate::operations::{operation_columns, operation_from_row, OperationRecord};
use crate::pool::Store;

/// Found by key id; the caller must still verify the key against `agent.api_key_hash`
/// before using either part.
#[derive(Debug, Clone)]
pub struct AgentRequestContext {
    pub agent: AgentRecord,
    /// The operation this agent registered under the presented Idempotency-Key.
    pub existing: Option<OperationRecord>,
}

/// The operation is read by the unique (agent_id, idempotency_key) with both values
/// known before the scan (the agent's id from an InitPlan), so its index condition
/// always holds both columns; as a join against `a`, a plan made on an empty table
/// matched only the key and walked the agent's entries.
pub(crate) const AGENT_WITH_EXISTING_OPERATION: &str = concat!(
    "SELECT ",
    agent_columns!("a.", "agent_"),
    ", existing.*
     FROM agents a
     LEFT JOIN (
         SELECT ",
    operation_columns!(),
    " FROM operations
         WHERE agent_id = (SELECT agent_id FROM agents WHERE key_id = $1)
           AND idempotency_key = $2
     ) existing ON true
     WHERE a.key_id = $1 AND a.revoked_at IS NULL"
);

impl Store {
    /// The active agent holding this key id and, when an Idempotency-Key is given, the
    /// operation it already names. `None` when no active agent has the key id.
    #[tracing::instrument(name = "SELECT agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "agents"))]
    pub async fn find_agent_request_context(
        &self,
        key_id: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Option<AgentRequestContext>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(AGENT_WITH_EXISTING_OPERATION).await?;
        let Some(row) = client
            .query_opt(&statement, &[&key_id, &idempotency_key])
            .await?
        else {
            return Ok(None);
        };
        let agent = agent_from_row(&row, "agent_")?;
        let existing = match row.get::<_, Option<Uuid>>("operation_id") {
            Some(_) => Some(operation_from_row(&row)?),
            None => None,
        };
        Ok(Some(AgentRequestContext { agent, existing }))
    }
}
