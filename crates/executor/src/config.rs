//! The executor's configuration: flags with environment fallbacks, read in one place.

use std::time::Duration;

use clap::Parser;
use opgate_provider::{HttpProviderConfig, StripeConfig};

fn duration(text: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(text)
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "executor",
    version,
    about = "opgate executor: carries out each registered operation once"
)]
pub struct Config {
    /// PostgreSQL connection URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://localhost/opgate"
    )]
    pub database_url: String,

    #[command(flatten)]
    pub db: opgate_store::DbTuning,

    /// Base URL of the payment provider.
    #[arg(long, env = "PROVIDER_URL", default_value = "http://127.0.0.1:9090")]
    pub provider_url: String,

    /// Operations executed at once by this process (256: the fastest drain measured on 2 cores, docs/benchmarks.md).
    #[arg(long, env = "EXECUTOR_CONCURRENCY", default_value_t = 256)]
    pub concurrency: usize,

    /// Outbox events claimed per query (at most the free concurrency).
    #[arg(long, env = "EXECUTOR_BATCH_SIZE", default_value_t = 32)]
    pub batch_size: usize,

    /// Claim loops running at once; more help small batches, where each loop waits
    /// for its claim's commit (measurements: docs/benchmarks.md).
    #[arg(long, env = "EXECUTOR_CLAIMERS", default_value_t = 4)]
    pub claimers: usize,

    /// Write outcomes that arrive together in one transaction (group commit); false
    /// writes each in its own.
    #[arg(long, env = "EXECUTOR_GROUP_COMMIT", default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit: bool,

    /// Lease on a claimed operation; heartbeats renew it every third of it.
    #[arg(long, env = "EXECUTOR_LEASE", default_value = "30s", value_parser = duration)]
    pub lease: Duration,

    /// How often the outbox partitions new events no longer go to are emptied into the
    /// current one and truncated (their dead rows go with them, even where a held
    /// snapshot stops VACUUM).
    #[arg(long, env = "EXECUTOR_OUTBOX_ROTATION_INTERVAL", default_value = "500ms", value_parser = duration)]
    pub outbox_rotation_interval: Duration,

    /// How long a rotation waits for a partition's lock (claims queue behind it
    /// meanwhile) before leaving that partition for the next round.
    #[arg(long, env = "EXECUTOR_OUTBOX_ROTATION_LOCK_TIMEOUT", default_value = "100ms", value_parser = duration)]
    pub outbox_rotation_lock_timeout: Duration,

    /// Fallback poll interval when no notification arrives.
    #[arg(long, env = "EXECUTOR_POLL_INTERVAL", default_value = "1s", value_parser = duration)]
    pub poll_interval: Duration,

    /// Provider calls per operation (across requeues, and keyed retries in one claim).
    #[arg(long, env = "EXECUTOR_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: u32,

    /// First retry delay; doubles per retry, with jitter, up to --retry-max.
    #[arg(long, env = "EXECUTOR_RETRY_BASE", default_value = "200ms", value_parser = duration)]
    pub retry_base: Duration,

    /// Longest retry delay: the doubling stops here.
    #[arg(long, env = "EXECUTOR_RETRY_MAX", default_value = "30s", value_parser = duration)]
    pub retry_max: Duration,

    /// Time to establish a connection to the provider.
    #[arg(long, env = "PROVIDER_CONNECT_TIMEOUT", default_value = "2s", value_parser = duration)]
    pub connect_timeout: Duration,

    /// Time from sending a request to the provider to reading its whole answer.
    #[arg(long, env = "PROVIDER_RESPONSE_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub response_timeout: Duration,

    /// The provider deduplicates by Idempotency-Key, so an uncertain call may be
    /// re-sent with the same key, and abandoned work re-sent by a new owner. When
    /// false, both become UNKNOWN for the reconciler.
    #[arg(long, env = "PROVIDER_KEYED_RETRIES", default_value_t = true, action = clap::ArgAction::Set)]
    pub keyed_retries: bool,

    /// On SIGTERM, how long in-flight operations may take before their leases are
    /// released for another executor.
    #[arg(long, env = "EXECUTOR_SHUTDOWN_GRACE", default_value = "10s", value_parser = duration)]
    pub shutdown_grace: Duration,

    /// Address of the Prometheus `/metrics` endpoint (port 0: any free port; the
    /// chosen address is printed on stdout).
    #[arg(long, env = "EXECUTOR_METRICS_LISTEN", default_value = "127.0.0.1:0")]
    pub metrics_listen: std::net::SocketAddr,

    /// How often the pipeline gauges (operations by status, outbox depth and age) are
    /// read from the database.
    #[arg(long, env = "EXECUTOR_GAUGE_INTERVAL", default_value = "5s", value_parser = duration)]
    pub gauge_interval: Duration,

    /// Log format: json (one object per line, with trace and span ids) or pretty.
    #[arg(long, env = "OPGATE_LOG_FORMAT", default_value = "json")]
    pub log_format: opgate_telemetry::LogFormat,

    /// Apply pending database migrations before starting.
    #[arg(long)]
    pub migrate: bool,

    /// The catalog of declared operation kinds (TOML; see examples/catalog.toml): its
    /// providers are called for the kinds bound to them. A mistake in it stops the
    /// service at start.
    #[arg(long, env = "OPGATE_CATALOG")]
    pub catalog: Option<std::path::PathBuf>,

    /// Stripe's API, for operations bound to the stripe provider.
    #[arg(long, env = "STRIPE_API_URL", default_value = "https://api.stripe.com")]
    pub stripe_url: String,

    /// The environment variable that holds the Stripe secret key (the key itself is
    /// never a flag, nor logged). Stripe is called only when that variable is set.
    #[arg(
        long,
        env = "OPGATE_STRIPE_KEY_ENV",
        default_value = "STRIPE_SECRET_KEY"
    )]
    pub stripe_key_env: String,
}

impl Config {
    pub fn provider(&self) -> HttpProviderConfig {
        HttpProviderConfig {
            base_url: self.provider_url.clone(),
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            keyed_retries_safe: self.keyed_retries,
        }
    }

    /// Stripe's settings, when its secret key is in the environment.
    pub fn stripe(&self) -> Option<StripeConfig> {
        let timeouts = (self.connect_timeout, self.response_timeout);
        StripeConfig::from_env(
            &self.stripe_key_env,
            &self.stripe_url,
            timeouts,
            self.keyed_retries,
        )
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0
            || self.batch_size == 0
            || self.max_attempts == 0
            || self.claimers == 0
        {
            return Err(
                "--concurrency, --batch-size, --max-attempts and --claimers must be at least 1"
                    .into(),
            );
        }
        if self.lease < Duration::from_millis(300) {
            return Err("--lease must be at least 300ms".into());
        }
        if self.outbox_rotation_interval.is_zero() || self.outbox_rotation_lock_timeout.is_zero() {
            return Err(
                "--outbox-rotation-interval and --outbox-rotation-lock-timeout must be above zero"
                    .into(),
            );
        }
        Ok(())
    }
}
