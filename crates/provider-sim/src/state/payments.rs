//! Payments by idempotency key and the charges they left: `POST /v1/payments`,
//! its lookup and settlement.

use std::collections::HashMap;

use super::{new_id, settle_status, CreateOutcome, SettleError, SimState};
use crate::faults::Fault;
use crate::model::{Charge, NewPayment, Payment, Settlement, Simulate, Status};
use crate::time::now_rfc3339;

#[derive(Debug, Default)]
pub(super) struct Payments {
    by_key: HashMap<String, Payment>,
    keys_by_id: HashMap<String, String>,
    pub(super) charges: Vec<Charge>,
}

impl Payments {
    /// The payment with this id, for refunds.
    pub(super) fn by_id(&self, id: &str) -> Option<&Payment> {
        self.by_key.get(self.keys_by_id.get(id)?)
    }
}

impl SimState {
    /// Creates a payment. Customers whose id starts with `decline` are declined, with
    /// `pending` stay pending: how tests ask for those outcomes.
    pub fn create_payment(&self, key: &str, request: NewPayment) -> CreateOutcome<Payment> {
        let mut rng = rand::thread_rng();
        let mut inner = self.lock();
        let inner = &mut *inner;
        if inner.faults.fire(Fault::ErrorBeforeCommit, &mut rng) {
            return CreateOutcome::InjectedErrorBeforeCommit;
        }
        if let Some(existing) = inner.payments.by_key.get(key) {
            return if request.same_parameters_as(existing) {
                CreateOutcome::Replayed(existing.clone())
            } else {
                CreateOutcome::KeyConflict
            };
        }

        let simulate = if request.customer_id.starts_with("decline") {
            Some(Simulate::Failed)
        } else if request.customer_id.starts_with("pending") {
            Some(Simulate::Pending)
        } else {
            None
        };
        let start = inner.faults.start(simulate, "card_declined", &mut rng);
        let now = now_rfc3339();
        let payment = Payment {
            id: new_id("pay", &mut rng),
            status: start.status,
            failure_code: start.failure_code,
            customer_id: request.customer_id,
            invoice_id: request.invoice_id,
            amount: request.amount,
            currency: request.currency,
            idempotency_key: key.to_owned(),
            created_at: now.clone(),
        };
        let payments = &mut inner.payments;
        if payment.status == Status::Succeeded {
            payments.charges.push(Charge::of(&payment, now));
        }
        payments
            .keys_by_id
            .insert(payment.id.clone(), key.to_owned());
        payments.by_key.insert(key.to_owned(), payment.clone());

        CreateOutcome::Created {
            record: payment,
            pending_injected: start.pending_injected,
            after_commit: inner.faults.after_commit(&mut rng),
        }
    }

    pub fn payment_by_key(&self, key: &str) -> Option<Payment> {
        self.lock().payments.by_key.get(key).cloned()
    }

    /// Ends a pending payment; a success is charged now.
    pub fn settle_payment(
        &self,
        payment_id: &str,
        settlement: Settlement,
    ) -> Result<Payment, SettleError> {
        let mut inner = self.lock();
        let payments = &mut inner.payments;
        let key = payments
            .keys_by_id
            .get(payment_id)
            .ok_or(SettleError::NotFound)?;
        let payment = payments.by_key.get_mut(key).ok_or(SettleError::NotFound)?;
        if settle_status(&mut payment.status, &mut payment.failure_code, settlement)? {
            payments.charges.push(Charge::of(payment, now_rfc3339()));
        }
        Ok(payment.clone())
    }
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

    fn created(outcome: CreateOutcome<Payment>) -> Payment {
        match outcome {
            CreateOutcome::Created { record, .. } => record,
            other => panic!("expected a new payment, got {other:?}"),
        }
    }

    #[test]
    fn replay_conflict_and_charge() {
        let state = SimState::default();
        let first = created(state.create_payment("k", request("cus_1", "250.00")));
        assert_eq!(first.status, Status::Succeeded);
        assert!(first.id.starts_with("pay_"));
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
    fn declined_customers_fail() {
        let state = SimState::default();
        let p = created(state.create_payment("k", request("decline_1", "5")));
        assert_eq!(p.status, Status::Failed);
        assert_eq!(p.failure_code.as_deref(), Some("card_declined"));
        assert_eq!(state.ledger().count, 0);
    }

    #[test]
    fn pending_settles_once() {
        let state = SimState::default();
        let p = created(state.create_payment("k", request("pending_1", "5")));
        assert_eq!(p.status, Status::Pending);
        assert_eq!(state.ledger().count, 0);
        let settled = state.settle_payment(&p.id, Settlement::Succeeded).unwrap();
        assert_eq!(settled.status, Status::Succeeded);
        assert_eq!(state.ledger().count, 1);
        assert_eq!(
            state.settle_payment(&p.id, Settlement::Succeeded),
            Err(SettleError::NotPending)
        );
        assert_eq!(
            state.settle_payment("pay_nope", Settlement::Succeeded),
            Err(SettleError::NotFound)
        );
    }
}
