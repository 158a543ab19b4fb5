//! `POST /agent/operations/{kind}`: the one registration path for every kind. Each
//! kind contributes only its part (its body, validated into an `OperationRequest`);
//! authentication, grants, the Idempotency-Key, replays, registration exactly once per
//! (agent, key) and the answer are shared. Every refusal happens before anything is
//! written; the write itself is one transaction in the store.

use actix_web::{post, web, HttpRequest, HttpResponse};
use opgate_catalog::DeclaredKind;
use opgate_domain::{BuiltinKind, IdempotencyKey};
use opgate_store::{
    BudgetedRegistration, NewOperation, NewRefund, PendingRegistration, Registration,
};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::auth::authenticate_with_existing;
use crate::body::{parse_object_value, read_body, require_exact_number, require_json_content_type};
use crate::headers::single_header;
use crate::problem::Problem;
use crate::routes::operations::respond;
use crate::routes::{payments, refunds};
use crate::view::OperationView;
use crate::AppState;
use opgate_telemetry::{metrics, propagation};

/// The body of `POST /agent/operations/{kind}`: the kind's own schema.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only documents the request body
pub enum OperationBody {
    Payment(payments::PaymentBody),
    Refund(refunds::RefundBody),
}

/// The kind a request names: built in, or declared in the catalog.
enum Kind<'a> {
    Builtin(BuiltinKind),
    Declared(&'a DeclaredKind),
}

impl Kind<'_> {
    fn name(&self) -> &str {
        match self {
            Self::Builtin(kind) => kind.as_str(),
            Self::Declared(kind) => kind.name().as_str(),
        }
    }
}

/// A request validated by its kind, ready to register.
enum Prepared {
    /// Registered by the shared statement (group-committed when enabled).
    Plain {
        request: opgate_domain::OperationRequest,
        provider: String,
    },
    /// Registered in its own transaction that reserves the amount on the payment.
    Refund(refunds::PreparedRefund),
}

impl Prepared {
    fn request(&self) -> &opgate_domain::OperationRequest {
        match self {
            Self::Plain { request, .. } => request,
            Self::Refund(refund) => &refund.request,
        }
    }
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
    // Read before authenticating, refused after it: a bad key still answers 401 first.
    let idempotency_key = idempotency_key(&request);
    let (agent, existing) =
        authenticate_with_existing(&request, &state.store, idempotency_key.as_ref().ok()).await?;
    let kind = match BuiltinKind::parse(&kind) {
        Some(builtin) => Kind::Builtin(builtin),
        None => state
            .catalog
            .kind(&kind)
            .map(Kind::Declared)
            .ok_or_else(|| Problem::unknown_kind(&kind))?,
    };
    agent
        .policy
        .permits_operation(kind.name())
        .map_err(|denial| Problem::forbidden(denial.to_string()))?;
    let idempotency_key = idempotency_key?;
    require_json_content_type(&request)?;
    let body = read_body(&request, payload).await?;
    let prepared = match kind {
        Kind::Builtin(BuiltinKind::Payment) => Prepared::Plain {
            request: payments::parse(&body, &agent.policy)?,
            provider: state.payment_provider.clone(),
        },
        Kind::Builtin(BuiltinKind::Refund) => {
            Prepared::Refund(refunds::prepare(&body, &state.store, &agent.agent_id).await?)
        }
        Kind::Declared(declared) => {
            if let Some(money) = declared.money() {
                // A JSON pointer to a top-level member: "/total" names "total".
                let member = money.amount.trim_start_matches('/');
                require_exact_number(&body, &member.replace("~1", "/").replace("~0", "~"))?;
            }
            let request = declared
                .validate(&parse_object_value(&body)?)
                .map_err(|e| Problem::invalid_body(e.to_string()))?;
            if let Some(money) = request.money() {
                agent
                    .policy
                    .permits_amount(money)
                    .map_err(|denial| Problem::forbidden(denial.to_string()))?;
            }
            Prepared::Plain {
                request,
                provider: declared.provider().to_owned(),
            }
        }
    };

