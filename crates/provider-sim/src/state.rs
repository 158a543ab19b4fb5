//! The provider's in-memory state and the rules that change it: payments, refunds
//! and generic resources by idempotency key (one submodule each), the ledger of what
//! happened to money and resources, the per-key request counter and the armed faults.
//! One mutex guards it all; it is never held across an `.await`. Lost at exit.
//!
//! Every create follows the same steps of the provider contract: error-before-commit,
//! replay or conflict, (the kind's own checks), create (failed / pending / succeeded),
//! then the after-commit faults. The shared pieces are here.

mod payments;
mod refunds;
mod resources;
mod timing;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use serde::Serialize;

use crate::faults::{Fault, FaultSet};
use crate::model::{Charge, LedgerRefund, LedgerResource, Settlement, Simulate, Status};

pub use refunds::RefundRejection;
pub use timing::Throttled;

/// Shared handle to the simulator's state; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SimState {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    payments: payments::Payments,
    refunds: refunds::Refunds,
    resources: resources::Resources,
    requests_by_key: BTreeMap<String, u64>,
    traceparents_by_key: BTreeMap<String, Vec<String>>,
    throttled_by_key: BTreeMap<String, Vec<String>>,
    /// When each record (by id) was committed, for the lookup-lag fault.
    committed_at: HashMap<String, Instant>,
    faults: FaultSet,
}

/// What became of a create request (`T`: payment, refund or resource) once it
/// reached the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome<T> {
    /// The error-before-commit fault fired: nothing was recorded.
    InjectedErrorBeforeCommit,
    /// The key was seen before with the same parameters: the stored record.
    Replayed(T),
    /// The key was seen before with different parameters.
    KeyConflict,
    /// A new record was stored (and entered in the ledger if it succeeded).
    Created {
        record: T,
        /// Whether the pending fault made it pending.
        pending_injected: bool,
        /// `ErrorAfterCommit` or `DropAfterCommit` if one of them fired.
        after_commit: Option<Fault>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleError {
    NotFound,
    NotPending,
}

/// Body of `GET /_sim/ledger`.
#[derive(Debug, Clone, Serialize)]
pub struct Ledger {
    pub charges: Vec<Charge>,
    /// The number of charges (kept as it was before refunds existed).
    pub count: usize,
    /// Refunds that returned money, in the order they did.
    pub refunds: Vec<LedgerRefund>,
    pub refund_count: usize,
    /// Resources that succeeded, in the order they did.
    pub resources: Vec<LedgerResource>,
    pub resource_count: usize,
    /// Create requests (payments, refunds and resources alike) received under each
    /// key, whatever their fate.
    pub requests_by_key: BTreeMap<String, u64>,
    /// The W3C `traceparent` of each request under each key, in order (requests
    /// without one are not listed): shows that callers propagate their trace.
    pub traceparents_by_key: BTreeMap<String, Vec<String>>,
    /// When each create under each key was answered 429 by the throttle fault (RFC
    /// 3339, in order): with a charge's `charged_at`, how long the caller waited.
    pub throttled_by_key: BTreeMap<String, Vec<String>>,
}

impl SimState {
    pub fn new(faults: FaultSet) -> SimState {
        let state = SimState::default();
        state.lock().faults = faults;
        state
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn faults(&self) -> FaultSet {
        self.lock().faults
    }

    /// Replaces the whole fault set.
    pub fn set_faults(&self, faults: FaultSet) {
        self.lock().faults = faults;
    }

    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.lock().faults.delay_ms)
    }

    /// How long an answer is held once its create was handled (delay-answer-ms).
    pub fn answer_delay(&self) -> Duration {
        Duration::from_millis(self.lock().faults.delay_answer_ms)
    }

    /// Counts one create request (payment, refund or resource) received under `key`,
    /// whatever its fate, and the trace context it carried.
    pub fn record_request(&self, key: &str, traceparent: Option<&str>) {
        let mut inner = self.lock();
        *inner.requests_by_key.entry(key.to_owned()).or_default() += 1;
        if let Some(traceparent) = traceparent {
            inner
                .traceparents_by_key
                .entry(key.to_owned())
                .or_default()
                .push(traceparent.to_owned());
        }
    }

    pub fn ledger(&self) -> Ledger {
        let inner = self.lock();
        Ledger {
            charges: inner.payments.charges.clone(),
            count: inner.payments.charges.len(),
            refunds: inner.refunds.ledger.clone(),
            refund_count: inner.refunds.ledger.len(),
            resources: inner.resources.ledger.clone(),
            resource_count: inner.resources.ledger.len(),
            requests_by_key: inner.requests_by_key.clone(),
            traceparents_by_key: inner.traceparents_by_key.clone(),
            throttled_by_key: inner.throttled_by_key.clone(),
        }
    }
}

