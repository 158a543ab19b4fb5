//! A payment request as opgate accepts it: every field validated and normalised.

use std::collections::BTreeMap;

use crate::identifiers::{BusinessId, IdentifierError};
use crate::kind::BuiltinKind;
use crate::money::{Currency, Money, MoneyError};
use crate::operation_request::OperationRequest;
use crate::request_hash::RequestHash;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentRequestError {
    #[error(transparent)]
    Identifier(#[from] IdentifierError),
    #[error(transparent)]
    Money(#[from] MoneyError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRequest {
    customer_id: BusinessId,
    invoice_id: BusinessId,
    money: Money,
}

impl PaymentRequest {
    /// `currency` defaults to USD when the agent leaves it out.
    pub fn parse(
        customer_id: &str,
        invoice_id: &str,
        amount: &str,
        currency: Option<&str>,
    ) -> Result<Self, PaymentRequestError> {
        let customer_id = BusinessId::parse("customer_id", customer_id)?;
        let invoice_id = BusinessId::parse("invoice_id", invoice_id)?;
        let currency = match currency {
            Some(code) => Currency::parse(code)?,
            None => Currency::USD,
        };
        let money = Money::parse(amount, currency)?;
        Ok(Self {
            customer_id,
            invoice_id,
            money,
        })
    }

    pub fn customer_id(&self) -> &BusinessId {
        &self.customer_id
    }

    pub fn invoice_id(&self) -> &BusinessId {
        &self.invoice_id
    }

    pub fn money(&self) -> Money {
        self.money
    }

    /// Every business field after normalisation, keyed by name. This is both what is
    /// hashed and what is stored as the operation's payload, so the two cannot differ.
    pub fn business_fields(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("operation_type", BuiltinKind::Payment.as_str().to_owned()),
            ("customer_id", self.customer_id.as_str().to_owned()),
            ("invoice_id", self.invoice_id.as_str().to_owned()),
            ("amount", self.money.amount().to_string()),
            ("currency", self.money.currency().code().to_owned()),
        ])
    }

    /// The normalised request as compact JSON with sorted keys.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(&self.business_fields()).expect("a map of strings always serialises")
    }

    pub fn request_hash(&self) -> RequestHash {
        RequestHash::of_canonical_json(&self.canonical_json())
    }

    pub fn to_operation_request(&self) -> OperationRequest {
        OperationRequest::from_string_fields(
            BuiltinKind::Payment.name(),
            self.business_fields(),
            Some(self.money),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_is_compact_sorted_and_normalised() {
        let request = PaymentRequest::parse(" cus_1 ", "inv_9", "250", Some("usd")).unwrap();
        assert_eq!(
            request.canonical_json(),
            r#"{"amount":"250.00","currency":"USD","customer_id":"cus_1","invoice_id":"inv_9","operation_type":"payment"}"#
        );
    }

    #[test]
    fn the_operation_request_hashes_as_the_payment_always_has() {
        let payment = PaymentRequest::parse("cus_1", "inv_1", "250", None).unwrap();
        let request = payment.to_operation_request();
        assert_eq!(request.request_hash(), &payment.request_hash());
        assert_eq!(request.kind().as_str(), "payment");
        assert_eq!(request.money(), Some(payment.money()));
        assert_eq!(request.fields()["amount"], "250.00");
    }

    #[test]
    fn currency_defaults_to_usd() {
        let request = PaymentRequest::parse("c", "i", "1", None).unwrap();
        assert_eq!(request.money().currency().code(), "USD");
    }

    #[test]
    fn each_field_is_validated() {
        assert!(PaymentRequest::parse("", "i", "1", None).is_err());
        assert!(PaymentRequest::parse("c", " ", "1", None).is_err());
        assert!(PaymentRequest::parse("c", "i", "0", None).is_err());
        assert!(PaymentRequest::parse("c", "i", "1", Some("XXZ")).is_err());
        assert!(PaymentRequest::parse("c", "i", "1.5", Some("JPY")).is_err());
    }
}
