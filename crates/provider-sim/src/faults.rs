//! Injectable faults: which ones are armed, with what probability and how many
//! injections they have left, and the dice roll that decides whether one fires.
//! They apply alike to every create (payments, refunds, resources); lookups are
//! faulted only by `lookup_lag_ms`, and the `/_sim` controls never.
//! The same `FaultSet` is built from `--fault` flags and read/replaced through
//! `GET`/`POST /_sim/faults` (its JSON form is the serde form below).

use rand::Rng;
use serde::{Deserialize, Serialize};

/// A fault that fires with some probability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Commit the new record, then close the connection without answering.
    DropAfterCommit,
    /// Answer 503 and record nothing.
    ErrorBeforeCommit,
    /// Commit the new record, then answer 500.
    ErrorAfterCommit,
    /// Leave a new record pending instead of succeeding it.
    Pending,
    /// Answer 429 Too Many Requests (with `Retry-After` when
    /// `throttle_retry_after_s` is set) and record nothing: a rate limit.
    Throttle,
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Fault::DropAfterCommit,
        Fault::ErrorBeforeCommit,
        Fault::ErrorAfterCommit,
        Fault::Pending,
        Fault::Throttle,
    ];

    /// The name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Fault::DropAfterCommit => "drop-after-commit",
            Fault::ErrorBeforeCommit => "error-before-commit",
            Fault::ErrorAfterCommit => "error-after-commit",
            Fault::Pending => "pending",
            Fault::Throttle => "throttle",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Probability of firing, and (optionally) how many more times it may fire.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbFault {
    pub probability: f64,
    /// Injections left; absent = unlimited. At 0 the fault is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl ProbFault {
    pub fn new(probability: f64, times: Option<u32>) -> Result<Self, String> {
        let fault = ProbFault { probability, times };
        fault.validate()?;
        Ok(fault)
    }

    pub fn validate(&self) -> Result<(), String> {
        if (0.0..=1.0).contains(&self.probability) {
            Ok(())
        } else {
            Err(format!(
                "probability must be between 0.0 and 1.0, got {}",
                self.probability
            ))
        }
    }

    /// Rolls the dice; a hit spends one injection.
    fn roll(&mut self, rng: &mut impl Rng) -> bool {
        if self.times == Some(0) || !rng.gen_bool(self.probability) {
            return false;
        }
        if let Some(left) = &mut self.times {
            *left -= 1;
        }
        true
    }
}

/// Every armed fault. `None` / `0` = off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSet {
    #[serde(default)]
    pub drop_after_commit: Option<ProbFault>,
    #[serde(default)]
    pub error_before_commit: Option<ProbFault>,
    #[serde(default)]
    pub error_after_commit: Option<ProbFault>,
    #[serde(default)]
    pub pending: Option<ProbFault>,
    // The three below are left out of the JSON form while off, so that it reads as
    // it did before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ProbFault>,
    /// The `Retry-After` (seconds) a throttled answer carries; absent: none is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_retry_after_s: Option<u64>,
    /// Lookups answer 404 for a record until this long after it was committed, as an
    /// eventually consistent provider's reads lag its writes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lookup_lag_ms: u64,
    /// Sleep before handling every create (`POST /v1/payments`, `/v1/refunds`,
    /// `/v1/resources/{collection}`).
    #[serde(default)]
    pub delay_ms: u64,
    /// Sleep after handling every create, before answering: the work is done (a
    /// payment charged, a replay found) and its answer is late.
    #[serde(default)]
    pub delay_answer_ms: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl FaultSet {
    pub fn slot_mut(&mut self, fault: Fault) -> &mut Option<ProbFault> {
        match fault {
            Fault::DropAfterCommit => &mut self.drop_after_commit,
            Fault::ErrorBeforeCommit => &mut self.error_before_commit,
            Fault::ErrorAfterCommit => &mut self.error_after_commit,
            Fault::Pending => &mut self.pending,
            Fault::Throttle => &mut self.throttle,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let mut copy = *self;
        for fault in Fault::ALL {
            if let Some(p) = copy.slot_mut(fault) {
                p.validate().map_err(|e| format!("{}: {e}", fault.name()))?;
            }
        }
        Ok(())
    }

    /// Whether `fault` fires this time (spending one injection if it does).
    pub fn fire(&mut self, fault: Fault, rng: &mut impl Rng) -> bool {
        self.slot_mut(fault).as_mut().is_some_and(|p| p.roll(rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certain_fault_with_budget_spends_itself() {
        let mut faults = FaultSet {
            drop_after_commit: Some(ProbFault::new(1.0, Some(2)).unwrap()),
            ..FaultSet::default()
        };
        let mut rng = rand::thread_rng();
        assert!(faults.fire(Fault::DropAfterCommit, &mut rng));
        assert!(faults.fire(Fault::DropAfterCommit, &mut rng));
        assert!(!faults.fire(Fault::DropAfterCommit, &mut rng));
        assert_eq!(faults.drop_after_commit.unwrap().times, Some(0));
        assert!(!faults.fire(Fault::Pending, &mut rng));
    }

    #[test]
    fn zero_probability_never_fires_nor_spends() {
        let mut faults = FaultSet {
            pending: Some(ProbFault::new(0.0, Some(1)).unwrap()),
            ..FaultSet::default()
        };
        let mut rng = rand::thread_rng();
        for _ in 0..100 {
            assert!(!faults.fire(Fault::Pending, &mut rng));
        }
        assert_eq!(faults.pending.unwrap().times, Some(1));
    }

    #[test]
    fn json_form_round_trips_and_rejects_nonsense() {
        let set: FaultSet = serde_json::from_str(
            r#"{"drop_after_commit": {"probability": 1.0, "times": 1}, "delay_ms": 200}"#,
        )
        .unwrap();
        assert_eq!(
            set.drop_after_commit,
            Some(ProbFault::new(1.0, Some(1)).unwrap())
        );
        assert_eq!(set.error_before_commit, None);
        assert_eq!(set.delay_ms, 200);
        let back: FaultSet = serde_json::from_value(serde_json::to_value(set).unwrap()).unwrap();
        assert_eq!(back, set);

        let throttled: FaultSet = serde_json::from_str(
            r#"{"throttle": {"probability": 1.0, "times": 3}, "throttle_retry_after_s": 2,
                "lookup_lag_ms": 3000}"#,
        )
        .unwrap();
        assert_eq!(
            throttled.throttle,
            Some(ProbFault::new(1.0, Some(3)).unwrap())
        );
        assert_eq!(throttled.throttle_retry_after_s, Some(2));
        assert_eq!(throttled.lookup_lag_ms, 3000);
        let back: FaultSet =
            serde_json::from_value(serde_json::to_value(throttled).unwrap()).unwrap();
        assert_eq!(back, throttled);

        assert!(serde_json::from_str::<FaultSet>(r#"{"explode": 1}"#).is_err());
        let bad: FaultSet = serde_json::from_str(r#"{"pending": {"probability": 1.5}}"#).unwrap();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn names_round_trip() {
        for fault in Fault::ALL {
            assert_eq!(Fault::from_name(fault.name()), Some(fault));
        }
        assert_eq!(Fault::from_name("delay-ms"), None);
    }
}
