//! intake's configuration: flags with environment fallbacks, read in one place.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use opgate_store::{DbTuning, PoolSettings};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "intake",
    version,
    about = "opgate intake: registers agents' operations exactly once"
)]
pub struct Config {
    /// PostgreSQL connection URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://localhost/opgate"
    )]
    pub database_url: String,

    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(
        long = "listen",
        env = "INTAKE_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,

    /// Where `/metrics` (Prometheus text) is served, apart from the agents' API (port 0
    /// picks a free port; the chosen address is printed on stdout's second line).
    #[arg(long, env = "INTAKE_METRICS_LISTEN", default_value = "127.0.0.1:0")]
    pub metrics_listen: SocketAddr,

    /// Apply pending database migrations before serving.
    #[arg(long)]
    pub migrate: bool,

    /// Database connections for reads and for the writes that are not group-committed
    /// (refunds, approvals), shared out among the HTTP workers (each holds its share,
    /// at least one). The committers hold theirs apart (`--group-commit-committers`).
    #[arg(long, env = "INTAKE_DB_CONNECTIONS", default_value_t = 16)]
    pub db_connections: usize,

    /// How long a request waits for a database connection before answering 503 (a bare
    /// number is seconds, as the older --db-timeout-secs took).
    #[arg(long, alias = "db-timeout-secs", env = "INTAKE_DB_TIMEOUT", default_value = "2s", value_parser = duration_or_secs)]
    pub db_timeout: Duration,

    #[command(flatten)]
    pub db: DbTuning,

    /// Log format: json (one object per line, with trace and span ids) or pretty.
    #[arg(long, env = "OPGATE_LOG_FORMAT", default_value = "json")]
    pub log_format: opgate_telemetry::LogFormat,

    /// Group commit: registrations that arrive together share one transaction.
    #[arg(long, env = "INTAKE_GROUP_COMMIT", default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit: bool,

    /// Most registrations in one group-commit transaction.
    #[arg(long, env = "INTAKE_GROUP_COMMIT_MAX_BATCH", default_value_t = 64)]
    pub group_commit_max_batch: usize,

    /// Group-commit transactions in flight at once in each HTTP worker; each committer
    /// holds a connection of its own (and the worker one more, for its budgeted
    /// registrations), so intake holds up to `--db-connections` plus workers x
    /// (committers + 1). One makes the largest batches: fewer statements and commits
    /// for the same registrations.
    #[arg(long, env = "INTAKE_GROUP_COMMIT_COMMITTERS", default_value_t = 1)]
    pub group_commit_committers: usize,

    /// The least time between two NOTIFYs by which an HTTP worker wakes the executors
    /// after registrations: a registration's NOTIFY leaves at once unless one left less
    /// than this ago; the registrations in between share the next one, sent when the
    /// time is up. So an executor waiting for work waits at most this long more, and a
    /// busy worker sends a few hundred NOTIFYs a second, not thousands.
    #[arg(long, env = "INTAKE_EXECUTOR_WAKE_INTERVAL", default_value = "2ms", value_parser = humantime::parse_duration)]
    pub executor_wake_interval: Duration,

    /// HTTP worker threads (default: one per core the process may use).
    #[arg(long, env = "INTAKE_WORKERS")]
    pub workers: Option<usize>,

    /// The catalog of declared operation kinds (TOML; see examples/catalog.toml), served
    /// beside the built-in payment and refund. A mistake in it stops intake at start.
    #[arg(long, env = "OPGATE_CATALOG")]
    pub catalog: Option<std::path::PathBuf>,

    /// The provider new payments are bound to (their refunds follow them): opgate's HTTP
    /// contract (provider-sim) or Stripe. Operations keep the provider they were
    /// registered with.
    #[arg(long, env = "OPGATE_PAYMENT_PROVIDER", default_value = "opgate-http", value_parser = ["opgate-http", "stripe"])]
    pub payment_provider: String,

    /// How long a request body may take to arrive after its headers; a slower client
    /// is answered 408 and cut off. Nothing is held meanwhile (no database connection).
    #[arg(long, env = "INTAKE_BODY_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub body_timeout: Duration,

    /// How long an operation above its agent's approval threshold waits for an
    /// operator; undecided after that, the reconciler fails it ("approval expired").
    #[arg(long, env = "INTAKE_APPROVAL_TIMEOUT", default_value = "24h", value_parser = humantime::parse_duration)]
    pub approval_timeout: Duration,
}

/// What each HTTP worker's group commit is made of.
#[derive(Clone)]
pub struct Committers {
    /// Its connections.
    pub pool: PoolSettings,
    /// Plain registrations' committer tasks (`--group-commit-committers`).
    pub committers: usize,
    /// The most registrations in one batch.
    pub max_batch: usize,
}

impl Config {
    /// Each HTTP worker's group commit, or `None` when it is off.
    pub fn committers(&self) -> Option<Committers> {
        self.group_commit.then(|| {
            let committers = self.group_commit_committers.max(1);
            Committers {
                // One connection per committer, and one for the budgeted batcher,
                // whose batch may wait on an agent's lock: the plain registrations do
                // not queue behind it.
                pool: PoolSettings {
                    max_connections: committers + 1,
                    ..self.pool_settings()
                },
                committers,
                max_batch: self.group_commit_max_batch.max(1),
            }
        })
    }

    /// The HTTP worker threads: `--workers`, or one per core this process may use.
    pub fn http_workers(&self) -> usize {
        self.workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    pub fn pool_settings(&self) -> PoolSettings {
        self.db.apply(PoolSettings {
            max_connections: self.db_connections.max(1),
            acquire_timeout: self.db_timeout.max(Duration::from_millis(100)),
            // Every statement intake runs finds its rows by key.
            avoid_sequential_scans: true,
            ..PoolSettings::default()
        })
    }
}

/// A duration with its unit ("2s", "500ms"), or a bare number of seconds.
fn duration_or_secs(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(text).map_err(|e| e.to_string()),
    }
}
