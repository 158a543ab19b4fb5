//! Schema migrations: the numbered SQL files in `migrations/`, embedded at build time
//! and applied by refinery. An advisory lock serialises concurrent runners, so every
//! binary may start with `--migrate` at once; running twice is a no-op.

use crate::error::StoreError;
use crate::pool::Store;

refinery::embed_migrations!("../../migrations");

/// An arbitrary constant that names opgate's migration lock.
pub(crate) const MIGRATION_LOCK_ID: i64 = 0x6f70_6761_7465;

pub(crate) const TAKE_LOCK: &str = "SELECT pg_advisory_lock($1)";
pub(crate) const RELEASE_LOCK: &str = "SELECT pg_advisory_unlock($1)";

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
        // Waiting on a table lock, a migration gives way before PostgreSQL looks for a
        // deadlock: if it and a running statement wait on each other, the migration is
        // the one rolled back (and run again), never the services' transaction.
        let deadlock_timeout: i32 = client.query_one(DEADLOCK_TIMEOUT_MS, &[]).await?.get(0);
        let lock_timeout = (deadlock_timeout / 2).max(1);
        client
            .batch_execute(&format!("SET lock_timeout = {lock_timeout}"))
            .await?;
        let outcome = run_retrying_lock_races(&mut client, target).await;
        client.batch_execute("RESET lock_timeout").await?;
        client.execute(RELEASE_LOCK, &[&MIGRATION_LOCK_ID]).await?;
        client.batch_execute("RESET statement_timeout").await?;
        outcome
    }
}

pub(crate) const DEADLOCK_TIMEOUT_MS: &str =
    "SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout'";

/// How many times a migration that lost a lock race with running services is tried:
/// with the pauses between them, about a minute of retries before it reports which
/// lock it could not take.
const MIGRATION_ATTEMPTS: u32 = 40;

/// The pause after a lost lock race grows with the attempt, up to this.
const LONGEST_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs the pending migrations; one that gave up waiting on a lock (a migration that
/// alters two tables can meet a running statement that locks them in the other order:
/// V13 and V14 do) or was chosen as a deadlock victim was rolled back whole, and is run
/// again after a pause.
async fn run_retrying_lock_races(
    client: &mut tokio_postgres::Client,
    target: Option<u32>,
) -> Result<usize, StoreError> {
    let mut applied = 0;
    let mut attempt = 1;
    loop {
        let runner = match target {
            Some(version) => migrations::runner().set_target(refinery::Target::Version(version)),
            None => migrations::runner(),
        };
        match runner.run_async(client).await {
            Ok(report) => return Ok(applied + report.applied_migrations().len()),
            Err(error) if attempt < MIGRATION_ATTEMPTS && lost_lock_race(&error) => {
                applied += error.report().map_or(0, |r| r.applied_migrations().len());
                tracing::warn!(attempt, "a migration lost a lock race with a running statement and was rolled back; running it again");
                let pause = std::time::Duration::from_millis(100 * u64::from(attempt));
                tokio::time::sleep(pause.min(LONGEST_PAUSE)).await;
                attempt += 1;
            }
            Err(error) => return Err(StoreError::Migration(with_causes(&error))),
        }
    }
}

/// A deadlock (40P01) or a lock wait cut short (55P03) somewhere in the error's causes.
fn lost_lock_race(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(cause) = source {
        if let Some(code) = cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code)
        {
            return matches!(code.code(), "40P01" | "55P03");
        }
        source = cause.source();
    }
    false
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
