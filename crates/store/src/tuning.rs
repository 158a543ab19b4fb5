//! The connection settings every service takes the same way (`--db-statement-timeout`,
//! `--db-keepalive`), flattened into each binary's flags so that they cannot drift
//! apart.

use std::time::Duration;

use crate::pool::{PoolSettings, DEFAULT_KEEPALIVE_IDLE, DEFAULT_STATEMENT_TIMEOUT};

#[derive(Debug, Clone, clap::Args)]
pub struct DbTuning {
    /// The database cancels any statement of this service running longer than this
    /// (lock waits included), as "database unavailable"; 0s leaves the server's own.
    #[arg(long, env = "OPGATE_DB_STATEMENT_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub db_statement_timeout: Duration,

    /// TCP keepalive idle time on database connections: a dead peer is noticed within
    /// about twice this, not after the kernel's hours.
    #[arg(long, env = "OPGATE_DB_KEEPALIVE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub db_keepalive: Duration,
}

impl Default for DbTuning {
    fn default() -> Self {
        Self {
            db_statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            db_keepalive: DEFAULT_KEEPALIVE_IDLE,
        }
    }
}

impl DbTuning {
    /// `settings` with these values.
    pub fn apply(&self, settings: PoolSettings) -> PoolSettings {
        PoolSettings {
            statement_timeout: (!self.db_statement_timeout.is_zero())
                .then_some(self.db_statement_timeout),
            keepalive_idle: self.db_keepalive.max(Duration::from_secs(1)),
            ..settings
        }
    }
}
