//! HTTP surface: routes each request to the state, turns outcomes into JSON
//! responses (or a dropped connection), and logs one line per request with only the
//! method, path, status, payment id and the faults that fired.

use std::fmt;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::faults::{Fault, FaultSet};
use crate::model::{CreatePaymentRequest, Payment, SettleRequest};
use crate::query;
use crate::state::{CreateOutcome, SettleError, SimState};

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
    payment_id: Option<String>,
    faults: Vec<&'static str>,
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
            payment_id: None,
            faults: Vec::new(),
        }
    }

    fn error(status: StatusCode, message: impl Into<String>) -> Handled {
        Handled::json(status, &json!({ "error": message.into() }))
    }

    fn payment(payment: &Payment) -> Handled {
        Handled::json(StatusCode::OK, payment).for_payment(payment)
    }

    fn for_payment(mut self, payment: &Payment) -> Handled {
        self.payment_id = Some(payment.id.clone());
        self
    }

    fn fault(mut self, name: &'static str) -> Handled {
        self.faults.push(name);
        self
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
        payment_id = %handled.payment_id.as_deref().unwrap_or("-"),
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
            Ok(response)
        }
        Reply::Drop => Err(DropConnection),
    }
}

async fn route(state: &SimState, path: &str, req: Request<Incoming>) -> Handled {
    match (req.method(), path) {
        (&Method::POST, "/v1/payments") => create_payment(state, req).await,
        (&Method::GET, "/v1/payments") => lookup_payment(state, req.uri().query()),
        (&Method::GET, "/_sim/ledger") => Handled::json(StatusCode::OK, &state.ledger()),
        (&Method::GET, "/_sim/faults") => Handled::json(StatusCode::OK, &state.faults()),
        (&Method::POST, "/_sim/faults") => set_faults(state, req).await,
        (&Method::GET, "/healthz") => Handled::json(StatusCode::OK, &json!({ "status": "ok" })),
        (&Method::POST, _) => match settle_target(path) {
            Some(id) => settle(state, id, req).await,
            None => not_found(),
        },
        _ => not_found(),
    }
}

fn not_found() -> Handled {
    Handled::error(StatusCode::NOT_FOUND, "not found")
}

async fn create_payment(state: &SimState, req: Request<Incoming>) -> Handled {
    let key = match idempotency_key(&req) {
        Ok(key) => key,
        Err(handled) => return handled,
    };
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok());
    state.record_request(&key, traceparent);
    let request = match read_json::<CreatePaymentRequest>(req).await {
        Ok(body) => match body.validate() {
            Ok(request) => request,
            Err(message) => return Handled::error(StatusCode::BAD_REQUEST, message),
        },
        Err(handled) => return handled,
    };

    let delay = state.delay();
    let delayed = !delay.is_zero();
    if delayed {
        tokio::time::sleep(delay).await;
    }
    let handled = match state.create_payment(&key, request) {
        CreateOutcome::InjectedErrorBeforeCommit => Handled::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "injected error before commit",
        )
        .fault(Fault::ErrorBeforeCommit.name()),
        CreateOutcome::Replayed(payment) => Handled::payment(&payment),
        CreateOutcome::KeyConflict => Handled::error(
            StatusCode::CONFLICT,
            "idempotency key reused with different parameters",
        ),
        CreateOutcome::Created {
            payment,
            pending_injected,
            after_commit,
        } => {
            let mut handled = match after_commit {
                Some(Fault::ErrorAfterCommit) => Handled::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "injected error after commit",
                )
                .for_payment(&payment),
                Some(Fault::DropAfterCommit) => Handled {
                    reply: Reply::Drop,
                    payment_id: Some(payment.id.clone()),
                    faults: Vec::new(),
                },
                _ => Handled::payment(&payment),
            };
            if pending_injected {
                handled = handled.fault(Fault::Pending.name());
            }
            if let Some(fault) = after_commit {
                handled = handled.fault(fault.name());
            }
            handled
        }
    };
    if delayed {
        handled.fault("delay-ms")
    } else {
        handled
    }
}

fn idempotency_key(req: &Request<Incoming>) -> Result<String, Handled> {
    match req.headers().get("idempotency-key") {
        None => Err(Handled::error(
            StatusCode::BAD_REQUEST,
            "missing Idempotency-Key",
        )),
        Some(value) => match value.to_str() {
            Ok("") => Err(Handled::error(
                StatusCode::BAD_REQUEST,
                "missing Idempotency-Key",
            )),
            Ok(key) => Ok(key.to_owned()),
            Err(_) => Err(Handled::error(
                StatusCode::BAD_REQUEST,
                "Idempotency-Key must be visible ASCII",
            )),
        },
    }
}

fn lookup_payment(state: &SimState, query: Option<&str>) -> Handled {
    match query::param(query, "idempotency_key") {
        Ok(Some(key)) if !key.is_empty() => match state.payment_by_key(&key) {
            Some(payment) => Handled::payment(&payment),
            None => not_found(),
        },
        Ok(_) => Handled::error(
            StatusCode::BAD_REQUEST,
            "missing idempotency_key query parameter",
        ),
        Err(message) => Handled::error(StatusCode::BAD_REQUEST, message),
    }
}

async fn set_faults(state: &SimState, req: Request<Incoming>) -> Handled {
    let faults = match read_json::<FaultSet>(req).await {
        Ok(faults) => faults,
        Err(handled) => return handled,
    };
    if let Err(message) = faults.validate() {
        return Handled::error(StatusCode::BAD_REQUEST, message);
    }
    state.set_faults(faults);
    tracing::info!(?faults, "faults replaced");
    Handled::json(StatusCode::OK, &faults)
}

/// `/_sim/payments/{id}/settle` → `id`.
fn settle_target(path: &str) -> Option<String> {
    let id = path
        .strip_prefix("/_sim/payments/")?
        .strip_suffix("/settle")?;
    (!id.is_empty() && !id.contains('/')).then(|| id.to_owned())
}

async fn settle(state: &SimState, payment_id: String, req: Request<Incoming>) -> Handled {
    let settlement = match read_json::<SettleRequest>(req).await {
        Ok(body) => match body.validate() {
            Ok(settlement) => settlement,
            Err(message) => return Handled::error(StatusCode::BAD_REQUEST, message),
        },
        Err(handled) => return handled,
    };
    match state.settle(&payment_id, settlement) {
        Ok(payment) => Handled::payment(&payment),
        Err(SettleError::NotFound) => not_found(),
        Err(SettleError::NotPending) => {
            Handled::error(StatusCode::CONFLICT, "payment is not pending")
        }
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
        Err(_) => {
            return Err(Handled::error(
                StatusCode::BAD_REQUEST,
                "request body unreadable",
            ))
        }
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| Handled::error(StatusCode::BAD_REQUEST, format!("malformed body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_paths() {
        assert_eq!(
            settle_target("/_sim/payments/pay_1/settle").as_deref(),
            Some("pay_1")
        );
        assert_eq!(settle_target("/_sim/payments//settle"), None);
        assert_eq!(settle_target("/_sim/payments/a/b/settle"), None);
        assert_eq!(settle_target("/_sim/payments/pay_1"), None);
    }
}
