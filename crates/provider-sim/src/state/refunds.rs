//! Refunds by idempotency key and the money they returned: `POST /v1/refunds`, its
//! lookup and settlement. A payment can be refunded in parts, never beyond what it
//! took: succeeded and pending refunds both hold part of it (a pending refund may
//! still succeed), failed ones give theirs back.

use std::collections::HashMap;

use rust_decimal::Decimal;

use super::{new_id, settle_status, CreateOutcome, SettleError, SimState};
use crate::faults::Fault;
use crate::model::{exact_decimal, LedgerRefund, NewRefund, Refund, Settlement, Status};
use crate::time::now_rfc3339;

#[derive(Debug, Default)]
pub(super) struct Refunds {
    /// With the request that created each: a repeat must match it.
    by_key: HashMap<String, (NewRefund, Refund)>,
    keys_by_id: HashMap<String, String>,
    keys_by_payment: HashMap<String, Vec<String>>,
    pub(super) ledger: Vec<LedgerRefund>,
}

/// Why a new refund was refused (nothing recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundRejection {
    PaymentNotFound,
    /// The payment did not succeed (or its amount has more digits than the
    /// simulator can refund exactly).
    NotRefundable,
    CurrencyMismatch,
    /// `amount_refunded` counts succeeded and pending refunds.
    ExceedsAmountPaid {
        amount_paid: Decimal,
        amount_refunded: Decimal,
    },
}

impl Refunds {
    /// The sum of the payment's succeeded and pending refunds.
    fn held(&self, payment_id: &str) -> Decimal {
        self.keys_by_payment
            .get(payment_id)
            .into_iter()
            .flatten()
            .filter_map(|key| self.by_key.get(key))
            .filter(|(_, refund)| refund.status != Status::Failed)
            .map(|(request, _)| request.value)
            .sum()
    }
}

impl SimState {
    /// Creates a refund of a succeeded payment, within what is left of it.
    pub fn create_refund(
        &self,
        key: &str,
        request: NewRefund,
    ) -> Result<CreateOutcome<Refund>, RefundRejection> {
        let mut rng = rand::thread_rng();
        let mut inner = self.lock();
        let inner = &mut *inner;
        if inner.faults.fire(Fault::ErrorBeforeCommit, &mut rng) {
            return Ok(CreateOutcome::InjectedErrorBeforeCommit);
        }
        if let Some((original, existing)) = inner.refunds.by_key.get(key) {
            return Ok(if request == *original {
                CreateOutcome::Replayed(existing.clone())
            } else {
                CreateOutcome::KeyConflict
            });
        }

        let payment = inner
            .payments
            .by_id(&request.payment_id)
            .ok_or(RefundRejection::PaymentNotFound)?;
        let amount_paid = exact_decimal(&payment.amount)
            .filter(|_| payment.status == Status::Succeeded)
            .ok_or(RefundRejection::NotRefundable)?;
        if request.currency != payment.currency {
            return Err(RefundRejection::CurrencyMismatch);
        }
        let amount_refunded = inner.refunds.held(&request.payment_id);
        if amount_refunded
            .checked_add(request.value)
            .is_none_or(|total| total > amount_paid)
        {
            return Err(RefundRejection::ExceedsAmountPaid {
                amount_paid,
                amount_refunded,
            });
        }

        let start = inner
            .faults
            .start(request.simulate, "refund_declined", &mut rng);
        let now = now_rfc3339();
        let refund = Refund {
            id: new_id("re", &mut rng),
            status: start.status,
            failure_code: start.failure_code,
            payment_id: request.payment_id.clone(),
            amount: request.amount.clone(),
            currency: request.currency.clone(),
            idempotency_key: key.to_owned(),
            created_at: now.clone(),
        };
        let refunds = &mut inner.refunds;
        if refund.status == Status::Succeeded {
            refunds.ledger.push(LedgerRefund::of(&refund, now));
        }
        refunds.keys_by_id.insert(refund.id.clone(), key.to_owned());
        refunds
            .keys_by_payment
            .entry(refund.payment_id.clone())
            .or_default()
            .push(key.to_owned());
        refunds
            .by_key
            .insert(key.to_owned(), (request, refund.clone()));

        Ok(CreateOutcome::Created {
            record: refund,
            pending_injected: start.pending_injected,
            after_commit: inner.faults.after_commit(&mut rng),
        })
    }

    pub fn refund_by_key(&self, key: &str) -> Option<Refund> {
        let inner = self.lock();
        inner.refunds.by_key.get(key).map(|(_, r)| r.clone())
    }

