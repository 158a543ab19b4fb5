//! The `operators` table: people who work the manual-review queue. Like agents, only
//! the hash of each key is kept.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use crate::error::StoreError;
use crate::pool::Store;

#[derive(Debug, Clone)]
pub struct OperatorRecord {
    pub operator_id: String,
    pub key_id: String,
    pub api_key_hash: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

const INSERT_OPERATOR: &str = "INSERT INTO operators (operator_id, key_id, api_key_hash) \
     VALUES ($1, $2, $3) ON CONFLICT (operator_id) DO NOTHING";

/// What revoking an operator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorRevocation {
    /// Revoked now, at this time: its key gets 401 from now on.
    Revoked(DateTime<Utc>),
    /// It was revoked before (at this time, unless a concurrent revocation has not
    /// become visible yet); nothing changed.
    AlreadyRevoked(Option<DateTime<Utc>>),
    /// No operator has this name.
    NotFound,
}

const FIND_ACTIVE_BY_KEY_ID: &str =
    "SELECT operator_id, key_id, api_key_hash, created_at, revoked_at \
     FROM operators WHERE key_id = $1 AND revoked_at IS NULL";

const LIST_OPERATORS: &str = "SELECT operator_id, key_id, api_key_hash, created_at, revoked_at \
     FROM operators ORDER BY operator_id";

/// One statement: the row revoked now (`true`), or, when none was, the operator as it
/// stood (`false`, with its earlier `revoked_at`); no row at all for an unknown name.
const REVOKE_OPERATOR: &str = "WITH revoked AS ( \
         UPDATE operators SET revoked_at = now() \
         WHERE operator_id = $1 AND revoked_at IS NULL RETURNING revoked_at) \
     SELECT revoked_at, true FROM revoked \
     UNION ALL \
     SELECT revoked_at, false FROM operators \
     WHERE operator_id = $1 AND NOT EXISTS (SELECT 1 FROM revoked)";

impl Store {
    /// Fails with `OperatorExists` when the name is taken.
    #[tracing::instrument(name = "INSERT operators", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operators"))]
    pub async fn create_operator(
        &self,
        operator_id: &str,
        key_id: &str,
        api_key_hash: &str,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let inserted = client
            .execute(INSERT_OPERATOR, &[&operator_id, &key_id, &api_key_hash])
            .await?;
        if inserted == 0 {
            return Err(StoreError::OperatorExists(operator_id.to_owned()));
        }
        Ok(())
    }

    #[tracing::instrument(name = "SELECT operators", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operators"))]
    pub async fn find_active_operator_by_key_id(
        &self,
        key_id: &str,
    ) -> Result<Option<OperatorRecord>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query_opt(FIND_ACTIVE_BY_KEY_ID, &[&key_id])
            .await?
            .map(|row| operator_from_row(&row)))
    }

    /// Every operator, revoked ones too, by name.
    #[tracing::instrument(name = "SELECT operators", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operators"))]
    pub async fn list_operators(&self) -> Result<Vec<OperatorRecord>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query(LIST_OPERATORS, &[])
            .await?
            .iter()
            .map(operator_from_row)
            .collect())
    }

    /// Sets `revoked_at` if the operator is active; says which case it was.
    #[tracing::instrument(name = "UPDATE operators", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operators"))]
    pub async fn revoke_operator(
        &self,
        operator_id: &str,
    ) -> Result<OperatorRevocation, StoreError> {
        let client = self.client().await?;
        let Some(row) = client.query_opt(REVOKE_OPERATOR, &[&operator_id]).await? else {
            return Ok(OperatorRevocation::NotFound);
        };
        let revoked_at: Option<DateTime<Utc>> = row.get(0);
        Ok(match (row.get::<_, bool>(1), revoked_at) {
            (true, Some(at)) => OperatorRevocation::Revoked(at),
            (true, None) => {
                return Err(StoreError::Corrupt(format!(
                    "operator {operator_id}: revoked without a time"
                )))
            }
            (false, earlier) => OperatorRevocation::AlreadyRevoked(earlier),
        })
    }
}

fn operator_from_row(row: &Row) -> OperatorRecord {
    OperatorRecord {
        operator_id: row.get(0),
        key_id: row.get(1),
        api_key_hash: row.get(2),
        created_at: row.get(3),
        revoked_at: row.get(4),
    }
}
