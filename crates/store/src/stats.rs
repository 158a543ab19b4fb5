//! Row counts of opgate's tables, for operators and for tests that check that a
//! refused request wrote nothing.

use crate::error::StoreError;
use crate::pool::{reading_whole_tables, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableCounts {
    pub agents: i64,
    pub operations: i64,
    pub outbox: i64,
    pub operation_events: i64,
}

const COUNT_ROWS: &str = "SELECT (SELECT count(*) FROM agents), \
                                 (SELECT count(*) FROM operations), \
                                 (SELECT count(*) FROM outbox), \
                                 (SELECT count(*) FROM operation_events)";

impl Store {
    pub async fn table_counts(&self) -> Result<TableCounts, StoreError> {
        let mut client = self.client().await?;
        let reading = reading_whole_tables(&mut client).await?;
        let row = reading.query_one(COUNT_ROWS, &[]).await?;
        reading.commit().await?;
        Ok(TableCounts {
            agents: row.get(0),
            operations: row.get(1),
            outbox: row.get(2),
            operation_events: row.get(3),
        })
    }
}
