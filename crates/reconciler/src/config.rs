//! The reconciler's configuration: flags with environment fallbacks, read in one place.

use std::time::Duration;

use clap::Parser;
use opgate_provider::{HttpProviderConfig, StripeConfig};

use crate::decision::Policy;

fn duration(text: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(text)
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "reconciler",
    version,
    about = "opgate reconciler: resolves UNKNOWN outcomes from the provider's records"
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

    /// Time between sweeps when the last one found less than a full batch.
    #[arg(long, env = "RECONCILER_INTERVAL", default_value = "1s", value_parser = duration)]
    pub interval: Duration,

    /// Operations claimed per sweep, at most --concurrency (plus as many abandoned
    /// RECONCILING ones); all of a sweep's lookups run at once, so each ends inside
    /// its lease.
    #[arg(long, env = "RECONCILER_BATCH_SIZE", default_value_t = 32)]
    pub batch_size: usize,

    /// Upper bound on the claim size, and so on lookups run at once.
    #[arg(long, env = "RECONCILER_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,

    /// Lease on a claimed operation; must exceed the response timeout.
    #[arg(long, env = "RECONCILER_LEASE", default_value = "30s", value_parser = duration)]
    pub lease: Duration,

    /// First delay before re-checking an inconclusive operation; doubles per check.
    #[arg(long, env = "RECONCILER_BACKOFF_BASE", default_value = "2s", value_parser = duration)]
    pub backoff_base: Duration,

    /// Longest delay between two checks of one operation: the doubling stops here.
    #[arg(long, env = "RECONCILER_BACKOFF_MAX", default_value = "10m", value_parser = duration)]
    pub backoff_max: Duration,

    /// Inconclusive checks before MANUAL_REVIEW.
    #[arg(long, env = "RECONCILER_MAX_CHECKS", default_value_t = 10)]
    pub max_checks: u32,

    /// Time since an operation became UNKNOWN after which an inconclusive check
    /// escalates to MANUAL_REVIEW.
    #[arg(long, env = "RECONCILER_MAX_AGE", default_value = "24h", value_parser = duration)]
    pub max_age: Duration,

    /// How long after an operation became UNKNOWN the provider may still not know it
    /// before that counts as an answer.
    #[arg(long, env = "PROVIDER_NOT_FOUND_GRACE", default_value = "5m", value_parser = duration)]
    pub not_found_grace: Duration,

    /// The provider's lookup is authoritative: not found past the grace period is FAILED
    /// (the payment never happened) instead of MANUAL_REVIEW.
    #[arg(long, env = "PROVIDER_NOT_FOUND_AUTHORITATIVE", default_value_t = false, action = clap::ArgAction::Set)]
    pub not_found_authoritative: bool,

    /// Time to establish a connection to the provider.
    #[arg(long, env = "PROVIDER_CONNECT_TIMEOUT", default_value = "2s", value_parser = duration)]
    pub connect_timeout: Duration,

    /// Time from sending a lookup to reading its whole answer.
    #[arg(long, env = "PROVIDER_RESPONSE_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub response_timeout: Duration,

    /// Address of the Prometheus `/metrics` endpoint (port 0: any free port; the
    /// chosen address is printed on stdout).
    #[arg(long, env = "RECONCILER_METRICS_LISTEN", default_value = "127.0.0.1:0")]
    pub metrics_listen: std::net::SocketAddr,

    /// How often the pipeline gauges (operations by status, outbox depth and age) are
    /// read from the database.
    #[arg(long, env = "RECONCILER_GAUGE_INTERVAL", default_value = "5s", value_parser = duration)]
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
            keyed_retries_safe: true,
        }
    }

    pub fn policy(&self) -> Policy {
        Policy {
            max_checks: self.max_checks,
            max_age: self.max_age,
            not_found_grace: self.not_found_grace,
            not_found_authoritative: self.not_found_authoritative,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
        }
    }

    /// Stripe's settings, when its secret key is in the environment.
    pub fn stripe(&self) -> Option<StripeConfig> {
        let timeouts = (self.connect_timeout, self.response_timeout);
        StripeConfig::from_env(&self.stripe_key_env, &self.stripe_url, timeouts, true)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size == 0 || self.concurrency == 0 || self.max_checks == 0 {
            return Err("--batch-size, --concurrency and --max-checks must be at least 1".into());
        }
        if self.lease <= self.connect_timeout + self.response_timeout {
            return Err(
                "--lease must exceed the connect and response timeouts together, \
                        so that a lookup always ends inside its lease"
                    .into(),
            );
        }
        Ok(())
    }
}