    /// Ends a pending refund; a success returns the money now.
    pub fn settle_refund(
        &self,
        refund_id: &str,
        settlement: Settlement,
    ) -> Result<Refund, SettleError> {
        let mut inner = self.lock();
        let refunds = &mut inner.refunds;
        let key = refunds
            .keys_by_id
            .get(refund_id)
            .ok_or(SettleError::NotFound)?;
        let (_, refund) = refunds.by_key.get_mut(key).ok_or(SettleError::NotFound)?;
        if settle_status(&mut refund.status, &mut refund.failure_code, settlement)? {
            refunds.ledger.push(LedgerRefund::of(refund, now_rfc3339()));
        }
        Ok(refund.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NewPayment, Simulate};

    fn paid(state: &SimState, customer: &str, amount: &str) -> String {
        let payment = NewPayment {
            customer_id: customer.into(),
            invoice_id: "inv_1".into(),
            amount: amount.into(),
            currency: "USD".into(),
        };
        match state.create_payment(&format!("pay-{customer}"), payment) {
            CreateOutcome::Created { record, .. } => record.id,
            other => panic!("{other:?}"),
        }
    }

    fn refund(payment_id: &str, amount: &str) -> NewRefund {
        NewRefund {
            payment_id: payment_id.into(),
            amount: amount.into(),
            value: exact_decimal(amount).unwrap(),
            currency: "USD".into(),
            simulate: None,
        }
    }

    fn created(outcome: Result<CreateOutcome<Refund>, RefundRejection>) -> Refund {
        match outcome {
            Ok(CreateOutcome::Created { record, .. }) => record,
            other => panic!("expected a new refund, got {other:?}"),
        }
    }

    #[test]
    fn partial_refunds_up_to_the_amount_paid() {
        let state = SimState::default();
        let pay = paid(&state, "cus_1", "10.00");
        let first = created(state.create_refund("r1", refund(&pay, "3.30")));
        assert!(first.id.starts_with("re_"));
        assert_eq!(first.status, Status::Succeeded);
        assert_eq!(
            state.create_refund("r1", refund(&pay, "3.30")),
            Ok(CreateOutcome::Replayed(first.clone()))
        );
        assert_eq!(
            state.create_refund("r1", refund(&pay, "3.3")),
            Ok(CreateOutcome::KeyConflict)
        );
        assert_eq!(
            state.create_refund("r2", refund(&pay, "6.71")),
            Err(RefundRejection::ExceedsAmountPaid {
                amount_paid: Decimal::new(1000, 2),
                amount_refunded: Decimal::new(330, 2),
            })
        );
        created(state.create_refund("r2", refund(&pay, "6.70")));
        assert!(matches!(
            state.create_refund("r3", refund(&pay, "0.01")),
            Err(RefundRejection::ExceedsAmountPaid { .. })
        ));
        let ledger = state.ledger();
        assert_eq!(ledger.refund_count, 2);
        assert_eq!(ledger.refunds[0].refund_id, first.id);
        assert_eq!(ledger.count, 1);
        assert_eq!(state.refund_by_key("r1"), Some(first));
        assert_eq!(state.refund_by_key("r3"), None);
    }

    #[test]
    fn failed_refunds_free_their_amount_and_pending_ones_hold_it() {
        let state = SimState::default();
        let pay = paid(&state, "cus_1", "5");
        let failed = created(state.create_refund(
            "r1",
            NewRefund {
                simulate: Some(Simulate::Failed),
                ..refund(&pay, "5")
            },
        ));
        assert_eq!(failed.failure_code.as_deref(), Some("refund_declined"));
        let pending = created(state.create_refund(
            "r2",
            NewRefund {
                simulate: Some(Simulate::Pending),
                ..refund(&pay, "5")
            },
        ));
        assert_eq!(pending.status, Status::Pending);
        assert!(state.create_refund("r3", refund(&pay, "1")).is_err());
        assert_eq!(state.ledger().refund_count, 0);

        let settled = state.settle_refund(&pending.id, Settlement::Succeeded);
        assert_eq!(settled.map(|r| r.status), Ok(Status::Succeeded));
        assert_eq!(state.ledger().refunds[0].refund_id, pending.id);
        assert_eq!(
            state.settle_refund(&pending.id, Settlement::Succeeded),
            Err(SettleError::NotPending)
        );
        assert_eq!(
            state.settle_refund("re_nope", Settlement::Succeeded),
            Err(SettleError::NotFound)
        );
    }

    #[test]
    fn only_succeeded_payments_in_their_currency() {
        let state = SimState::default();
        assert_eq!(
            state.create_refund("r", refund("pay_nope", "1")),
            Err(RefundRejection::PaymentNotFound)
        );
        let declined = paid(&state, "decline_1", "5");
        let pending = paid(&state, "pending_1", "5");
        for payment_id in [&declined, &pending] {
            assert_eq!(
                state.create_refund("r", refund(payment_id, "1")),
                Err(RefundRejection::NotRefundable)
            );
        }
        let pay = paid(&state, "cus_1", "5");
        let euros = NewRefund {
            currency: "EUR".into(),
            ..refund(&pay, "1")
        };
        assert_eq!(
            state.create_refund("r", euros),
            Err(RefundRejection::CurrencyMismatch)
        );
        assert_eq!(state.refund_by_key("r"), None);
    }
}
