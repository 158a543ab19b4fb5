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
    /// The server cancels any statement (lock waits included) running longer than
    /// this, so a stuck lock or a forgotten transaction cannot hang a worker; the
    /// statement fails as "database unavailable" and the connection stays usable.
    /// `None`: the server's own setting.
    pub statement_timeout: Option<Duration>,
    /// TCP keepalive: after this long without traffic the connection is probed, and a
    /// peer that stopped answering (a half-open connection, a vanished host) is noticed
    /// within about twice this instead of hanging until the kernel gives up (hours).
    pub keepalive_idle: Duration,
    /// The planner may not choose a sequential scan where an index serves
    /// (`enable_seqscan = off` on every connection). For services whose statements
    /// find their rows by key or through an index (intake, the executor, the
    /// reconciler): PostgreSQL keeps the generic plan of a prepared statement, and one
    /// made while a table was small and freshly analyzed scans the whole table, on that
    /// connection, until the next ANALYZE. At thousands of new operations a second
    /// that made every batch of one committer take 150-400 ms. Statements that read a
    /// whole table on purpose run in `reading_whole_tables`.
    pub avoid_sequential_scans: bool,
}

/// The default statement timeout: far above any statement opgate runs (milliseconds),
/// far below "hung".
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default TCP keepalive idle time.
pub const DEFAULT_KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Some(DEFAULT_STATEMENT_TIMEOUT),
            keepalive_idle: DEFAULT_KEEPALIVE_IDLE,
            avoid_sequential_scans: false,
        }
    }
}

#[derive(Clone)]
pub struct Store {
    pub(crate) pool: Pool,
    /// Whether the tables are distributed on Citus (`Store::is_distributed`).
    pub(crate) distributed: std::sync::Arc<tokio::sync::OnceCell<bool>>,
    /// On Citus, the shard of each agent's rows (`register_batch_by_shard`).
    pub(crate) shards: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, i64>>>,
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
        let probe_every = (settings.keepalive_idle / 3).max(Duration::from_secs(1));
        config
            .keepalives(true)
            .keepalives_idle(settings.keepalive_idle)
            .keepalives_interval(probe_every)
            .keepalives_retries(3);
        // Startup options, so that they hold on every connection, from the first
        // statement on; anything already in the URL's `options` is kept.
        let mut options = config.get_options().unwrap_or_default().to_owned();
        if let Some(timeout) = settings.statement_timeout {
            options.push_str(&format!(
                " -c statement_timeout={}",
                timeout.as_millis().max(1)
            ));
        }
        if settings.avoid_sequential_scans {
            options.push_str(" -c enable_seqscan=off");
        }
        if !options.is_empty() {
            config.options(options.trim_start());
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
        Ok(Self {
            pool,
            distributed: Default::default(),
            shards: Default::default(),
        })
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Closes the connections not in use now (one in use goes back to the pool after).
    pub fn close_idle(&self) {
        self.pool.retain(|_, _| false);
    }

    /// Succeeds when a connection can be had and answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// A transaction for statements that read a whole table on purpose (a gauge, a
/// count): sequential scans are allowed again in it, whatever
/// `PoolSettings::avoid_sequential_scans` says.
pub(crate) async fn reading_whole_tables(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, StoreError> {
    let transaction = client.transaction().await?;
    transaction
        .batch_execute("SET LOCAL enable_seqscan = on")
        .await?;
    Ok(transaction)
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
