//! The transport every HTTP adapter shares: pooled hyper connections, a client span
//! per call whose context travels in `traceparent`, and the three things a call can
//! come to. Connect and response timeouts are separate, because they mean different
//! things: a connect failure proves the request never left; a response timeout proves
//! nothing.

use std::time::{Duration, SystemTime};

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
use crate::retry_after::retry_after;

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
    /// Sent, and no complete answer within the response timeout: as uncertain.
    TimedOut(String),
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
            Exchange::TimedOut(_) => {
                span.record("error.type", "timeout");
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
            Err(_) => Exchange::TimedOut(format!(
                "no complete answer within {} ms",
                self.response_timeout.as_millis()
            )),
        }
    }
}

impl Exchange {
    /// What an execute call came to, a complete answer read by `classify`; a
    /// throttled answer gets the wait its `Retry-After` asks for.
    pub(crate) fn executed(
        self,
        classify: impl FnOnce(u16, &[u8]) -> ProviderOutcome,
    ) -> ProviderOutcome {
        match self {
            Exchange::Answered {
                status,
                headers,
                body,
            } => match classify(status, &body) {
                ProviderOutcome::Throttled { .. } => ProviderOutcome::Throttled {
                    retry_after: retry_after(
                        headers
                            .get(hyper::header::RETRY_AFTER)
                            .and_then(|value| value.to_str().ok()),
                        SystemTime::now(),
                    ),
                },
                outcome => outcome,
            },
            Exchange::NotSent(cause) => ProviderOutcome::NotSent { cause },
            Exchange::Uncertain(cause) => ProviderOutcome::Uncertain { cause },
            Exchange::TimedOut(cause) => ProviderOutcome::TimedOut { cause },
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
            Exchange::TimedOut(cause) => ProviderOutcome::TimedOut { cause },
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
            | ProviderOutcome::TimedOut { cause }
            | ProviderOutcome::NotSent { cause } => LookupOutcome::Unavailable { cause },
            ProviderOutcome::Rejected { status, detail } => LookupOutcome::Unavailable {
                cause: format!("lookup refused (HTTP {status}): {detail}"),
            },
            // The reconciler's own backoff spaces the next lookup.
            ProviderOutcome::Throttled { .. } => LookupOutcome::Unavailable {
                cause: "lookup rate limited by the provider (HTTP 429)".into(),
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

#[cfg(test)]
mod tests {
    //! What one call comes to, against a real socket that behaves as each test needs.

    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::outcome::classify_response;

    /// What the test server does once it has read the request.
    #[derive(Clone, Copy)]
    enum Then {
        /// Keeps the connection open and never answers.
        Silent,
        /// Closes the connection without a word.
        Close,
        /// Writes these bytes, then closes.
        Write(&'static str),
    }

    /// A server on a free port that answers every connection as `then` says.
    async fn server(then: Then) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    // The whole request: its head, then its (small) body.
                    while !String::from_utf8_lossy(&request).contains("\r\n\r\n{") {
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    match then {
                        Then::Silent => {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            drop(socket);
                        }
                        Then::Close => drop(socket),
                        Then::Write(bytes) => {
                            let _ = socket.write_all(bytes.as_bytes()).await;
                        }
                    }
                });
            }
        });
        address
    }

