//! The Stripe adapter: payments as PaymentIntents confirmed at once with the customer's
//! default payment method, refunds as Refunds of the payment's intent. Every create
//! carries `Idempotency-Key: opgate-<operation_id>` and `metadata[opgate_operation_id]`,
//! amounts go in minor units, and an operation is looked up by its stored object id, or
//! by that metadata when the id never arrived. Stripe's answers are classified in
//! `stripe_outcome.rs`. The secret key is held here only, never logged or traced.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request};
use opgate_domain::Currency;
use rust_decimal::Decimal;

use crate::http_client::{url_component, Exchange, HttpClient};
use crate::outcome::{LookupOutcome, ProviderOutcome};
use crate::stripe_outcome::{classify, found_in_list, Object};
use crate::{BoxFuture, Instruction, Provider};

/// The name operations bound to Stripe record.
pub const STRIPE_PROVIDER: &str = "stripe";

/// Pages of recent objects a lookup by metadata reads when Stripe's search is not
/// available (100 objects a page).
const LIST_PAGES: usize = 5;

#[derive(Clone)]
pub struct StripeConfig {
    /// `https://api.stripe.com`, or a fake's address in tests.
    pub base_url: String,
    pub secret_key: String,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Re-send an uncertain request under the same key (Stripe deduplicates by it for
    /// at least 24 hours); off only where something in between does not.
    pub keyed_retries_safe: bool,
}

impl StripeConfig {
    /// Stripe's settings when `key_env` names a variable holding a secret key; `None`
    /// (Stripe off) when it is unset or empty.
    pub fn from_env(
        key_env: &str,
        base_url: &str,
        timeouts: (Duration, Duration),
        keyed_retries_safe: bool,
    ) -> Option<Self> {
        let secret_key = std::env::var(key_env).ok()?;
        (!secret_key.trim().is_empty()).then(|| Self {
            base_url: base_url.to_owned(),
            secret_key,
            connect_timeout: timeouts.0,
            response_timeout: timeouts.1,
            keyed_retries_safe,
        })
    }
}

impl fmt::Debug for StripeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeConfig")
            .field("base_url", &self.base_url)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

pub struct StripeProvider {
    client: HttpClient,
    base_url: String,
    authorization: String,
    keyed_retries_safe: bool,
}

impl StripeProvider {
    pub fn new(config: &StripeConfig) -> Self {
        Self {
            client: HttpClient::new(config.connect_timeout, config.response_timeout),
            base_url: config.base_url.trim_end_matches('/').to_owned(),
            authorization: format!("Bearer {}", config.secret_key),
            keyed_retries_safe: config.keyed_retries_safe,
        }
    }

