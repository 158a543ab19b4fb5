//! Payments: the stored payment, the ledger charge it leaves when it succeeds, and
//! the `POST /v1/payments` body.

use serde::{Deserialize, Serialize};

use super::{check_currency, is_positive_decimal, Metadata, Record, Status};

/// A payment as stored and as returned by every endpoint that returns one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Payment {
    pub id: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    pub customer_id: String,
    pub invoice_id: String,
    pub amount: String,
    pub currency: String,
    pub idempotency_key: String,
    pub created_at: String,
}

impl Record for Payment {
    fn id(&self) -> &str {
        &self.id
    }
}

/// One row of the ledger: money actually taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Charge {
    pub payment_id: String,
    pub idempotency_key: String,
    pub customer_id: String,
    pub invoice_id: String,
    pub amount: String,
    pub currency: String,
    pub charged_at: String,
}

impl Charge {
    pub fn of(payment: &Payment, charged_at: String) -> Charge {
        Charge {
            payment_id: payment.id.clone(),
            idempotency_key: payment.idempotency_key.clone(),
            customer_id: payment.customer_id.clone(),
            invoice_id: payment.invoice_id.clone(),
            amount: payment.amount.clone(),
            currency: payment.currency.clone(),
            charged_at,
        }
    }
}

/// A validated payment request: the parameters a repeat must match exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    pub customer_id: String,
    pub invoice_id: String,
    pub amount: String,
    pub currency: String,
}

impl NewPayment {
    pub fn same_parameters_as(&self, payment: &Payment) -> bool {
        self.customer_id == payment.customer_id
            && self.invoice_id == payment.invoice_id
            && self.amount == payment.amount
            && self.currency == payment.currency
    }
}

/// Body of `POST /v1/payments`. Unknown fields are ignored, as most providers do.
#[derive(Debug, Deserialize)]
pub struct CreatePaymentRequest {
    pub customer_id: String,
    pub invoice_id: String,
    pub amount: String,
    pub currency: String,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

impl CreatePaymentRequest {
    pub fn validate(self) -> Result<NewPayment, String> {
        if self.customer_id.is_empty() {
            return Err("customer_id must not be empty".into());
        }
        if self.invoice_id.is_empty() {
            return Err("invoice_id must not be empty".into());
        }
        if !is_positive_decimal(&self.amount) {
            return Err("amount must be a positive decimal string such as \"250.00\"".into());
        }
        check_currency(&self.currency)?;
        Ok(NewPayment {
            customer_id: self.customer_id,
            invoice_id: self.invoice_id,
            amount: self.amount,
            currency: self.currency,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(amount: &str, currency: &str) -> CreatePaymentRequest {
        CreatePaymentRequest {
            customer_id: "cus_1".into(),
            invoice_id: "inv_1".into(),
            amount: amount.into(),
            currency: currency.into(),
            metadata: None,
        }
    }

    #[test]
    fn validation() {
        assert!(request("250.00", "USD").validate().is_ok());
        assert!(request("250.00", "usd").validate().is_err());
        assert!(request("250.00", "USDT").validate().is_err());
        assert!(request("-5", "USD").validate().is_err());
        let mut empty = request("1", "USD");
        empty.customer_id.clear();
        assert!(empty.validate().is_err());
    }
}