    fn post(address: SocketAddr) -> Request<Full<Bytes>> {
        Request::builder()
            .method(hyper::Method::POST)
            .uri(format!("http://{address}/v1/payments"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(br#"{"amount":"1.00"}"#)))
            .unwrap()
    }

    fn client() -> HttpClient {
        HttpClient::new(Duration::from_secs(2), Duration::from_millis(200))
    }

    const SUCCEEDED: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 35\r\n\r\n{\"id\":\"pay_1\",\"status\":\"succeeded\"}";

    #[tokio::test]
    async fn an_answer_slower_than_the_response_timeout_is_a_timeout_never_not_sent() {
        let address = server(Then::Silent).await;
        let exchange = client().exchange(post(address)).await;
        match &exchange {
            Exchange::TimedOut(cause) => {
                assert_eq!(cause, "no complete answer within 200 ms")
            }
            other => panic!("expected a timeout, got {}", name(other)),
        }
        assert!(matches!(
            exchange.executed(classify_response),
            ProviderOutcome::TimedOut { .. }
        ));
        let lookup = client().exchange(post(address)).await;
        assert!(matches!(
            lookup.looked_up(classify_response),
            LookupOutcome::Unavailable { .. }
        ));
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_sent() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let exchange = client().exchange(post(closed)).await;
        assert!(
            matches!(&exchange, Exchange::NotSent(cause) if cause.contains("could not connect")),
            "{}",
            name(&exchange)
        );
        assert!(matches!(
            exchange.executed(classify_response),
            ProviderOutcome::NotSent { .. }
        ));
    }

    #[tokio::test]
    async fn a_connection_closed_after_the_request_is_uncertain() {
        let address = server(Then::Close).await;
        let exchange = client().exchange(post(address)).await;
        assert!(
            matches!(&exchange, Exchange::Uncertain(cause) if cause.contains("after connecting")),
            "{}",
            name(&exchange)
        );
        assert!(matches!(
            exchange.executed(classify_response),
            ProviderOutcome::Uncertain { .. }
        ));
    }

    #[tokio::test]
    async fn an_answer_cut_short_is_uncertain() {
        let address = server(Then::Write(
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"id\":",
        ))
        .await;
        let exchange = client().exchange(post(address)).await;
        assert!(
            matches!(&exchange, Exchange::Uncertain(cause) if cause.contains("interrupted")),
            "{}",
            name(&exchange)
        );
    }

    #[tokio::test]
    async fn a_complete_answer_is_classified() {
        let address = server(Then::Write(SUCCEEDED)).await;
        let exchange = client().exchange(post(address)).await;
        assert_eq!(
            exchange.executed(classify_response),
            ProviderOutcome::Succeeded {
                reference: "pay_1".into()
            }
        );
        let lookup = client().exchange(post(address)).await;
        assert_eq!(
            lookup.looked_up(classify_response),
            LookupOutcome::Found(ProviderOutcome::Succeeded {
                reference: "pay_1".into()
            })
        );
    }

    #[tokio::test]
    async fn a_lookup_reads_404_as_not_found_and_a_refusal_as_unavailable() {
        let missing = server(Then::Write(
            "HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}",
        ))
        .await;
        let exchange = client().exchange(post(missing)).await;
        assert_eq!(
            exchange.looked_up(classify_response),
            LookupOutcome::NotFound
        );
        let refused = server(Then::Write(
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 16\r\n\r\n{\"error\":\"nope\"}",
        ))
        .await;
        let exchange = client().exchange(post(refused)).await;
        match exchange.looked_up(classify_response) {
            LookupOutcome::Unavailable { cause } => {
                assert_eq!(cause, "lookup refused (HTTP 400): nope")
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_429_waits_as_long_as_its_retry_after_says_and_is_no_lookup_answer() {
        let throttled = server(Then::Write(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\ncontent-length: 2\r\n\r\n{}",
        ))
        .await;
        let exchange = client().exchange(post(throttled)).await;
        assert_eq!(
            exchange.executed(classify_response),
            ProviderOutcome::Throttled {
                retry_after: Duration::from_secs(7)
            }
        );
        let exchange = client().exchange(post(throttled)).await;
        assert!(matches!(
            exchange.looked_up(classify_response),
            LookupOutcome::Unavailable { cause } if cause.contains("429")
        ));
        let bare = server(Then::Write(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\n\r\n{}",
        ))
        .await;
        assert_eq!(
            client()
                .exchange(post(bare))
                .await
                .executed(classify_response),
            ProviderOutcome::Throttled {
                retry_after: crate::retry_after::DEFAULT_RETRY_AFTER
            }
        );
    }

    #[test]
    fn the_trace_context_is_set_as_headers_and_invalid_ones_are_dropped() {
        let mut headers = hyper::HeaderMap::new();
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut injector = HeaderInjector(&mut headers);
        injector.set("traceparent", traceparent.to_owned());
        injector.set("bad name", "x".to_owned());
        injector.set("tracestate", "a=1\n".to_owned());
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(headers["traceparent"], traceparent);
    }

    #[test]
    fn url_components_keep_only_unreserved_characters() {
        assert_eq!(url_component("opgate-1_a.b~c"), "opgate-1_a.b~c");
        assert_eq!(url_component("a b/c?d&e=f"), "a%20b%2Fc%3Fd%26e%3Df");
        assert_eq!(url_component("é"), "%C3%A9");
    }

    fn name(exchange: &Exchange) -> String {
        match exchange {
            Exchange::Answered { status, .. } => format!("an answer ({status})"),
            Exchange::NotSent(cause) => format!("not sent: {cause}"),
            Exchange::Uncertain(cause) => format!("uncertain: {cause}"),
            Exchange::TimedOut(cause) => format!("timed out: {cause}"),
        }
    }
}
