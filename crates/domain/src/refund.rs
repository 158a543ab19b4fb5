//! A refund request: which of the agent's payments, how much (what remains refundable
//! when absent) and why. The currency is always the payment's, so the caller reads the
//! payment first and passes its currency in; whether the payment may be refunded, and
//! whether the amount fits, is decided by the database when the refund is registered.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::identifiers::{BusinessId, IdentifierError};
use crate::kind::BuiltinKind;
use crate::money::{Currency, Money, MoneyError};
use crate::operation_request::OperationRequest;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefundRequestError {
    #[error("payment_operation_id {0:?} is not a UUID")]
    PaymentId(String),
    #[error(transparent)]
    Identifier(#[from] IdentifierError),
    #[error(transparent)]
    Money(#[from] MoneyError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequest {
    payment_operation_id: Uuid,
    currency: Currency,
    /// `None`: whatever of the payment is not yet refunded, decided at registration.
    money: Option<Money>,
    reason: Option<BusinessId>,
}

impl RefundRequest {
    pub const MAX_REASON_CHARS: usize = 500;

    /// The payment's id as sent; parsed on its own because the payment must be read
    /// (for its currency) before the rest can be.
    pub fn parse_payment_id(raw: &str) -> Result<Uuid, RefundRequestError> {
        Uuid::parse_str(raw.trim()).map_err(|_| RefundRequestError::PaymentId(raw.to_owned()))
    }

    pub fn parse(
        payment_operation_id: Uuid,
        amount: Option<&str>,
        reason: Option<&str>,
        currency: Currency,
    ) -> Result<Self, RefundRequestError> {
        let money = amount.map(|a| Money::parse(a, currency)).transpose()?;
        let reason = reason
            .map(|r| BusinessId::parse_at_most("reason", r, Self::MAX_REASON_CHARS))
            .transpose()?;
        Ok(Self {
            payment_operation_id,
            currency,
            money,
            reason,
        })
    }

    pub fn payment_operation_id(&self) -> Uuid {
        self.payment_operation_id
    }

    pub fn money(&self) -> Option<Money> {
        self.money
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    /// Hashed and stored: the request as the agent made it (an absent amount stays
    /// absent, so a retry after other refunds still hashes alike).
    pub fn business_fields(&self) -> BTreeMap<&'static str, String> {
        let mut fields = BTreeMap::from([
            ("operation_type", BuiltinKind::Refund.as_str().to_owned()),
            (
                "payment_operation_id",
                self.payment_operation_id.hyphenated().to_string(),
            ),
            ("currency", self.currency.code().to_owned()),
        ]);
        if let Some(money) = self.money {
            fields.insert("amount", money.amount().to_string());
        }
        if let Some(reason) = &self.reason {
            fields.insert("reason", reason.as_str().to_owned());
        }
        fields
    }

    pub fn to_operation_request(&self) -> OperationRequest {
        OperationRequest::from_string_fields(
            BuiltinKind::Refund.name(),
            self.business_fields(),
            self.money,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYMENT: &str = "6f1c3f7e-8a51-4a8e-9d0c-2f61f0b8c0de";

    fn refund(amount: Option<&str>, reason: Option<&str>) -> RefundRequest {
        let id = RefundRequest::parse_payment_id(PAYMENT).unwrap();
        RefundRequest::parse(id, amount, reason, Currency::USD).unwrap()
    }

    #[test]
    fn amounts_hash_alike_at_the_currencys_scale() {
        let a = refund(Some("30"), None).to_operation_request();
        let b = refund(Some("30.00"), None).to_operation_request();
        assert_eq!(a.request_hash(), b.request_hash());
        assert_ne!(
            a.request_hash(),
            refund(Some("30.01"), None)
                .to_operation_request()
                .request_hash()
        );
    }

    #[test]
    fn an_absent_amount_is_its_own_request_and_moves_no_fixed_money() {
        let full = refund(None, None);
        assert_eq!(full.money(), None);
        assert!(!full.business_fields().contains_key("amount"));
        assert_ne!(
            full.to_operation_request().request_hash(),
            refund(Some("30"), None)
                .to_operation_request()
                .request_hash()
        );
    }

    #[test]
    fn the_canonical_fields_are_normalised() {
        let request = refund(Some("5"), Some("  damaged in transit "));
        assert_eq!(
            serde_json::to_string(&request.business_fields()).unwrap(),
            format!(
                r#"{{"amount":"5.00","currency":"USD","operation_type":"refund","payment_operation_id":"{PAYMENT}","reason":"damaged in transit"}}"#
            )
        );
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(RefundRequest::parse_payment_id("pay_1").is_err());
        let id = RefundRequest::parse_payment_id(PAYMENT).unwrap();
        assert!(RefundRequest::parse(id, Some("0"), None, Currency::USD).is_err());
        assert!(RefundRequest::parse(id, Some("1.001"), None, Currency::USD).is_err());
        assert!(RefundRequest::parse(id, None, Some(" "), Currency::USD).is_err());
        let long = "r".repeat(RefundRequest::MAX_REASON_CHARS + 1);
        assert!(RefundRequest::parse(id, None, Some(&long), Currency::USD).is_err());
    }
}
