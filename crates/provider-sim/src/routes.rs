//! HTTP surface: routes each request to the state, turns outcomes into JSON
//! responses (or a dropped connection), and logs one line per request with only the
//! method, path, status, record id and the faults that fired. The create flow every
//! kind shares is here; each kind's endpoints have their own submodule.

mod payments;
mod refunds;
mod resources;
mod sim;

use std::fmt;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::faults::Fault;
use crate::model::Record;
use crate::state::{CreateOutcome, SimState, Throttled};

const MAX_BODY_BYTES: usize = 64 * 1024;

/// Returned to hyper to make it close the connection without writing a response.
#[derive(Debug)]
pub struct DropConnection;

impl fmt::Display for DropConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection dropped by the drop-after-commit fault")
    }
}

impl std::error::Error for DropConnection {}

enum Reply {
    Json(StatusCode, Vec<u8>),
    Drop,
}

/// A reply plus what the log line needs to know about it.
struct Handled {
    reply: Reply,
    /// The payment, refund or resource the request was about.
    id: Option<String>,
    faults: Vec<&'static str>,
    /// `Retry-After` (seconds) to send with the reply.
    retry_after_s: Option<u64>,
}

impl Handled {
    fn json(status: StatusCode, body: &impl Serialize) -> Handled {
        let reply = match serde_json::to_vec(body) {
            Ok(bytes) => Reply::Json(status, bytes),
            Err(_) => Reply::Json(
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error":"cannot encode response"}"#.to_vec(),
            ),
        };
        Handled {
            reply,
            id: None,
            faults: Vec::new(),
            retry_after_s: None,
        }
    }

    fn error(status: StatusCode, message: impl Into<String>) -> Handled {
        Handled::json(status, &json!({ "error": message.into() }))
    }

    fn bad_request(message: impl Into<String>) -> Handled {
        Handled::error(StatusCode::BAD_REQUEST, message)
    }

    /// The throttle fault's 429, with its `Retry-After` when one is set.
    fn throttled(throttled: Throttled) -> Handled {
        let mut handled = Handled::error(StatusCode::TOO_MANY_REQUESTS, "rate limited")
            .fault(Fault::Throttle.name());
        handled.retry_after_s = throttled.retry_after_s;
        handled
    }

    fn record(status: StatusCode, record: &impl Record) -> Handled {
        Handled::json(status, record).for_record(record)
    }

    fn for_record(mut self, record: &impl Record) -> Handled {
        self.id = Some(record.id().to_owned());
        self
    }

    fn fault(mut self, name: &'static str) -> Handled {
        self.faults.push(name);
        self
    }

    /// Holds the answer for the delay-answer-ms fault, if armed: the request has been
    /// handled (a payment charged), and its answer is late.
    async fn answered_late(self, state: &SimState) -> Handled {
        let delay = state.answer_delay();
        if delay.is_zero() {
            return self;
        }
        tokio::time::sleep(delay).await;
        self.fault("delay-answer-ms")
    }

    /// Notes the delay-ms fault if it slept before this request was handled.
    fn delayed(self, delayed: bool) -> Handled {
        if delayed {
            self.fault("delay-ms")
        } else {
            self
        }
    }
}

/// The hyper service: every request gets a JSON response, except when the
/// drop-after-commit fault fires.
pub async fn handle(
    state: SimState,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // A server span continuing the caller's trace: the provider's side of a call
    // shows in the same trace as the executor's client span.
    let span = tracing::info_span!(
        "provider-sim request",
        otel.name = %format!("{method} {path}"),
        otel.kind = "server",
        http.request.method = %method,
        url.path = %path,
    );
    let caller = opgate_telemetry::propagation::context_from_headers(
        req.headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?))),
    );
    let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, caller);
    let handled = tracing::Instrument::instrument(route(&state, &path, req), span.clone()).await;
    let _entered = span.enter();

    let status = match &handled.reply {
        Reply::Json(status, _) => status.as_str().to_owned(),
        Reply::Drop => "dropped".to_owned(),
    };
    let faults = if handled.faults.is_empty() {
        "-".to_owned()
    } else {
        handled.faults.join(",")
    };
    tracing::info!(
        %method,
        %path,
        %status,
        id = %handled.id.as_deref().unwrap_or("-"),
        %faults,
        "request"
    );

    match handled.reply {
        Reply::Json(status, body) => {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            if let Some(seconds) = handled.retry_after_s {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(seconds));
            }
            Ok(response)
        }
        Reply::Drop => Err(DropConnection),
    }
}

