//! `POST /agent/operations/payment`: validate everything, then register the operation
//! exactly once per (agent, Idempotency-Key). Every refusal happens before anything is
//! written; the write itself is one transaction in the store.

use actix_web::{post, web, HttpRequest, HttpResponse};
use opgate_domain::{IdempotencyKey, OperationType, PaymentRequest};
use opgate_store::{NewOperation, PendingRegistration, Registration};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::auth::authenticate_with_existing;
use crate::body::{read_json, require_json_content_type};
use crate::problem::Problem;
use crate::view::{operation_response, OperationView};
use crate::wakeups::requested_wait;
use crate::AppState;
use opgate_telemetry::{metrics, propagation};

/// The body of a payment request. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PaymentBody {
    pub customer_id: String,
    pub invoice_id: String,
    /// Decimal amount, as a string ("250.00") or a number; > 0, with no more decimals
    /// than the currency allows. Strings are exact; prefer them.
    #[schema(value_type = String, example = "250.00")]
    pub amount: AmountField,
    /// ISO 4217 code; USD when absent.
    #[serde(default)]
    pub currency: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum AmountField {
    Text(String),
    Number(serde_json::Number),
}

impl AmountField {
    fn as_text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Number(number) => number.to_string(),
        }
    }
}

#[utoipa::path(
    request_body(content = PaymentBody, content_type = "application/json"),
    params(
        ("Idempotency-Key" = String, Header, description = "1..255 visible ASCII characters; the same key for every retry of one payment"),
        ("Prefer" = Option<String>, Header, description = "wait=N (N <= 30): wait up to N seconds for a terminal state; answered with Preference-Applied"),
    ),
    security(("agent_key" = [])),
    responses(
        (status = 202, description = "New operation accepted (or a replay of one still in progress)", body = OperationView,
         headers(("Location" = String), ("Idempotent-Replayed" = String, description = "true on a replay"))),
        (status = 200, description = "The operation has finished (a replay, or after Prefer: wait)", body = OperationView),
        (status = 400, description = "Missing or invalid Idempotency-Key, or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Payments or this amount not permitted for this agent", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Idempotency-Key reused with a different request", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Body is well-formed but invalid", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable; nothing recorded", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/agent/operations/payment")]
pub async fn create_payment(
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    // Read before authenticating, refused after it: a bad key still answers 401 first.
    let idempotency_key = idempotency_key(&request);
    let (agent, existing) =
        authenticate_with_existing(&request, &state.store, idempotency_key.as_ref().ok()).await?;
    agent
        .policy
        .permits_operation(OperationType::Payment)
        .map_err(|denial| Problem::forbidden(denial.to_string()))?;
    let idempotency_key = idempotency_key?;
    require_json_content_type(&request)?;
    let json = read_json(&request, payload).await?;
    let body: PaymentBody =
        serde_json::from_value(json).map_err(|e| Problem::invalid_body(e.to_string()))?;
    let payment = PaymentRequest::parse(
        &body.customer_id,
        &body.invoice_id,
        &body.amount.as_text(),
        body.currency.as_deref(),
    )
    .map_err(|e| Problem::invalid_body(e.to_string()))?;
    agent
        .policy
        .permits_amount(payment.money())
        .map_err(|denial| Problem::forbidden(denial.to_string()))?;

    // The server span continues the agent's traceparent, if it sent one; storing its
    // context carries the trace through the outbox to the executor and reconciler.
    let server_span = tracing::Span::current();
    server_span.record("opgate.agent_id", agent.agent_id.as_str());
    server_span.record("opgate.idempotency_key", idempotency_key.as_str());
    let traceparent = propagation::traceparent_of(&server_span);
    let new = NewOperation {
        operation_id: Uuid::new_v4(),
        agent_id: &agent.agent_id,
        idempotency_key: &idempotency_key,
        request: &payment,
        trace_context: traceparent.as_deref(),
    };
    let registration = match existing {
        // The key was already taken when the request was authenticated: a replay, or
        // a reuse, answered from that read without writing.
        Some(existing) if existing.request_hash == payment.request_hash() => {
            Registration::Replayed(existing)
        }
        Some(_) => Registration::KeyReused,
        None => match &state.batcher {
            Some(batcher) => batcher.submit(PendingRegistration::from_new(&new)).await?,
            None => state.store.register_operation(&new).await?,
        },
    };
    let (record, replayed) = match registration {
        Registration::Created(record) => {
            // After the commit, never inside it: see wakeups.rs.
            state.executor_waker.operation_created();
            tracing::info!(agent_id = %agent.agent_id, operation_id = %record.operation_id, "operation registered");
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
    let waited = requested_wait(&request);
    let record = match waited {
        Some(secs) => {
            let wait = std::time::Duration::from_secs(secs);
            state
                .settled
                .wait_until_terminal(&state.store, &agent.agent_id, record, wait)
                .await
        }
        None => record,
    };
    Ok(operation_response(&record, replayed, waited))
}

fn idempotency_key(request: &HttpRequest) -> Result<IdempotencyKey, Problem> {
    let value = request
        .headers()
        .get("Idempotency-Key")
        .ok_or_else(|| Problem::bad_idempotency_key("The Idempotency-Key header is required."))?;
    let text = value.to_str().map_err(|_| {
        Problem::bad_idempotency_key("Idempotency-Key must be visible ASCII characters.")
    })?;
    IdempotencyKey::parse(text).map_err(|e| Problem::bad_idempotency_key(e.to_string()))
}
