//! Fenced writes on Citus with their audit rows written apart. A statement that audits
//! with `INSERT … SELECT` from a data-modifying CTE does not run on one node there:
//! Citus computes the CTE first, sends its rows to every worker for the insert, and
//! commits on all of them in two phases. So on Citus such a write is two statements in
//! one transaction, both on the agent's node: the write with its final `SELECT`
//! returning the audit rows (`returning_audit_rows`), then their insert.

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::StoreError;

/// The audit CTE as every fenced write spells it, up to its `SELECT`.
const AUDIT_CTE: &str = "), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT ";

/// As a list of values: Citus routes a multi-row `INSERT … VALUES` of one agent to its
/// node, but an `INSERT … SELECT` (from `unnest`, say) it copies in, in two phases.
const AUDIT_COLUMNS: usize = 7;

fn insert_audit_rows(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let params: Vec<String> = (1..=AUDIT_COLUMNS)
                .map(|column| format!("${}", row * AUDIT_COLUMNS + column))
                .collect();
            format!("({})", params.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, \
         reason, fencing_token) VALUES {}",
        values.join(", ")
    )
}

/// `statement` without its audit CTE (which must come last), its final `SELECT`
/// replaced by the one that CTE inserted, followed by every column of the rows it
/// audited: the seven columns to audit first, then the rows the final `SELECT` read
/// by name (a name that comes twice is the same value twice).
pub(crate) fn returning_audit_rows(statement: &str) -> String {
    let (head, audit) = statement
        .split_once(AUDIT_CTE)
        .expect("the statement audits in its last CTE");
    let (select, _) = audit
        .split_once("\n)\nSELECT ")
        .expect("the audit CTE is followed by the final SELECT");
    let (columns, source) = select
        .rsplit_once("FROM ")
        .expect("the audit CTE selects from the rows it audits");
    let source = source.trim();
    format!(
        "{head})\nSELECT {}, {source}.* FROM {source}",
        columns.trim_end()
    )
}

/// Runs `statement` (in `returning_audit_rows` form) and inserts the audit rows it
/// returns, in one transaction; returns those rows. A deadlock victim was rolled back
/// whole and runs once more.
pub(crate) async fn write_then_audit(
    client: &mut deadpool_postgres::Object,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, StoreError> {
    match write_then_audit_once(client, statement, params).await {
        Err(StoreError::Query(error)) if error.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
            tracing::warn!("chosen as a deadlock victim; running it again");
            write_then_audit_once(client, statement, params).await
        }
        other => other,
    }
}

async fn write_then_audit_once(
    client: &mut deadpool_postgres::Object,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, StoreError> {
    let transaction = client.transaction().await?;
    let rows = write_then_audit_in(&transaction, statement, params).await?;
    transaction.commit().await?;
    Ok(rows)
}

/// `write_then_audit` in the caller's transaction, which commits it.
pub(crate) async fn write_then_audit_in(
    transaction: &deadpool_postgres::Transaction<'_>,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, StoreError> {
    let write = transaction.prepare_cached(statement).await?;
    let rows = transaction.query(&write, params).await?;
    if !rows.is_empty() {
        let audit: Vec<AuditRow> = rows.iter().map(AuditRow::from).collect();
        let params: Vec<&(dyn ToSql + Sync)> = audit.iter().flat_map(AuditRow::params).collect();
        let insert = transaction
            .prepare_cached(&insert_audit_rows(audit.len()))
            .await?;
        transaction.execute(&insert, &params).await?;
    }
    Ok(rows)
}

/// One row to audit, as the write returned it.
struct AuditRow {
    operation_id: Uuid,
    text: [Option<String>; 5],
    fencing_token: Option<i64>,
}

impl From<&Row> for AuditRow {
    fn from(row: &Row) -> Self {
        Self {
            operation_id: row.get(0),
            text: [row.get(1), row.get(2), row.get(3), row.get(4), row.get(5)],
            fencing_token: row.get(6),
        }
    }
}

impl AuditRow {
    fn params(&self) -> impl Iterator<Item = &(dyn ToSql + Sync)> {
        let text = self.text.iter().map(|t| t as &(dyn ToSql + Sync));
        std::iter::once(&self.operation_id as &(dyn ToSql + Sync))
            .chain(text)
            .chain(std::iter::once(&self.fencing_token as &(dyn ToSql + Sync)))
    }
}

#[cfg(test)]
mod tests {
    use super::{insert_audit_rows, returning_audit_rows};

    #[test]
    fn the_audit_cte_becomes_the_final_select() {
        let statement = "
WITH updated AS (
    UPDATE operations SET status = 'PENDING' WHERE operation_id = $1
    RETURNING operation_id, agent_id
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'IN_PROGRESS', 'PENDING', $5, $6, $2 FROM updated
)
SELECT count(*) FROM updated";
        let apart = returning_audit_rows(statement);
        assert!(apart.ends_with(
            "RETURNING operation_id, agent_id\n)\n\
             SELECT operation_id, agent_id, 'IN_PROGRESS', 'PENDING', $5, $6, $2, updated.* \
             FROM updated"
        ));
        assert!(!apart.contains("INSERT"));
        assert!(insert_audit_rows(2)
            .ends_with("VALUES ($1, $2, $3, $4, $5, $6, $7), ($8, $9, $10, $11, $12, $13, $14)"));
    }
}