/// How a new record starts: `simulate` first (so a simulated failure does not spend
/// the pending fault), then the pending fault.
struct Start {
    status: Status,
    failure_code: Option<String>,
    pending_injected: bool,
}

// Here rather than in faults.rs: these decide what becomes of a record, which the
// fault module knows nothing about.
impl FaultSet {
    /// `failure_code` is the code of a simulated failure.
    fn start(
        &mut self,
        simulate: Option<Simulate>,
        failure_code: &str,
        rng: &mut impl Rng,
    ) -> Start {
        let (status, failure_code, pending_injected) = match simulate {
            Some(Simulate::Failed) => (Status::Failed, Some(failure_code.to_owned()), false),
            Some(Simulate::Pending) => (Status::Pending, None, false),
            None if self.fire(Fault::Pending, rng) => (Status::Pending, None, true),
            None => (Status::Succeeded, None, false),
        };
        Start {
            status,
            failure_code,
            pending_injected,
        }
    }

    /// The after-commit fault that fires for a record just stored, if any.
    fn after_commit(&mut self, rng: &mut impl Rng) -> Option<Fault> {
        [Fault::ErrorAfterCommit, Fault::DropAfterCommit]
            .into_iter()
            .find(|&fault| self.fire(fault, rng))
    }
}

/// Ends a pending record; `Ok(true)` if it succeeded (and so enters the ledger).
fn settle_status(
    status: &mut Status,
    failure_code: &mut Option<String>,
    settlement: Settlement,
) -> Result<bool, SettleError> {
    if *status != Status::Pending {
        return Err(SettleError::NotPending);
    }
    match settlement {
        Settlement::Succeeded => {
            *status = Status::Succeeded;
            Ok(true)
        }
        Settlement::Failed { failure_code: code } => {
            *status = Status::Failed;
            *failure_code = Some(code);
            Ok(false)
        }
    }
}

/// `prefix` and `_` followed by 24 random hex digits: `pay_…`, `re_…`, `res_…`.
fn new_id(prefix: &str, rng: &mut impl Rng) -> String {
    let bytes: [u8; 12] = rng.gen();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_documented_shape() {
        for (prefix, len) in [("pay", 28), ("re", 27), ("res", 28)] {
            let id = new_id(prefix, &mut rand::thread_rng());
            assert_eq!(id.len(), len);
            assert!(id.starts_with(&format!("{prefix}_")));
            assert!(id[len - 24..].bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn simulate_wins_over_the_pending_fault_without_spending_it() {
        let mut faults = FaultSet {
            pending: Some(crate::ProbFault::new(1.0, Some(1)).unwrap()),
            ..FaultSet::default()
        };
        let rng = &mut rand::thread_rng();
        let failed = faults.start(Some(Simulate::Failed), "rejected", rng);
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(failed.failure_code.as_deref(), Some("rejected"));
        assert!(!failed.pending_injected);
        let injected = faults.start(None, "rejected", rng);
        assert_eq!(injected.status, Status::Pending);
        assert!(injected.pending_injected);
        assert_eq!(faults.start(None, "x", rng).status, Status::Succeeded);
    }

    #[test]
    fn settling_only_ends_pending_records() {
        let (mut status, mut code) = (Status::Pending, None);
        let failed = Settlement::Failed {
            failure_code: "x".into(),
        };
        assert_eq!(settle_status(&mut status, &mut code, failed), Ok(false));
        assert_eq!((status, code.as_deref()), (Status::Failed, Some("x")));
        assert_eq!(
            settle_status(&mut status, &mut code, Settlement::Succeeded),
            Err(SettleError::NotPending)
        );
    }
}
