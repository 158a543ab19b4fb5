//! What an agent's request needs to know before anything is written, in one statement:
//! the active agent behind the key id (its hash and policy, for intake to verify) and
//! the operation its Idempotency-Key already names, if any. A replay is then answered
//! from this one read; only a key not seen before goes on to the registration.

use uuid::Uuid;

use crate::agents::{
    agent_columns, agent_from_row, agent_row_version, key_id_accepted, presented_key_hash,
    AgentRecord,
};
use crate::error::StoreError;
use crate::operations::{
    operation_columns, operation_from_row, OperationRecord, FIND_BY_IDEMPOTENCY_KEY,
};
use crate::pool::Store;

/// Found by key id; the caller must still verify the key against `presented_key_hash`
/// before using either part.
#[derive(Debug, Clone)]
pub struct AgentRequestContext {
    pub agent: AgentRecord,
    /// The stored hash of the key the key id names: the agent's current key, or its
    /// previous key while that is in its grace period.
    pub presented_key_hash: String,
    /// The operation this agent registered under the presented Idempotency-Key.
    pub existing: Option<OperationRecord>,
    /// The version of the agent's row as read (`AgentCheck`); `None` on Citus, where
    /// each node keeps its own copy of the row.
    pub row_version: Option<i64>,
}

/// The operation is read by the unique (idempotency_key, agent_id) index with both values
/// known before the scan (the agent's id from an InitPlan), so its index condition
/// always holds both columns; as a join against `a`, a plan made on an empty table
/// matched only the key and walked the agent's entries. The key id is the agent's
/// current one or, until it expires, the one its last rotation replaced
/// (`key_id_accepted!`); both are uniquely indexed, so either lookup is a BitmapOr of
/// two index probes.
pub const AGENT_WITH_EXISTING_OPERATION: &str = concat!(
    "SELECT ",
    agent_columns!("a.", "agent_"),
    ", ",
    presented_key_hash!("a."),
    ", ",
    agent_row_version!("a."),
    ", existing.*
     FROM agents a
     LEFT JOIN (
         SELECT ",
    operation_columns!(),
    " FROM operations
         WHERE agent_id = (SELECT agent_id FROM agents WHERE ",
    key_id_accepted!(""),
    ")
           AND idempotency_key = $2
     ) existing ON true
     WHERE ",
    key_id_accepted!("a.")
);

/// The agent behind a key id, with `$extra` columns.
macro_rules! agent_by_key_id {
    ($($extra:expr),*) => {
        concat!(
            "SELECT ",
            agent_columns!("a.", "agent_"),
            ", ",
            presented_key_hash!("a."),
            $(", ", $extra,)*
            " FROM agents a WHERE ",
            key_id_accepted!("a.")
        )
    };
}

/// On Citus the statement above would read every shard: the agent it filters
/// operations on comes from a subquery, known only when it runs. There the agent is
/// read first (a reference table, read where it is), then the operation by
/// `FIND_BY_IDEMPOTENCY_KEY`, which names the agent and runs on its node alone.
const AGENT_BY_KEY_ID: &str = agent_by_key_id!();

/// The agent alone, for a request that names no operation by key (a read: `GET` of an
/// operation, a listing, an MCP read). `AGENT_WITH_EXISTING_OPERATION` with a NULL key
/// was planned again on every execution: its custom plan, with the lookup folded away,
/// always looked cheaper than the generic one (0.11 ms of planning against 0.016 ms of
/// executing, on every poll of an operation).
pub const AGENT_FOR_READ: &str = agent_by_key_id!(agent_row_version!("a."));

impl Store {
    /// The active agent holding this key id (current, or previous within its grace
    /// period) and, when an Idempotency-Key is given, the operation it already names.
    /// `None` when no active agent accepts the key id.
    #[tracing::instrument(name = "SELECT agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "agents"))]
    pub async fn find_agent_request_context(
        &self,
        key_id: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Option<AgentRequestContext>, StoreError> {
        if self.is_distributed().await? {
            return self
                .find_agent_request_context_in_two(key_id, idempotency_key)
                .await;
        }
        let client = self.client().await?;
        let found = match idempotency_key {
            Some(key) => {
                let statement = client.prepare_cached(AGENT_WITH_EXISTING_OPERATION).await?;
                client.query_opt(&statement, &[&key_id, &key]).await?
            }
            None => {
                let statement = client.prepare_cached(AGENT_FOR_READ).await?;
                client.query_opt(&statement, &[&key_id]).await?
            }
        };
        let Some(row) = found else {
            return Ok(None);
        };
        let agent = agent_from_row(&row, "agent_")?;
        let existing = match idempotency_key {
            Some(_) => row
                .get::<_, Option<Uuid>>("operation_id")
                .map(|_| operation_from_row(&row))
                .transpose()?,
            None => None,
        };
        Ok(Some(AgentRequestContext {
            agent,
            presented_key_hash: row.get("presented_key_hash"),
            existing,
            row_version: Some(row.get("agent_row_version")),
        }))
    }

    /// `find_agent_request_context` in two statements (`AGENT_BY_KEY_ID`).
    async fn find_agent_request_context_in_two(
        &self,
        key_id: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Option<AgentRequestContext>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(AGENT_BY_KEY_ID).await?;
        let Some(row) = client.query_opt(&statement, &[&key_id]).await? else {
            return Ok(None);
        };
        let agent = agent_from_row(&row, "agent_")?;
        let existing = match idempotency_key {
            Some(key) => {
                let find = client.prepare_cached(FIND_BY_IDEMPOTENCY_KEY).await?;
                let found = client.query_opt(&find, &[&agent.agent_id, &key]).await?;
                found.map(|row| operation_from_row(&row)).transpose()?
            }
            None => None,
        };
        Ok(Some(AgentRequestContext {
            agent,
            presented_key_hash: row.get("presented_key_hash"),
            existing,
            row_version: None,
        }))
    }
}
