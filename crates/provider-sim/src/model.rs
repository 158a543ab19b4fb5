//! The provider's data: payments, refunds and generic resources, the ledger rows they
//! leave, and the request bodies that create and settle them together with their
//! validation. What the three share lives here; each has its own submodule.

mod payment;
mod refund;
mod resource;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use payment::{Charge, CreatePaymentRequest, NewPayment, Payment};
pub use refund::{exact_decimal, CreateRefundRequest, LedgerRefund, NewRefund, Refund};
pub use resource::{valid_collection, LedgerResource, NewResource, Resource, COLLECTION_RULE};

/// Where a payment, refund or resource stands. Only `Pending` can change, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Succeeded,
    Failed,
    Pending,
}

/// Anything the API returns with an id: the id is what the request log shows.
pub trait Record: Serialize {
    fn id(&self) -> &str;
}

#[derive(Debug, Deserialize)]
pub struct Metadata {
    #[serde(default)]
    pub operation_id: Option<String>,
}

/// A test's request, through a top-level `"simulate"` string in the body, that a new
/// refund or resource end some way other than succeeding. Any other value is ignored:
/// for resources it is just data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simulate {
    Failed,
    Pending,
}

impl Simulate {
    pub fn from_field(value: Option<&Value>) -> Option<Simulate> {
        match value.and_then(Value::as_str) {
            Some("failed") => Some(Simulate::Failed),
            Some("pending") => Some(Simulate::Pending),
            _ => None,
        }
    }
}

/// `digits[.digits]`, not zero.
pub(crate) fn is_positive_decimal(text: &str) -> bool {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && digits(fraction) && text.bytes().any(|b| (b'1'..=b'9').contains(&b))
}

pub(crate) fn check_currency(currency: &str) -> Result<(), String> {
    if currency.len() == 3 && currency.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(())
    } else {
        Err("currency must be a three-letter upper-case code such as \"USD\"".into())
    }
}

/// How a pending payment, refund or resource ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    Succeeded,
    Failed { failure_code: String },
}

/// Body of `POST /_sim/{payments|refunds|resources}/{id}/settle`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    pub status: String,
    #[serde(default)]
    pub failure_code: Option<String>,
}

impl SettleRequest {
    /// `default_failure_code` is used when a failure names none: each kind of record
    /// has its own (`card_declined` for payments).
    pub fn validate(self, default_failure_code: &str) -> Result<Settlement, String> {
        match (self.status.as_str(), self.failure_code) {
            ("succeeded", None) => Ok(Settlement::Succeeded),
            ("succeeded", Some(_)) => {
                Err("failure_code is only allowed with status \"failed\"".into())
            }
            ("failed", code) => Ok(Settlement::Failed {
                failure_code: code
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| default_failure_code.into()),
            }),
            _ => Err("status must be \"succeeded\" or \"failed\"".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn currencies() {
        assert!(check_currency("USD").is_ok());
        for bad in ["usd", "USDT", "US", "", "U$D"] {
            assert!(check_currency(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn simulate_field() {
        let of = |v: Value| Simulate::from_field(Some(&v));
        assert_eq!(of(json!("failed")), Some(Simulate::Failed));
        assert_eq!(of(json!("pending")), Some(Simulate::Pending));
        assert_eq!(of(json!("succeeded")), None);
        assert_eq!(of(json!(["failed"])), None);
        assert_eq!(Simulate::from_field(None), None);
    }

    #[test]
    fn settlements() {
        let settle = |status: &str, code: Option<&str>| {
            SettleRequest {
                status: status.into(),
                failure_code: code.map(Into::into),
            }
            .validate("card_declined")
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