    // The server span continues the agent's traceparent, if it sent one; storing its
    // context carries the trace through the outbox to the executor and reconciler.
    let server_span = tracing::Span::current();
    server_span.record("opgate.agent_id", agent.agent_id.as_str());
    server_span.record("opgate.idempotency_key", idempotency_key.as_str());
    let traceparent = propagation::traceparent_of(&server_span);
    let registration = match existing {
        // The key was already taken when the request was authenticated: a replay, or
        // a reuse, answered from that read without writing.
        Some(existing) if existing.request_hash == *prepared.request().request_hash() => {
            Registration::Replayed(existing)
        }
        Some(_) => Registration::KeyReused,
        None => match &prepared {
            Prepared::Plain { request, provider } => {
                // Above the agent's threshold, nothing is sent before an operator approves.
                let awaiting_approval_for = request
                    .money()
                    .filter(|money| agent.policy.needs_approval(*money))
                    .map(|_| state.approval_timeout);
                let new = NewOperation {
                    operation_id: Uuid::new_v4(),
                    agent_id: &agent.agent_id,
                    idempotency_key: &idempotency_key,
                    request,
                    provider,
                    awaiting_approval_for,
                    trace_context: traceparent.as_deref(),
                };
                let budget = request
                    .money()
                    .and_then(|money| agent.policy.daily_budget_for(money).map(|b| (money, b)));
                match (budget, &state.batcher) {
                    (Some((money, budget)), _) => {
                        match state.store.register_within_budget(&new, budget).await? {
                            BudgetedRegistration::Registered(registration) => registration,
                            BudgetedRegistration::Exceeded { frees_at, .. } => {
                                let retry_after = frees_at.map(|at| {
                                    (at - chrono::Utc::now()).num_seconds().max(1) as u64
                                });
                                return Err(Problem::budget_exceeded(
                                    &budget.to_string(),
                                    money.currency().code(),
                                    retry_after,
                                ));
                            }
                        }
                    }
                    (None, Some(batcher)) if awaiting_approval_for.is_none() => {
                        batcher.submit(PendingRegistration::from_new(&new)).await?
                    }
                    (None, _) => state.store.register_operation(&new).await?,
                }
            }
            Prepared::Refund(refund) => refunds::answer(
                state
                    .store
                    .register_refund(&NewRefund {
                        operation_id: Uuid::new_v4(),
                        agent_id: &agent.agent_id,
                        idempotency_key: &idempotency_key,
                        request: &refund.request,
                        payment_operation_id: refund.payment_operation_id,
                        trace_context: traceparent.as_deref(),
                    })
                    .await?,
            )?,
        },
    };
    let (record, replayed) = match registration {
        Registration::Created(record) => {
            // After the commit, never inside it: see wakeups.rs.
            state.executor_waker.operation_created();
            tracing::info!(agent_id = %agent.agent_id, operation_id = %record.operation_id, kind = %record.operation_type, "operation registered");
            (record, false)
        }
        Registration::Replayed(record) => {
            metrics().duplicate_prevented();
            tracing::info!(agent_id = %agent.agent_id, operation_id = %record.operation_id, status = %record.status, "idempotent replay");
            (record, true)
        }
        Registration::KeyReused => {
            tracing::info!(agent_id = %agent.agent_id, "idempotency key reused with a different request");
            return Err(Problem::key_reused());
        }
    };
    server_span.record("opgate.operation_id", record.operation_id.to_string());
    Ok(respond(&request, &state, &agent.agent_id, record, replayed).await)
}

fn idempotency_key(request: &HttpRequest) -> Result<IdempotencyKey, Problem> {
    let value = single_header(request, "Idempotency-Key")?
        .ok_or_else(|| Problem::bad_idempotency_key("The Idempotency-Key header is required."))?;
    let text = value.to_str().map_err(|_| {
        Problem::bad_idempotency_key("Idempotency-Key must be visible ASCII characters.")
    })?;
    IdempotencyKey::parse(text).map_err(|e| Problem::bad_idempotency_key(e.to_string()))
}
