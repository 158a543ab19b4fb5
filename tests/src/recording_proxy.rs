//! A small HTTP/1.1 reverse proxy on 127.0.0.1 that records every request it forwards,
//! and can lose answers on purpose. localstripe ignores `Idempotency-Key`, so this is how
//! tests see the headers opgate really sends, and how they stage the failure a provider
//! client must survive: the provider acted (charged), then its answer was lost.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, AUTHORIZATION, CONNECTION, HOST, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// One request as the proxy received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// e.g. `/v1/payment_intents?limit=10`.
    pub path_and_query: String,
    /// In arrival order, names lower-case; `authorization`'s value is `<redacted>`.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy UTF-8): form-encoded for Stripe.
    pub body: String,
}

impl Recorded {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    recorded: Vec<Recorded>,
    /// (path prefix, answers still to lose).
    lose: Vec<(String, usize)>,
}

type Shared = Arc<Mutex<State>>;
type Upstream = Client<HttpConnector, Full<Bytes>>;

/// Forwards to one upstream until dropped.
pub struct RecordingProxy {
    /// e.g. `http://127.0.0.1:43210`: what the client under test is pointed at.
    pub base_url: String,
    state: Shared,
    server: JoinHandle<()>,
}

impl RecordingProxy {
    /// Binds 127.0.0.1:0 and forwards every request (method, path, query, headers but
    /// `host`, body) to `upstream_base_url`, answering with upstream's answer.
    pub async fn start(upstream_base_url: &str) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the recording proxy");
        let base_url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let state = Shared::default();
        let upstream = upstream_base_url.trim_end_matches('/').to_owned();
        let server = tokio::spawn(serve(listener, upstream, state.clone()));
        Self {
            base_url,
            state,
            server,
        }
    }

    /// Every request received so far, in arrival order (lost answers included).
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).recorded.clone()
    }

    /// The next `n` requests whose path starts with `path_prefix` reach upstream and are
    /// acted on, but the client gets no answer: its connection is closed once upstream
    /// has answered ("charged, then the response was lost").
    pub fn lose_answers(&self, path_prefix: &str, n: usize) {
        lock(&self.state).lose.push((path_prefix.to_owned(), n));
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        // Dropping the accept task's JoinSet aborts the open connections too.
        self.server.abort();
    }
}

fn lock(state: &Shared) -> MutexGuard<'_, State> {
    // A test that panicked while holding the lock must not hide what was recorded.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve(listener: TcpListener, upstream: String, state: Shared) {
    let client: Upstream = Client::builder(TokioExecutor::new()).build_http();
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            // Transient accept errors (e.g. too many open files): back off and retry.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (client, upstream, state) = (client.clone(), upstream.clone(), state.clone());
        connections.spawn(async move {
            let service = service_fn(move |request| {
                forward(request, client.clone(), upstream.clone(), state.clone())
            });
            // A lost answer ends the connection with an error, on purpose.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The error a service returns to make hyper close the connection without answering.
#[derive(Debug)]
struct AnswerLost;

impl std::fmt::Display for AnswerLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("answer lost on purpose")
    }
}

impl std::error::Error for AnswerLost {}

async fn forward(
    request: Request<Incoming>,
    client: Upstream,
    upstream: String,
    state: Shared,
) -> Result<Response<Full<Bytes>>, AnswerLost> {
    let (mut parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, format!("reading body: {e}"))),
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    let lose = {
        let mut state = lock(&state);
        state.recorded.push(Recorded {
            method: parts.method.to_string(),
            path_and_query: path_and_query.clone(),
            headers: recorded_headers(&parts.headers),
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        let rule = state
            .lose
            .iter_mut()
            .find(|(prefix, left)| *left > 0 && parts.uri.path().starts_with(prefix.as_str()));
        rule.map(|(_, left)| *left -= 1).is_some()
    };

    parts.uri = format!("{upstream}{path_and_query}")
        .parse()
        .expect("upstream URI");
    // The client sets Host for the upstream; the body is re-framed from its full bytes.
    strip(&mut parts.headers, &[HOST, CONNECTION, TRANSFER_ENCODING]);
    let answer = match client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(answer) => answer,
        Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, format!("upstream: {e}"))),
    };
    let (mut parts, body) = answer.into_parts();
    // Read the whole answer even when losing it: upstream has then surely acted.
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return Ok(plain(
                StatusCode::BAD_GATEWAY,
                format!("upstream body: {e}"),
            ))
        }
    };
    if lose {
        return Err(AnswerLost);
    }
    strip(&mut parts.headers, &[CONNECTION, TRANSFER_ENCODING]);
    Ok(Response::from_parts(parts, Full::new(body)))
}

fn recorded_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = if name == AUTHORIZATION {
                "<redacted>".to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            // HeaderName is always lower-case.
            (name.as_str().to_owned(), value)
        })
        .collect()
}

fn strip(headers: &mut HeaderMap, names: &[HeaderName]) {
    for name in names {
        headers.remove(name);
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}
