//! Schema migrations: the numbered SQL files in `migrations/`, embedded at build time
//! and applied by refinery. An advisory lock serialises concurrent runners, so every
//! binary may start with `--migrate` at once; running twice is a no-op.

use crate::error::StoreError;
use crate::pool::Store;

refinery::embed_migrations!("../../migrations");

/// An arbitrary constant that names opgate's migration lock.
const MIGRATION_LOCK_ID: i64 = 0x6f70_6761_7465;

const TAKE_LOCK: &str = "SELECT pg_advisory_lock($1)";
const RELEASE_LOCK: &str = "SELECT pg_advisory_unlock($1)";

impl Store {
    /// Applies every pending migration; returns how many were applied.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        self.migrate_to(None).await
    }

    /// Applies pending migrations up to and including version `target` (all when
    /// `None`): an upgrade in steps, or a database as an older release left it.
    pub async fn migrate_to(&self, target: Option<u32>) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        // A migration may build an index on a large table: no statement timeout for it
        // (or for waiting on the lock another migrator holds). Reset before the
        // connection goes back to the pool.
        client.batch_execute("SET statement_timeout = 0").await?;
        client.execute(TAKE_LOCK, &[&MIGRATION_LOCK_ID]).await?;
        let client_ref: &mut tokio_postgres::Client = &mut client;
        let runner = match target {
            Some(version) => migrations::runner().set_target(refinery::Target::Version(version)),
            None => migrations::runner(),
        };
        let outcome = runner.run_async(client_ref).await;
        client.execute(RELEASE_LOCK, &[&MIGRATION_LOCK_ID]).await?;
        client.batch_execute("RESET statement_timeout").await?;
        let report = outcome.map_err(|e| StoreError::Migration(with_causes(&e)))?;
        Ok(report.applied_migrations().len())
    }
}

/// The error and what caused it: refinery's own message ends in the driver's "db
/// error", and the server's message (which statement failed, and why) is its source.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