    fn request(&self, method: Method, path: &str, form: Option<String>) -> Request<Full<Bytes>> {
        let builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base_url))
            .header("authorization", &self.authorization);
        match form {
            Some(form) => builder
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Full::new(Bytes::from(form))),
            None => builder.body(Full::new(Bytes::new())),
        }
        .expect("a valid request")
    }

    async fn execute_now(&self, instruction: &Instruction) -> ProviderOutcome {
        let (path, object, form) = match instruction.kind.as_str() {
            "payment" => match self.payment_intent_form(instruction).await {
                Ok(form) => ("/v1/payment_intents", Object::PaymentIntent, form),
                Err(outcome) => return outcome,
            },
            "refund" => match refund_form(instruction) {
                Ok(form) => ("/v1/refunds", Object::Refund, form),
                Err(cause) => return ProviderOutcome::NotSent { cause },
            },
            other => {
                return ProviderOutcome::NotSent {
                    cause: format!("the Stripe provider does not carry out {other:?} operations"),
                }
            }
        };
        let mut request = self.request(Method::POST, path, Some(form));
        let key = hyper::header::HeaderValue::from_str(&instruction.provider_key)
            .expect("provider keys are visible ASCII");
        request.headers_mut().insert("idempotency-key", key);
        classify(object, self.client.exchange(request).await)
    }

    /// The PaymentIntent's form: the amount in minor units, confirmed now, off session,
    /// with the customer's default payment method (read first: a read is safe to
    /// repeat, and a failure to read it proves the charge was never sent).
    async fn payment_intent_form(
        &self,
        instruction: &Instruction,
    ) -> Result<String, ProviderOutcome> {
        let not_sent = |cause: String| ProviderOutcome::NotSent { cause };
        let (amount, currency) = minor_units(instruction).map_err(not_sent)?;
        let customer = instruction
            .field("customer_id")
            .ok_or_else(|| not_sent("the stored payment has no customer_id".into()))?;
        let payment_method = self.default_payment_method(customer).await?;
        let mut form = vec![
            ("amount", amount.to_string()),
            ("currency", currency),
            ("confirm", "true".into()),
            ("off_session", "true".into()),
            ("customer", customer.to_owned()),
            ("payment_method", payment_method),
            (
                "metadata[opgate_operation_id]",
                instruction.operation_id.to_string(),
            ),
        ];
        if let Some(invoice) = instruction.field("invoice_id") {
            form.push(("metadata[invoice_id]", invoice.to_owned()));
        }
        Ok(encode(&form))
    }

    async fn default_payment_method(&self, customer: &str) -> Result<String, ProviderOutcome> {
        let path = format!("/v1/customers/{}", url_component(customer));
        let request = self.request(Method::GET, &path, None);
        let answer = match self.client.exchange(request).await {
            Exchange::Answered { status, body, .. } if (200..=299).contains(&status) => body,
            Exchange::Answered {
                status,
                body,
                headers,
            } if status == 404 || status == 400 => {
                return Err(classify(
                    Object::Customer,
                    Exchange::Answered {
                        status,
                        headers,
                        body,
                    },
                ))
            }
            Exchange::Answered { status, .. } => {
                return Err(ProviderOutcome::NotSent {
                    cause: format!("could not read the customer's payment method (HTTP {status})"),
                })
            }
            Exchange::NotSent(cause) | Exchange::Uncertain(cause) | Exchange::TimedOut(cause) => {
                return Err(ProviderOutcome::NotSent {
                    cause: format!("could not read the customer's payment method: {cause}"),
                })
            }
        };
        let customer: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
        let id_of = |value: &serde_json::Value| {
            value
                .as_str()
                .or_else(|| value.get("id").and_then(|id| id.as_str()))
                .map(str::to_owned)
        };
        id_of(&customer["invoice_settings"]["default_payment_method"])
            .or_else(|| id_of(&customer["default_source"]))
            .ok_or_else(|| ProviderOutcome::Rejected {
                status: 400,
                detail: "the Stripe customer has no default payment method".into(),
            })
    }

    async fn lookup_now(&self, instruction: &Instruction) -> LookupOutcome {
        let object = match instruction.kind.as_str() {
            "payment" => Object::PaymentIntent,
            "refund" => Object::Refund,
            other => {
                return LookupOutcome::Unavailable {
                    cause: format!("the Stripe provider does not carry out {other:?} operations"),
                }
            }
        };
        if let Some(id) = &instruction.provider_reference {
            let path = format!("{}/{}", object.path(), url_component(id));
            let request = self.request(Method::GET, &path, None);
            return self
                .client
                .exchange(request)
                .await
                .looked_up_with(|exchange| classify(object, exchange));
        }
        self.find_by_metadata(object, instruction).await
    }

    /// The object whose `metadata[opgate_operation_id]` is this operation's: Stripe's
    /// search for intents, else (search unavailable, or refunds, which have none) the
    /// most recent objects, a page at a time.
    async fn find_by_metadata(&self, object: Object, instruction: &Instruction) -> LookupOutcome {
        let operation_id = instruction.operation_id.to_string();
        if object == Object::PaymentIntent {
            let query = format!("metadata['opgate_operation_id']:'{operation_id}'");
            let path = format!("/v1/payment_intents/search?query={}", url_component(&query));
            match self
                .client
                .exchange(self.request(Method::GET, &path, None))
                .await
            {
                Exchange::Answered { status, body, .. } if (200..=299).contains(&status) => {
                    return found_in_list(object, &body, &operation_id).0;
                }
                // No search here (a test double, or a restricted key): list instead.
                Exchange::Answered {
                    status: 400 | 404, ..
                } => {}
                other => return other.looked_up_with(|exchange| classify(object, exchange)),
            }
        }
        let mut filter = String::new();
        if object == Object::Refund {
            if let Some(intent) = instruction.field("payment_provider_reference") {
                filter = format!("&payment_intent={}", url_component(intent));
            }
        }
        let mut after = String::new();
        for _ in 0..LIST_PAGES {
            let path = format!("{}?limit=100{filter}{after}", object.path());
            let body = match self
                .client
                .exchange(self.request(Method::GET, &path, None))
                .await
            {
                Exchange::Answered { status, body, .. } if (200..=299).contains(&status) => body,
                other => return other.looked_up_with(|exchange| classify(object, exchange)),
            };
            let (found, last) = found_in_list(object, &body, &operation_id);
            match (found, last) {
                (LookupOutcome::NotFound, Some(last)) => {
                    after = format!("&starting_after={}", url_component(&last));
                }
                (found, _) => return found,
            }
        }
        LookupOutcome::NotFound
    }
}

