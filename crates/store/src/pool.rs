//! The connection pool. Broken connections are dropped and replaced on the next
//! checkout, so the services recover by themselves once the database is back.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::error::StoreError;

#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: usize,
    /// How long a request waits for a connection (or to open one) before it is told
    /// that the database is unavailable.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Clone)]
pub struct Store {
    pub(crate) pool: Pool,
}

impl Store {
    /// Builds the pool without connecting: a service may start before its database.
    pub fn connect(database_url: &str, settings: &PoolSettings) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = database_url
            .parse()
            .map_err(|e| StoreError::Unavailable(format!("invalid database URL: {e}")))?;
        config.connect_timeout(settings.acquire_timeout);
        if config.get_application_name().is_none() {
            config.application_name("opgate");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.max_connections)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.acquire_timeout))
            .create_timeout(Some(settings.acquire_timeout))
            .recycle_timeout(Some(settings.acquire_timeout))
            .build()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Self { pool })
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Succeeds when a connection can be had and answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// Runs a multi-row statement once more if PostgreSQL chose it as a deadlock victim:
/// it was rolled back whole, so rerunning is safe. Batches sort their rows into one
/// lock order, which makes this rare (a single-row writer can still interleave).
pub(crate) async fn query_rerunning_deadlock_victim(
    client: &deadpool_postgres::Object,
    statement: &tokio_postgres::Statement,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    what: &str,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    match client.query(statement, params).await {
        Err(error)
            if error.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) =>
        {
            tracing::warn!(what, "chosen as a deadlock victim; running it again");
            client.query(statement, params).await
        }
        other => other,
    }
}
