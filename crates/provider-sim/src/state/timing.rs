//! The faults that play out in time: throttling (a 429 with `Retry-After`, each one's
//! time kept in the ledger so that a test can measure how long its caller waited) and
//! lookup lag (a record invisible to lookups for a while after it was committed, as
//! the reads of an eventually consistent provider lag its writes).

use std::time::{Duration, Instant};

use super::SimState;
use crate::faults::Fault;
use crate::time::now_rfc3339;

/// The throttle fault fired for a create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    /// The `Retry-After` to send, in seconds; `None`: no header.
    pub retry_after_s: Option<u64>,
}

impl SimState {
    /// Whether the throttle fault fires for this create under `key` (spending one
    /// injection if it does); its time is then kept in the ledger.
    pub fn throttle(&self, key: &str) -> Option<Throttled> {
        let mut inner = self.lock();
        if !inner.faults.fire(Fault::Throttle, &mut rand::thread_rng()) {
            return None;
        }
        inner
            .throttled_by_key
            .entry(key.to_owned())
            .or_default()
            .push(now_rfc3339());
        Some(Throttled {
            retry_after_s: inner.faults.throttle_retry_after_s,
        })
    }

    /// Notes that the record `id` was committed now (the lookup lag runs from here).
    pub fn note_committed(&self, id: &str) {
        self.lock()
            .committed_at
            .insert(id.to_owned(), Instant::now());
    }

    /// Whether lookups must not see the record `id` yet (lookup-lag-ms).
    pub fn lookup_lagging(&self, id: &str) -> bool {
        let inner = self.lock();
        let lag = Duration::from_millis(inner.faults.lookup_lag_ms);
        !lag.is_zero()
            && inner
                .committed_at
                .get(id)
                .is_some_and(|at| at.elapsed() < lag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultSet, ProbFault};

    #[test]
    fn throttling_spends_its_injections_and_keeps_each_time() {
        let state = SimState::new(FaultSet {
            throttle: Some(ProbFault::new(1.0, Some(2)).unwrap()),
            throttle_retry_after_s: Some(2),
            ..FaultSet::default()
        });
        let fired = Throttled {
            retry_after_s: Some(2),
        };
        assert_eq!(state.throttle("k"), Some(fired));
        assert_eq!(state.throttle("k"), Some(fired));
        assert_eq!(state.throttle("k"), None);
        let ledger = state.ledger();
        assert_eq!(ledger.throttled_by_key["k"].len(), 2);
        assert!(ledger.throttled_by_key["k"][0].ends_with('Z'));
    }

    #[test]
    fn a_record_is_invisible_to_lookups_for_the_lag_after_its_commit() {
        let state = SimState::new(FaultSet {
            lookup_lag_ms: 60_000,
            ..FaultSet::default()
        });
        state.note_committed("pay_1");
        assert!(state.lookup_lagging("pay_1"));
        assert!(!state.lookup_lagging("pay_unknown"), "never committed here");
        state.set_faults(FaultSet {
            lookup_lag_ms: 1,
            ..FaultSet::default()
        });
        std::thread::sleep(Duration::from_millis(5));
        assert!(!state.lookup_lagging("pay_1"), "the lag has passed");
        state.set_faults(FaultSet::default());
        state.note_committed("pay_2");
        assert!(!state.lookup_lagging("pay_2"), "no lag armed");
    }
}
