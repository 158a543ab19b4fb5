//! The provider's in-memory state and the rules that change it: payments by
//! idempotency key, the ledger of charges, the per-key request counter and the armed
//! faults. One mutex guards it all; it is never held across an `.await`. Lost at exit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng;
use serde::Serialize;

use crate::faults::{Fault, FaultSet};
use crate::model::{Charge, NewPayment, Payment, PaymentStatus, Settlement};
use crate::time::now_rfc3339;

/// Shared handle to the simulator's state; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SimState {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    payments_by_key: HashMap<String, Payment>,
    keys_by_id: HashMap<String, String>,
    charges: Vec<Charge>,
    requests_by_key: BTreeMap<String, u64>,
    traceparents_by_key: BTreeMap<String, Vec<String>>,
    faults: FaultSet,
}

/// What became of a `POST /v1/payments` once it reached the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The error-before-commit fault fired: nothing was recorded.
    InjectedErrorBeforeCommit,
    /// The key was seen before with the same parameters: the stored payment.
    Replayed(Payment),
    /// The key was seen before with different parameters.
    KeyConflict,
    /// A new payment was recorded (and charged if it succeeded).
    Created {
        payment: Payment,
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
    pub count: usize,
    pub requests_by_key: BTreeMap<String, u64>,
    /// The W3C `traceparent` of each request under each key, in order (requests
    /// without one are not listed): shows that callers propagate their trace.
    pub traceparents_by_key: BTreeMap<String, Vec<String>>,
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

    /// Counts one `POST /v1/payments` received under `key`, whatever its fate, and
    /// the trace context it carried.
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

    /// Steps b–e of the provider contract: error-before-commit, replay or conflict,
    /// create (declined / pending / charged), then the after-commit faults.
    pub fn create_payment(&self, key: &str, request: NewPayment) -> CreateOutcome {
        let mut rng = rand::thread_rng();
        let mut inner = self.lock();
        if inner.faults.fire(Fault::ErrorBeforeCommit, &mut rng) {
            return CreateOutcome::InjectedErrorBeforeCommit;
        }
        if let Some(existing) = inner.payments_by_key.get(key) {
            return if request.same_parameters_as(existing) {
                CreateOutcome::Replayed(existing.clone())
            } else {
                CreateOutcome::KeyConflict
            };
        }

        let mut pending_injected = false;
        let (status, failure_code) = if request.customer_id.starts_with("decline") {
            (PaymentStatus::Failed, Some("card_declined".to_owned()))
        } else if request.customer_id.starts_with("pending") {
            (PaymentStatus::Pending, None)
        } else if inner.faults.fire(Fault::Pending, &mut rng) {
            pending_injected = true;
            (PaymentStatus::Pending, None)
        } else {
            (PaymentStatus::Succeeded, None)
        };
        let now = now_rfc3339();
        let payment = Payment {
            id: new_payment_id(&mut rng),
            status,
            failure_code,
            customer_id: request.customer_id,
            invoice_id: request.invoice_id,
            amount: request.amount,
            currency: request.currency,
            idempotency_key: key.to_owned(),
            created_at: now.clone(),
        };
        if status == PaymentStatus::Succeeded {
            inner.charges.push(Charge::of(&payment, now));
        }
        inner.keys_by_id.insert(payment.id.clone(), key.to_owned());
        inner
            .payments_by_key
            .insert(key.to_owned(), payment.clone());

        let after_commit = [Fault::ErrorAfterCommit, Fault::DropAfterCommit]
            .into_iter()
            .find(|&fault| inner.faults.fire(fault, &mut rng));
        CreateOutcome::Created {
            payment,
            pending_injected,
            after_commit,
        }
    }

    pub fn payment_by_key(&self, key: &str) -> Option<Payment> {
        self.lock().payments_by_key.get(key).cloned()
    }

    /// Ends a pending payment; a success is charged now.
    pub fn settle(&self, payment_id: &str, settlement: Settlement) -> Result<Payment, SettleError> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let key = inner
            .keys_by_id
            .get(payment_id)
            .ok_or(SettleError::NotFound)?;
        let payment = inner
            .payments_by_key
            .get_mut(key)
            .ok_or(SettleError::NotFound)?;
        if payment.status != PaymentStatus::Pending {
            return Err(SettleError::NotPending);
        }
        match settlement {
            Settlement::Succeeded => {
                payment.status = PaymentStatus::Succeeded;
                inner.charges.push(Charge::of(payment, now_rfc3339()));
            }
            Settlement::Failed { failure_code } => {
                payment.status = PaymentStatus::Failed;
                payment.failure_code = Some(failure_code);
            }
        }
        Ok(payment.clone())
    }

    pub fn ledger(&self) -> Ledger {
        let inner = self.lock();
        Ledger {
            charges: inner.charges.clone(),
            count: inner.charges.len(),
            requests_by_key: inner.requests_by_key.clone(),
            traceparents_by_key: inner.traceparents_by_key.clone(),
        }
    }
}

/// `pay_` followed by 24 random hex digits.
fn new_payment_id(rng: &mut impl Rng) -> String {
    let bytes: [u8; 12] = rng.gen();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("pay_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(customer: &str, amount: &str) -> NewPayment {
        NewPayment {
            customer_id: customer.into(),
            invoice_id: "inv_1".into(),
            amount: amount.into(),
            currency: "USD".into(),
        }
    }

    fn created(outcome: CreateOutcome) -> Payment {
        match outcome {
            CreateOutcome::Created { payment, .. } => payment,
            other => panic!("expected a new payment, got {other:?}"),
        }
    }

    #[test]
    fn payment_ids_have_the_documented_shape() {
        let id = new_payment_id(&mut rand::thread_rng());
        assert_eq!(id.len(), 28);
        assert!(id.starts_with("pay_"));
        assert!(id[4..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn replay_conflict_and_charge() {
        let state = SimState::default();
        let first = created(state.create_payment("k", request("cus_1", "250.00")));
        assert_eq!(first.status, PaymentStatus::Succeeded);
        assert_eq!(
            state.create_payment("k", request("cus_1", "250.00")),
            CreateOutcome::Replayed(first.clone())
        );
        assert_eq!(
            state.create_payment("k", request("cus_1", "250.01")),
            CreateOutcome::KeyConflict
        );
        assert_eq!(state.ledger().count, 1);
        assert_eq!(state.payment_by_key("k"), Some(first));
    }

    #[test]
    fn pending_settles_once() {
        let state = SimState::default();
        let p = created(state.create_payment("k", request("pending_1", "5")));
        assert_eq!(p.status, PaymentStatus::Pending);
        assert_eq!(state.ledger().count, 0);
        let settled = state.settle(&p.id, Settlement::Succeeded).unwrap();
        assert_eq!(settled.status, PaymentStatus::Succeeded);
        assert_eq!(state.ledger().count, 1);
        assert_eq!(
            state.settle(&p.id, Settlement::Succeeded),
            Err(SettleError::NotPending)
        );
        assert_eq!(
            state.settle("pay_nope", Settlement::Succeeded),
            Err(SettleError::NotFound)
        );
    }
}
