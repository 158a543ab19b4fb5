//! Reading the audit trail (`operation_events`) and status counts, for operators and
//! for tests that check who did what, under which fencing token.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::StoreError;
use crate::pool::Store;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationEvent {
    pub event_id: i64,
    pub from_status: Option<String>,
    pub to_status: String,
    pub actor: String,
    pub reason: Option<String>,
    pub fencing_token: Option<i64>,
    /// `applied`, or `rejected_stale` for a write refused by the fencing token.
    pub outcome: String,
    pub created_at: DateTime<Utc>,
}

const EVENTS_OF_OPERATION: &str = "
SELECT event_id, from_status, to_status, actor, reason, fencing_token, outcome, created_at
FROM operation_events WHERE operation_id = $1 ORDER BY event_id";

const COUNT_BY_STATUS: &str = "SELECT status, count(*) FROM operations GROUP BY status";

impl Store {
    pub async fn operation_events(
        &self,
        operation_id: Uuid,
    ) -> Result<Vec<OperationEvent>, StoreError> {
        let client = self.client().await?;
        let rows = client.query(EVENTS_OF_OPERATION, &[&operation_id]).await?;
        Ok(rows
            .iter()
            .map(|row| OperationEvent {
                event_id: row.get(0),
                from_status: row.get(1),
                to_status: row.get(2),
                actor: row.get(3),
                reason: row.get(4),
                fencing_token: row.get(5),
                outcome: row.get(6),
                created_at: row.get(7),
            })
            .collect())
    }

    /// Number of operations in each status (statuses with none are absent).
    pub async fn count_by_status(&self) -> Result<BTreeMap<String, i64>, StoreError> {
        let client = self.client().await?;
        let rows = client.query(COUNT_BY_STATUS, &[]).await?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }
}