/// A refund of the payment's intent, in minor units.
fn refund_form(instruction: &Instruction) -> Result<String, String> {
    let (amount, _) = minor_units(instruction)?;
    let intent = instruction
        .field("payment_provider_reference")
        .ok_or("the refunded payment has no Stripe reference")?;
    Ok(encode(&[
        ("payment_intent", intent.to_owned()),
        ("amount", amount.to_string()),
        (
            "metadata[opgate_operation_id]",
            instruction.operation_id.to_string(),
        ),
    ]))
}

/// The amount in the currency's minor units, and the currency in lower case.
fn minor_units(instruction: &Instruction) -> Result<(i64, String), String> {
    let (Some(amount), Some(code)) = (&instruction.amount, &instruction.currency) else {
        return Err("the operation moves no money".into());
    };
    let currency = Currency::parse(code).map_err(|e| e.to_string())?;
    let amount =
        Decimal::from_str(amount).map_err(|_| format!("amount {amount:?} is unreadable"))?;
    let minor = amount * Decimal::from(10i64.pow(currency.minor_units()));
    if minor.fract() != Decimal::ZERO {
        return Err("amount has more decimals than its currency".into());
    }
    let minor = i64::try_from(minor.trunc()).map_err(|_| "amount too large".to_owned())?;
    Ok((minor, currency.code().to_ascii_lowercase()))
}

fn encode(form: &[(&str, String)]) -> String {
    form.iter()
        .map(|(name, value)| format!("{}={}", url_component(name), url_component(value)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Provider for StripeProvider {
    fn execute<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, ProviderOutcome> {
        Box::pin(self.execute_now(instruction))
    }

    fn lookup<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, LookupOutcome> {
        Box::pin(self.lookup_now(instruction))
    }

    fn keyed_retries_safe(&self) -> bool {
        self.keyed_retries_safe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instruction(amount: &str, currency: &str) -> Instruction {
        Instruction::for_operation(
            uuid::Uuid::nil(),
            "payment",
            &serde_json::json!({}),
            Some((amount.into(), currency.into())),
            None,
        )
    }

    #[test]
    fn amounts_go_in_minor_units() {
        assert_eq!(
            minor_units(&instruction("250.00", "USD")).unwrap(),
            (25000, "usd".into())
        );
        assert_eq!(
            minor_units(&instruction("0.05", "EUR")).unwrap(),
            (5, "eur".into())
        );
        assert_eq!(
            minor_units(&instruction("1000", "JPY")).unwrap(),
            (1000, "jpy".into())
        );
        assert_eq!(
            minor_units(&instruction("1.234", "BHD")).unwrap(),
            (1234, "bhd".into())
        );
        assert!(minor_units(&instruction("1.001", "USD")).is_err());
    }

    #[test]
    fn forms_are_encoded_as_stripe_reads_them() {
        let form = encode(&[
            ("metadata[opgate_operation_id]", "a b".into()),
            ("amount", "100".into()),
        ]);
        assert_eq!(form, "metadata%5Bopgate_operation_id%5D=a%20b&amount=100");
    }

    #[test]
    fn the_secret_key_never_shows_in_debug_output() {
        let config = StripeConfig {
            base_url: "https://api.stripe.com".into(),
            secret_key: "sk_live_secret".into(),
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            keyed_retries_safe: true,
        };
        assert!(!format!("{config:?}").contains("sk_live_secret"));
    }
}
