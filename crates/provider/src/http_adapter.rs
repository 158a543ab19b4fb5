//! The opgate HTTP adapter: pooled hyper connections to a provider that speaks opgate's
//! provider contract (provider-sim, or a service built to it; see the README): payments
//! at `/v1/payments`, refunds at `/v1/refunds`, each looked up by idempotency key.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request};

use crate::http_client::{url_component, HttpClient};
use crate::outcome::{classify_response, LookupOutcome, ProviderOutcome};
use crate::{BoxFuture, Instruction, Provider};

#[derive(Debug, Clone)]
pub struct HttpProviderConfig {
    /// Base URL, e.g. `http://127.0.0.1:9090`.
    pub base_url: String,
    pub connect_timeout: Duration,
    /// From sending the request to having read the whole answer.
    pub response_timeout: Duration,
    /// The provider deduplicates by `Idempotency-Key`, so re-sending is safe.
    pub keyed_retries_safe: bool,
}

pub struct HttpProvider {
    client: HttpClient,
    config: HttpProviderConfig,
}

impl HttpProvider {
    pub fn new(mut config: HttpProviderConfig) -> Self {
        config.base_url = config.base_url.trim_end_matches('/').to_owned();
        let client = HttpClient::new(config.connect_timeout, config.response_timeout);
        Self { client, config }
    }
}

/// Where a kind lives in the contract, and the body that asks for it.
fn resource_of(instruction: &Instruction) -> Result<(&'static str, serde_json::Value), String> {
    let metadata = serde_json::json!({"operation_id": instruction.operation_id});
    match instruction.kind.as_str() {
        "payment" => Ok((
            "payments",
            serde_json::json!({
                "customer_id": instruction.field("customer_id"),
                "invoice_id": instruction.field("invoice_id"),
                "amount": instruction.amount,
                "currency": instruction.currency,
                "metadata": metadata,
            }),
        )),
        "refund" => Ok((
            "refunds",
            serde_json::json!({
                "payment_id": instruction.field("payment_provider_reference"),
                "amount": instruction.amount,
                "currency": instruction.currency,
                "metadata": metadata,
            }),
        )),
        other => Err(format!(
            "the opgate HTTP provider does not carry out {other:?} operations"
        )),
    }
}

impl HttpProvider {
    async fn execute_now(&self, instruction: &Instruction) -> ProviderOutcome {
        let (resource, body) = match resource_of(instruction) {
            Ok(found) => found,
            Err(cause) => return ProviderOutcome::NotSent { cause },
        };
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/v1/{resource}", self.config.base_url))
            .header("content-type", "application/json")
            .header("idempotency-key", &instruction.provider_key)
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a valid request");
        self.client
            .exchange(request)
            .await
            .executed(classify_response)
    }

    async fn lookup_now(&self, instruction: &Instruction) -> LookupOutcome {
        let resource = match resource_of(instruction) {
            Ok((resource, _)) => resource,
            Err(cause) => return LookupOutcome::Unavailable { cause },
        };
        let key = url_component(&instruction.provider_key);
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!(
                "{}/v1/{resource}?idempotency_key={key}",
                self.config.base_url
            ))
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        self.client
            .exchange(request)
            .await
            .looked_up(classify_response)
    }
}

impl Provider for HttpProvider {
    fn execute<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, ProviderOutcome> {
        Box::pin(self.execute_now(instruction))
    }

    fn lookup<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, LookupOutcome> {
        Box::pin(self.lookup_now(instruction))
    }

    fn keyed_retries_safe(&self) -> bool {
        self.config.keyed_retries_safe
    }
}