async fn route(state: &SimState, path: &str, req: Request<Incoming>) -> Handled {
    match (req.method(), path) {
        (&Method::POST, "/v1/payments") => payments::create(state, req).await,
        (&Method::GET, "/v1/payments") => payments::lookup(state, req.uri().query()),
        (&Method::POST, "/v1/refunds") => refunds::create(state, req).await,
        (&Method::GET, "/v1/refunds") => refunds::lookup(state, req.uri().query()),
        (_, _) if path.starts_with(resources::PREFIX) => resources::route(state, path, req).await,
        (&Method::GET, "/_sim/ledger") => Handled::json(StatusCode::OK, &state.ledger()),
        (&Method::GET, "/_sim/faults") => Handled::json(StatusCode::OK, &state.faults()),
        (&Method::POST, "/_sim/faults") => sim::set_faults(state, req).await,
        (&Method::GET, "/healthz") => Handled::json(StatusCode::OK, &json!({ "status": "ok" })),
        (&Method::POST, _) => match sim::settle_target(path) {
            Some((kind, id)) => sim::settle(state, kind, id, req).await,
            None => not_found(),
        },
        _ => not_found(),
    }
}

fn not_found() -> Handled {
    Handled::error(StatusCode::NOT_FOUND, "not found")
}

/// The `Idempotency-Key` of a create request, counted (with the request's
/// `traceparent`) before anything else can refuse the request.
fn accept_key(state: &SimState, req: &Request<Incoming>) -> Result<String, Handled> {
    let key = idempotency_key(req)?;
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok());
    state.record_request(&key, traceparent);
    Ok(key)
}

fn idempotency_key(req: &Request<Incoming>) -> Result<String, Handled> {
    match req.headers().get("idempotency-key") {
        None => Err(Handled::bad_request("missing Idempotency-Key")),
        Some(value) => match value.to_str() {
            Ok("") => Err(Handled::bad_request("missing Idempotency-Key")),
            Ok(key) => Ok(key.to_owned()),
            Err(_) => Err(Handled::bad_request(
                "Idempotency-Key must be visible ASCII",
            )),
        },
    }
}

/// The throttle fault's answer, if it fires for this create. Checked once the body
/// has been read: a server that answers before reading the body and closes the
/// connection can have its answer lost to a reset.
fn throttled(state: &SimState, key: &str) -> Option<Handled> {
    state.throttle(key).map(Handled::throttled)
}

/// Sleeps for the delay-ms fault, if armed; whether it slept.
async fn injected_delay(state: &SimState) -> bool {
    let delay = state.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    !delay.is_zero()
}

/// The answer to a create that reached the state. `created` is the status of a new
/// record's answer: 200 for payments and refunds, 201 for resources.
fn created_reply<T: Record>(
    state: &SimState,
    outcome: CreateOutcome<T>,
    created: StatusCode,
) -> Handled {
    if let CreateOutcome::Created { record, .. } = &outcome {
        state.note_committed(record.id());
    }
    match outcome {
        CreateOutcome::InjectedErrorBeforeCommit => Handled::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "injected error before commit",
        )
        .fault(Fault::ErrorBeforeCommit.name()),
        CreateOutcome::Replayed(record) => Handled::record(StatusCode::OK, &record),
        CreateOutcome::KeyConflict => Handled::error(
            StatusCode::CONFLICT,
            "idempotency key reused with different parameters",
        ),
        CreateOutcome::Created {
            record,
            pending_injected,
            after_commit,
        } => {
            let mut handled = match after_commit {
                Some(Fault::ErrorAfterCommit) => Handled::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "injected error after commit",
                )
                .for_record(&record),
                Some(Fault::DropAfterCommit) => Handled {
                    reply: Reply::Drop,
                    id: Some(record.id().to_owned()),
                    faults: Vec::new(),
                    retry_after_s: None,
                },
                _ => Handled::record(created, &record),
            };
            if pending_injected {
                handled = handled.fault(Fault::Pending.name());
            }
            if let Some(fault) = after_commit {
                handled = handled.fault(fault.name());
            }
            handled
        }
    }
}

/// The `idempotency_key` query parameter of a lookup.
fn lookup_key(query: Option<&str>) -> Result<String, Handled> {
    match crate::query::param(query, "idempotency_key") {
        Ok(Some(key)) if !key.is_empty() => Ok(key),
        Ok(_) => Err(Handled::bad_request(
            "missing idempotency_key query parameter",
        )),
        Err(message) => Err(Handled::bad_request(message)),
    }
}

/// A lookup's answer: the record, or 404 (also for a record the lookup-lag fault
/// still hides).
fn found(state: &SimState, record: Option<impl Record>) -> Handled {
    match record {
        Some(record) if state.lookup_lagging(record.id()) => {
            not_found().for_record(&record).fault("lookup-lag-ms")
        }
        Some(record) => Handled::record(StatusCode::OK, &record),
        None => not_found(),
    }
}

async fn read_json<T: DeserializeOwned>(req: Request<Incoming>) -> Result<T, Handled> {
    let bytes = match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Err(Handled::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            ))
        }
        Err(_) => return Err(Handled::bad_request("request body unreadable")),
    };
    serde_json::from_slice(&bytes).map_err(|e| Handled::bad_request(format!("malformed body: {e}")))
}
