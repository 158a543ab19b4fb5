//! What a provider is asked to do, whatever the kind: the operation, its stable
//! provider-facing key, its kind, and its stored request. Adapters read from the
//! payload what their API needs; nothing here knows about payments.

use uuid::Uuid;

#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    pub operation_id: Uuid,
    /// The provider-facing idempotency key: the same on every attempt by every worker.
    pub provider_key: String,
    /// The operation's kind (`payment`, `refund`, or a declared kind).
    pub kind: String,
    /// The normalised request as registered (for a refund, also the amount it resolved
    /// to and the payment's `payment_provider_reference`).
    pub payload: serde_json::Value,
    /// The money it moves, for kinds that move money: decimal text at the currency's
    /// minor-unit scale ("250.00") and the ISO 4217 code.
    pub amount: Option<String>,
    pub currency: Option<String>,
    /// The provider's id for this operation, when an earlier answer gave one.
    pub provider_reference: Option<String>,
}

impl Instruction {
    /// The instruction for a stored operation; the provider key is derived from its id.
    pub fn for_operation(
        operation_id: Uuid,
        kind: &str,
        payload: &serde_json::Value,
        money: Option<(String, String)>,
        provider_reference: Option<&str>,
    ) -> Self {
        let (amount, currency) = money.unzip();
        Self {
            operation_id,
            provider_key: provider_key(operation_id),
            kind: kind.to_owned(),
            payload: payload.clone(),
            amount,
            currency,
            provider_reference: provider_reference.map(str::to_owned),
        }
    }

    /// A string member of the payload.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.payload.get(name)?.as_str()
    }
}

/// The provider-facing key of an operation. Derived from the operation id alone, so it
/// is unique across agents (whose own keys are only unique per agent) and stable
/// across retries, workers and restarts.
pub fn provider_key(operation_id: Uuid) -> String {
    format!("opgate-{operation_id}")
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
