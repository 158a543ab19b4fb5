//! The HTTP adapter: pooled hyper connections to a provider that speaks DESIGN.md's
//! provider contract. Connect and response timeouts are separate, because they mean
//! different things: a connect failure proves the request never left; a response
//! timeout proves nothing.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use opentelemetry::propagation::Injector;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::outcome::{classify_response, LookupOutcome, ProviderOutcome};
use crate::{PaymentInstruction, Provider};

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
    client: Client<HttpConnector, Full<Bytes>>,
    config: HttpProviderConfig,
}

enum Exchange {
    Answered { status: u16, body: Bytes },
    NotSent(String),
    Uncertain(String),
}

impl HttpProvider {
    pub fn new(mut config: HttpProviderConfig) -> Self {
        config.base_url = config.base_url.trim_end_matches('/').to_owned();
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Self { client, config }
    }

    /// One HTTP call inside a client span whose context travels in `traceparent`.
    async fn exchange(&self, mut request: Request<Full<Bytes>>) -> Exchange {
        let span = tracing::info_span!(
            "provider request",
            otel.name = %request.method(),
            otel.kind = "client",
            http.request.method = %request.method(),
            server.address = request.uri().host().unwrap_or_default(),
            server.port = request.uri().port_u16().unwrap_or(80),
            url.path = request.uri().path(),
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        inject_trace_context(&span, request.headers_mut());
        let exchange = self.exchange_in(request).instrument(span.clone()).await;
        match &exchange {
            Exchange::Answered { status, .. } => {
                span.record("http.response.status_code", status);
            }
            Exchange::NotSent(_) => {
                span.record("error.type", "connect");
            }
            Exchange::Uncertain(_) => {
                span.record("error.type", "no_complete_answer");
            }
        }
        exchange
    }

    async fn exchange_in(&self, request: Request<Full<Bytes>>) -> Exchange {
        let call = async {
            let response = match self.client.request(request).await {
                Ok(response) => response,
                Err(error) if error.is_connect() => {
                    return Exchange::NotSent(format!("could not connect to the provider: {error}"))
                }
                Err(error) => {
                    return Exchange::Uncertain(format!("request failed after connecting: {error}"))
                }
            };
            let status = response.status().as_u16();
            match response.into_body().collect().await {
                Ok(body) => Exchange::Answered {
                    status,
                    body: body.to_bytes(),
                },
                Err(error) => Exchange::Uncertain(format!("response interrupted: {error}")),
            }
        };
        match tokio::time::timeout(self.config.response_timeout, call).await {
            Ok(exchange) => exchange,
            Err(_) => Exchange::Uncertain(format!(
                "no complete answer within {} ms",
                self.config.response_timeout.as_millis()
            )),
        }
    }
}

impl Provider for HttpProvider {
    async fn execute(&self, instruction: &PaymentInstruction) -> ProviderOutcome {
        let body = serde_json::json!({
            "customer_id": instruction.customer_id,
            "invoice_id": instruction.invoice_id,
            "amount": instruction.amount,
            "currency": instruction.currency,
            "metadata": {"operation_id": instruction.operation_id},
        });
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/v1/payments", self.config.base_url))
            .header("content-type", "application/json")
            .header("idempotency-key", &instruction.provider_key)
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a valid request");
        match self.exchange(request).await {
            Exchange::Answered { status, body } => classify_response(status, &body),
            Exchange::NotSent(cause) => ProviderOutcome::NotSent { cause },
            Exchange::Uncertain(cause) => ProviderOutcome::Uncertain { cause },
        }
    }

    async fn lookup(&self, instruction: &PaymentInstruction) -> LookupOutcome {
        let key: String = instruction
            .provider_key
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!(
                "{}/v1/payments?idempotency_key={key}",
                self.config.base_url
            ))
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        match self.exchange(request).await {
            Exchange::Answered { status: 404, .. } => LookupOutcome::NotFound,
            Exchange::Answered { status, body } => match classify_response(status, &body) {
                ProviderOutcome::Uncertain { cause } => LookupOutcome::Unavailable { cause },
                ProviderOutcome::Rejected { status, detail } => LookupOutcome::Unavailable {
                    cause: format!("lookup refused (HTTP {status}): {detail}"),
                },
                found => LookupOutcome::Found(found),
            },
            Exchange::NotSent(cause) | Exchange::Uncertain(cause) => {
                LookupOutcome::Unavailable { cause }
            }
        }
    }

    fn keyed_retries_safe(&self) -> bool {
        self.config.keyed_retries_safe
    }
}

struct HeaderInjector<'a>(&'a mut hyper::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(key.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Adds `traceparent` (and `tracestate`) for `span` to the provider request.
fn inject_trace_context(span: &tracing::Span, headers: &mut hyper::HeaderMap) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers))
    });
}
