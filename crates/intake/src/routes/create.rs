//! `POST /agent/operations/{kind}`: the HTTP door to the one registration path
//! (`registration.rs`, shared with MCP). This file reads what only HTTP carries: the
//! headers, the content type and the body, in the order the contract answers them.

use actix_web::{post, web, HttpRequest, HttpResponse};
use opgate_domain::IdempotencyKey;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::auth::{authenticate_with_existing, Reading};
use crate::body::{read_body, require_json_content_type};
use crate::headers::single_header;
use crate::problem::Problem;
use crate::registration::{register, Kind, Registering, Submission};
use crate::routes::operations::respond;
use crate::routes::{payments, refunds};
use crate::view::OperationView;
use crate::wakeups::requested_wait;
use crate::AppState;
use opgate_telemetry::propagation;

/// The body of `POST /agent/operations/{kind}`: the kind's own schema.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only documents the request body
pub enum OperationBody {
    Payment(payments::PaymentBody),
    Refund(refunds::RefundBody),
}

#[utoipa::path(
    params(
        ("kind" = String, Path, description = "The operation kind: payment, refund, or a kind declared in the catalog (each listed under its own path)"),
        ("Idempotency-Key" = String, Header, description = "1..255 visible ASCII characters; the same key for every retry of one operation"),
        ("Prefer" = Option<String>, Header, description = "wait=N (N <= 30): wait up to N seconds for a terminal state; answered with Preference-Applied"),
    ),
    request_body(content = OperationBody, content_type = "application/json"),
    security(("agent_key" = [])),
    responses(
        (status = 202, description = "New operation accepted (or a replay of one still in progress)", body = OperationView,
         headers(("Location" = String), ("Idempotent-Replayed" = String, description = "true on a replay"))),
        (status = 200, description = "The operation has finished (a replay, or after Prefer: wait)", body = OperationView),
        (status = 400, description = "Missing, invalid or repeated Idempotency-Key or Authorization, or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "This kind or this amount not permitted for this agent, or its 24-hour budget would be exceeded (budget-exceeded, with Retry-After)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such kind, or (refund) no such payment for this agent", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time; nothing recorded", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "(refund) the payment is not SUCCEEDED", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Body is not a JSON object, repeats a member, or is invalid; Idempotency-Key reused with a different request; or (refund) more than remains refundable", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over this agent's rate limit; nothing recorded (Retry-After, RateLimit, RateLimit-Policy)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable; nothing recorded", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/agent/operations/{kind}")]
pub async fn create_operation(
    request: HttpRequest,
    kind: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    // Before anything is read: a request that will wait hears every settlement after
    // its operation is read or written, so the wait need not read it again first.
    let subscribed = requested_wait(&request).map(|_| state.settled.subscribe());
    // Read before authenticating, refused after it: a bad key still answers 401 first.
    let idempotency_key = idempotency_key(&request);
    let mut body = BodyOnce::Unread(payload);
    let attempt = Attempt {
        request: &request,
        state: &state,
        kind: &kind,
        idempotency_key: &idempotency_key,
    };
    // An agent this intake read recently is not read again: the registration's
    // statement confirms its row. What it cannot confirm is judged on a fresh read.
    let (agent_id, registered) = match attempt.run(Reading::UnlessRemembered, &mut body).await? {
        (agent_id, Registering::Answered(answer)) => (agent_id, answer?),
        (_, Registering::ReadAgentAgain) => {
            let (agent_id, again) = attempt.run(Reading::Again, &mut body).await?;
            (agent_id, again.for_agent_read()?)
        }
    };
    tracing::Span::current().record(
        "opgate.operation_id",
        registered.record.operation_id.to_string(),
    );
    Ok(respond(
        &request,
        &state,
        &agent_id,
        registered.record,
        registered.replayed,
        subscribed,
    )
    .await)
}

/// One request's registration, run once or (`Reading::Again`) twice.
struct Attempt<'a> {
    request: &'a HttpRequest,
    state: &'a AppState,
    kind: &'a str,
    idempotency_key: &'a Result<IdempotencyKey, Problem>,
}

impl Attempt<'_> {
    /// Authenticates the agent (reading it as `reading` says) and registers the
    /// request; answers with the agent's id.
    async fn run(
        &self,
        reading: Reading,
        body: &mut BodyOnce,
    ) -> Result<(String, Registering), Problem> {
        let Self { request, state, .. } = *self;
        let (agent, existing) = authenticate_with_existing(
            request,
            &state.store,
            self.idempotency_key.as_ref().ok(),
            reading,
        )
        .await?;
        let kind = match Kind::permitted(&state.catalog, &agent, self.kind) {
            // A grant added since the agent was remembered is seen on a fresh read.
            Err(problem) if agent.refused_from_memory(&problem) => {
                return Ok((agent.agent_id, Registering::ReadAgentAgain));
            }
            kind => kind?,
        };
        let idempotency_key = self.idempotency_key.clone()?;
        require_json_content_type(request)?;
        let body = body.read(request).await?;

        // The server span continues the agent's traceparent, if it sent one; storing its
        // context carries the trace through the outbox to the executor and reconciler.
        let server_span = tracing::Span::current();
        server_span.record("opgate.agent_id", agent.agent_id.as_str());
        server_span.record("opgate.idempotency_key", idempotency_key.as_str());
        let registering = register(
            state,
            Submission {
                agent: &agent,
                kind,
                idempotency_key: &idempotency_key,
                body: &body,
                existing,
                traceparent: propagation::traceparent_of(&server_span),
            },
        )
        .await;
        Ok((agent.agent_id, registering))
    }
}

/// The request's body, read from the connection the first time it is needed.
enum BodyOnce {
    Unread(web::Payload),
    Read(web::Bytes),
    /// Only while it is being read.
    Reading,
}

impl BodyOnce {
    async fn read(&mut self, request: &HttpRequest) -> Result<web::Bytes, Problem> {
        if let Self::Read(body) = self {
            return Ok(body.clone());
        }
        let Self::Unread(payload) = std::mem::replace(self, Self::Reading) else {
            return Err(Problem::internal());
        };
        let body = read_body(request, payload).await?;
        *self = Self::Read(body.clone());
        Ok(body)
    }
}

fn idempotency_key(request: &HttpRequest) -> Result<IdempotencyKey, Problem> {
    let value = single_header(request, "Idempotency-Key")?
        .ok_or_else(|| Problem::bad_idempotency_key("The Idempotency-Key header is required."))?;
    let text = value.to_str().map_err(|_| {
        Problem::bad_idempotency_key("Idempotency-Key must be visible ASCII characters.")
    })?;
    IdempotencyKey::parse(text).map_err(|e| Problem::bad_idempotency_key(e.to_string()))
}
