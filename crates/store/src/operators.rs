//! The `operators` table: people who work the manual-review queue. Like agents, only
//! the hash of each key is kept.

use chrono::{DateTime, Utc};

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

const FIND_ACTIVE_BY_KEY_ID: &str =
    "SELECT operator_id, key_id, api_key_hash, created_at, revoked_at \
     FROM operators WHERE key_id = $1 AND revoked_at IS NULL";

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
            .map(|row| OperatorRecord {
                operator_id: row.get(0),
                key_id: row.get(1),
                api_key_hash: row.get(2),
                created_at: row.get(3),
                revoked_at: row.get(4),
            }))
    }
}
