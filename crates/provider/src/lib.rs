//! Providers: the `Provider` trait the executor and reconciler call, the outcome
//! types every call is classified into, and the HTTP adapter (hyper) that speaks the
//! provider contract of DESIGN.md.

mod http_adapter;
mod outcome;

use std::future::Future;

pub use http_adapter::{HttpProvider, HttpProviderConfig};
pub use outcome::{classify_response, LookupOutcome, ProviderOutcome};
use uuid::Uuid;

/// What the provider is asked to do for one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentInstruction {
    pub operation_id: Uuid,
    /// The provider-facing idempotency key: the same on every attempt by every worker.
    pub provider_key: String,
    pub customer_id: String,
    pub invoice_id: String,
    /// Decimal text at the currency's minor-unit scale, e.g. "250.00".
    pub amount: String,
    pub currency: String,
}

impl PaymentInstruction {
    /// Builds the instruction from an operation's stored payload (the normalised
    /// business fields written at registration); `None` if a field is missing.
    pub fn from_payload(operation_id: Uuid, payload: &serde_json::Value) -> Option<Self> {
        let field = |name: &str| payload.get(name)?.as_str().map(str::to_owned);
        Some(Self {
            operation_id,
            provider_key: provider_key(operation_id),
            customer_id: field("customer_id")?,
            invoice_id: field("invoice_id")?,
            amount: field("amount")?,
            currency: field("currency")?,
        })
    }
}

/// The provider-facing key of an operation. Derived from the operation id alone, so it
/// is unique across agents (whose own keys are only unique per agent) and stable
/// across retries, workers and restarts.
pub fn provider_key(operation_id: Uuid) -> String {
    format!("opgate-{operation_id}")
}

pub trait Provider: Send + Sync + 'static {
    /// Asks the provider to carry out the payment under `instruction.provider_key`.
    fn execute(
        &self,
        instruction: &PaymentInstruction,
    ) -> impl Future<Output = ProviderOutcome> + Send;

    /// Asks the provider what became of the payment with this key.
    fn lookup(
        &self,
        instruction: &PaymentInstruction,
    ) -> impl Future<Output = LookupOutcome> + Send;

    /// Whether re-sending a request with the same key is safe (the provider
    /// deduplicates by key). Decides whether an uncertain outcome may be retried and
    /// whether abandoned work may be re-sent.
    fn keyed_retries_safe(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_keys_are_stable_and_per_operation() {
        let id = Uuid::new_v4();
        assert_eq!(provider_key(id), provider_key(id));
        assert_ne!(provider_key(id), provider_key(Uuid::new_v4()));
        assert!(provider_key(id).len() <= 255);
    }
}
