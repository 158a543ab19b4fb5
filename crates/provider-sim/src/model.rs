//! The provider's data: payments, ledger charges, and the request bodies that create
//! and settle payments together with their validation.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentStatus {
    Succeeded,
    Failed,
    Pending,
}

/// A payment as stored and as returned by every endpoint that returns one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Payment {
    pub id: String,
    pub status: PaymentStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    pub customer_id: String,
    pub invoice_id: String,
    pub amount: String,
    pub currency: String,
    pub idempotency_key: String,
    pub created_at: String,
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

#[derive(Debug, Deserialize)]
pub struct Metadata {
    #[serde(default)]
    pub operation_id: Option<String>,
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
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err("currency must be a three-letter upper-case code such as \"USD\"".into());
        }
        Ok(NewPayment {
            customer_id: self.customer_id,
            invoice_id: self.invoice_id,
            amount: self.amount,
            currency: self.currency,
        })
    }
}

/// `digits[.digits]`, not zero.
fn is_positive_decimal(text: &str) -> bool {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && digits(fraction) && text.bytes().any(|b| (b'1'..=b'9').contains(&b))
}

/// How a pending payment ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    Succeeded,
    Failed { failure_code: String },
}

/// Body of `POST /_sim/payments/{id}/settle`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    pub status: String,
    #[serde(default)]
    pub failure_code: Option<String>,
}

impl SettleRequest {
    pub fn validate(self) -> Result<Settlement, String> {
        match (self.status.as_str(), self.failure_code) {
            ("succeeded", None) => Ok(Settlement::Succeeded),
            ("succeeded", Some(_)) => {
                Err("failure_code is only allowed with status \"failed\"".into())
            }
            ("failed", code) => Ok(Settlement::Failed {
                failure_code: code
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| "card_declined".into()),
            }),
            _ => Err("status must be \"succeeded\" or \"failed\"".into()),
        }
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
    fn amounts() {
        for ok in ["250.00", "1", "0.01", "10.5"] {
            assert!(is_positive_decimal(ok), "{ok}");
        }
        for bad in [
            "", "0", "0.00", "-1.00", "1.", ".5", "1,00", "1e3", " 1", "abc",
        ] {
            assert!(!is_positive_decimal(bad), "{bad}");
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

    #[test]
    fn settlements() {
        let settle = |status: &str, code: Option<&str>| {
            SettleRequest {
                status: status.into(),
                failure_code: code.map(Into::into),
            }
            .validate()
        };
        assert_eq!(settle("succeeded", None), Ok(Settlement::Succeeded));
        assert_eq!(
            settle("failed", Some("insufficient_funds")),
            Ok(Settlement::Failed {
                failure_code: "insufficient_funds".into()
            })
        );
        assert_eq!(
            settle("failed", None),
            Ok(Settlement::Failed {
                failure_code: "card_declined".into()
            })
        );
        assert!(settle("succeeded", Some("x")).is_err());
        assert!(settle("pending", None).is_err());
    }
}
