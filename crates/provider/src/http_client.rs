//! The transport every HTTP adapter shares: pooled hyper connections, a client span
//! per call whose context travels in `traceparent`, and the three things a call can
//! come to. Connect and response timeouts are separate, because they mean different
//! things: a connect failure proves the request never left; a response timeout proves
//! nothing.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::propagation::Injector;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::outcome::{LookupOutcome, ProviderOutcome};

/// What one HTTP call came to.
pub(crate) enum Exchange {
    Answered {
        status: u16,
        headers: hyper::HeaderMap,
        body: Bytes,
    },
    /// The connection was never made: the request did not leave.
    NotSent(String),
    /// Sent, but no complete answer: it may or may not have been acted on.
    Uncertain(String),
}

pub(crate) struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    response_timeout: Duration,
}

impl HttpClient {
    /// `response_timeout` runs from sending the request to having read the whole answer.
    pub(crate) fn new(connect_timeout: Duration, response_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(false);
        // https for real providers (Stripe), plain http for local ones; a failed TLS
        // handshake is a failed connect: the request never left.
        let connector = HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Self {
            client,
            response_timeout,
        }
    }

    /// One HTTP call inside a client span whose context travels in `traceparent`.
    pub(crate) async fn exchange(&self, mut request: Request<Full<Bytes>>) -> Exchange {
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
            let headers = response.headers().clone();
            match response.into_body().collect().await {
                Ok(body) => Exchange::Answered {
                    status,
                    headers,
                    body: body.to_bytes(),
                },
                Err(error) => Exchange::Uncertain(format!("response interrupted: {error}")),
            }
        };
        match tokio::time::timeout(self.response_timeout, call).await {
            Ok(exchange) => exchange,
            Err(_) => Exchange::Uncertain(format!(
                "no complete answer within {} ms",
                self.response_timeout.as_millis()
            )),
        }
    }
}

impl Exchange {
    /// What an execute call came to, a complete answer read by `classify`.
    pub(crate) fn executed(
        self,
        classify: impl FnOnce(u16, &[u8]) -> ProviderOutcome,
    ) -> ProviderOutcome {
        match self {
            Exchange::Answered { status, body, .. } => classify(status, &body),
            Exchange::NotSent(cause) => ProviderOutcome::NotSent { cause },
            Exchange::Uncertain(cause) => ProviderOutcome::Uncertain { cause },
        }
    }

    /// What a lookup came to: 404 is "no such operation"; an answer that is no outcome
    /// (a refusal, an error) and no answer at all leave the lookup unavailable.
    pub(crate) fn looked_up(
        self,
        classify: impl FnOnce(u16, &[u8]) -> ProviderOutcome,
    ) -> LookupOutcome {
        self.looked_up_with(|exchange| match exchange {
            Exchange::Answered { status, body, .. } => classify(status, &body),
            Exchange::NotSent(cause) => ProviderOutcome::NotSent { cause },
            Exchange::Uncertain(cause) => ProviderOutcome::Uncertain { cause },
        })
    }

    /// `looked_up` for adapters that read the whole exchange (headers included).
    pub(crate) fn looked_up_with(
        self,
        classify: impl FnOnce(Exchange) -> ProviderOutcome,
    ) -> LookupOutcome {
        if let Exchange::Answered { status: 404, .. } = self {
            return LookupOutcome::NotFound;
        }
        match classify(self) {
            ProviderOutcome::Uncertain { cause }
            | ProviderOutcome::UncertainFinal { cause }
            | ProviderOutcome::NotSent { cause } => LookupOutcome::Unavailable { cause },
            ProviderOutcome::Rejected { status, detail } => LookupOutcome::Unavailable {
                cause: format!("lookup refused (HTTP {status}): {detail}"),
            },
            found => LookupOutcome::Found(found),
        }
    }
}

/// `value` percent-encoded for a URL query or path component (unreserved kept).
pub(crate) fn url_component(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
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
