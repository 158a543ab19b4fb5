//! Refunds: the stored refund, the ledger row it leaves when money goes back, and the
//! `POST /v1/refunds` body. Amounts are compared as exact decimals (`rust_decimal`):
//! the refundable balance of a payment must never be off by a rounding.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{check_currency, is_positive_decimal, Metadata, Record, Simulate, Status};

/// A refund as stored and as returned by every endpoint that returns one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refund {
    pub id: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub idempotency_key: String,
    pub created_at: String,
}

impl Record for Refund {
    fn id(&self) -> &str {
        &self.id
    }
}

/// One row of the ledger's `refunds`: money actually returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerRefund {
    pub refund_id: String,
    pub payment_id: String,
    pub idempotency_key: String,
    pub amount: String,
    pub currency: String,
    pub refunded_at: String,
}

impl LedgerRefund {
    pub fn of(refund: &Refund, refunded_at: String) -> LedgerRefund {
        LedgerRefund {
            refund_id: refund.id.clone(),
            payment_id: refund.payment_id.clone(),
            idempotency_key: refund.idempotency_key.clone(),
            amount: refund.amount.clone(),
            currency: refund.currency.clone(),
            refunded_at,
        }
    }
}

/// A validated refund request: the parameters a repeat must match exactly (the
/// amount as text, like payments: `"5.0"` and `"5.00"` are different requests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRefund {
    pub payment_id: String,
    pub amount: String,
    /// `amount` as an exact decimal.
    pub value: Decimal,
    pub currency: String,
    pub simulate: Option<Simulate>,
}

/// Body of `POST /v1/refunds`. Unknown fields are ignored, as most providers do;
/// `simulate` (`"failed"` or `"pending"`) is the simulator's own.
#[derive(Debug, Deserialize)]
pub struct CreateRefundRequest {
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub simulate: Option<Value>,
}

impl CreateRefundRequest {
    pub fn validate(self) -> Result<NewRefund, String> {
        if self.payment_id.is_empty() {
            return Err("payment_id must not be empty".into());
        }
        let value = exact_decimal(&self.amount)
            .filter(|_| is_positive_decimal(&self.amount))
            .ok_or_else(|| {
                "amount must be a positive decimal string such as \"25.00\" (at most 28 digits)"
                    .to_owned()
            })?;
        check_currency(&self.currency)?;
        Ok(NewRefund {
            simulate: Simulate::from_field(self.simulate.as_ref()),
            payment_id: self.payment_id,
            amount: self.amount,
            value,
            currency: self.currency,
        })
    }
}

/// `text` as a decimal without rounding; `None` if it has more digits than a
/// `Decimal` holds (a payment may: its amount is only checked for shape).
pub fn exact_decimal(text: &str) -> Option<Decimal> {
    Decimal::from_str_exact(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> Result<NewRefund, String> {
        serde_json::from_value::<CreateRefundRequest>(body)
            .unwrap()
            .validate()
    }

    #[test]
    fn validation() {
        let ok = request(json!({
            "payment_id": "pay_1", "amount": "25.00", "currency": "USD",
            "metadata": {"operation_id": "x"}, "simulate": "pending"
        }))
        .unwrap();
        assert_eq!(ok.simulate, Some(Simulate::Pending));
        assert_eq!(ok.value, Decimal::new(2500, 2));
        for bad in [
            json!({"payment_id": "", "amount": "1", "currency": "USD"}),
            json!({"payment_id": "p", "amount": "0.00", "currency": "USD"}),
            json!({"payment_id": "p", "amount": "1", "currency": "usd"}),
            json!({"payment_id": "p", "amount": "1.00000000000000000000000000000", "currency": "USD"}),
        ] {
            assert!(request(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn exact_decimals_do_not_round() {
        assert_eq!(exact_decimal("0.1"), Some(Decimal::new(1, 1)));
        assert_eq!(
            exact_decimal("0.1").unwrap() + exact_decimal("0.2").unwrap(),
            exact_decimal("0.3").unwrap()
        );
        assert_eq!(exact_decimal("1.00000000000000000000000000001"), None);
        assert_eq!(exact_decimal("99999999999999999999999999999999"), None);
    }
}
