//! Counters an operator reads in the logs (and, later, as metrics).

use std::sync::atomic::{AtomicU64, Ordering};

use opgate_domain::OperationStatus;

#[derive(Default, Debug)]
pub struct Stats {
    succeeded: AtomicU64,
    failed: AtomicU64,
    unknown: AtomicU64,
    provider_uncertain: AtomicU64,
    stale_writes_rejected: AtomicU64,
    leases_lost: AtomicU64,
}

impl Stats {
    pub fn completed(&self, status: OperationStatus) {
        let counter = match status {
            OperationStatus::Succeeded => &self.succeeded,
            OperationStatus::Failed => &self.failed,
            _ => &self.unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn provider_uncertain(&self) {
        self.provider_uncertain.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stale_write_rejected(&self) {
        self.stale_writes_rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub fn lease_lost(&self) {
        self.leases_lost.fetch_add(1, Ordering::Relaxed);
    }

    pub fn log_summary(&self) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        tracing::info!(
            succeeded = get(&self.succeeded),
            failed = get(&self.failed),
            unknown = get(&self.unknown),
            provider_uncertain = get(&self.provider_uncertain),
            stale_writes_rejected = get(&self.stale_writes_rejected),
            leases_lost = get(&self.leases_lost),
            "executor totals"
        );
    }
}
