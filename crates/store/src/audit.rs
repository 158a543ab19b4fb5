//! Reading the audit trail (`operation_events`) and status counts, for operators and
//! for tests that check who did what, under which fencing token.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::StoreError;
use crate::pool::{reading_whole_tables, Store};

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

/// Operations waiting on the reconciler or an operator (V15 lists them apart).
const COUNT_HELD: &str = "SELECT status, count(*) FROM held_operations \
     WHERE status IN ('UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') GROUP BY status";

/// PENDING and IN_PROGRESS operations are counted from the outbox: it holds one event
/// for each of them and no other (every other transition deletes it in the statement
/// that makes it), claimed exactly while the operation is IN_PROGRESS.
const OUTBOX_BACKLOG: &str = "SELECT count(*) FILTER (WHERE claimed_by IS NULL), \
     count(*) FILTER (WHERE claimed_by IS NOT NULL), \
     COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) FROM outbox";

/// The pipeline as the health gauges show it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipelineCounts {
    /// Operations in each non-terminal status.
    pub unsettled_by_status: BTreeMap<String, i64>,
    pub outbox_depth: i64,
    pub outbox_oldest_age_seconds: f64,
}

impl Store {
    #[tracing::instrument(name = "SELECT operation_events", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operation_events"))]
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

    /// Cheap enough to run every few seconds at any number of finished operations: it
    /// reads the outbox and held_operations, not operations.
    #[tracing::instrument(level = "debug", name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn pipeline_counts(&self) -> Result<PipelineCounts, StoreError> {
        let mut client = self.client().await?;
        let reading = reading_whole_tables(&mut client).await?;
        let held = reading.query(COUNT_HELD, &[]).await?;
        let backlog = reading.query_one(OUTBOX_BACKLOG, &[]).await?;
        reading.commit().await?;
        let (pending, in_progress): (i64, i64) = (backlog.get(0), backlog.get(1));
        let mut unsettled_by_status: BTreeMap<String, i64> =
            held.iter().map(|row| (row.get(0), row.get(1))).collect();
        for (status, count) in [("PENDING", pending), ("IN_PROGRESS", in_progress)] {
            if count > 0 {
                unsettled_by_status.insert(status.to_owned(), count);
            }
        }
        Ok(PipelineCounts {
            unsettled_by_status,
            outbox_depth: pending + in_progress,
            outbox_oldest_age_seconds: backlog.get(2),
        })
    }

    /// Number of operations in each status (statuses with none are absent). Scans
    /// the table: for operators and tests, not for periodic use.
    pub async fn count_by_status(&self) -> Result<BTreeMap<String, i64>, StoreError> {
        let mut client = self.client().await?;
        let reading = reading_whole_tables(&mut client).await?;
        let rows = reading.query(COUNT_BY_STATUS, &[]).await?;
        reading.commit().await?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }
}
