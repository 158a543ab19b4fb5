//! Approvals, for operators only: approve an operation that waits for one (it becomes
//! PENDING and is enqueued in the same statement) or reject it (FAILED with the
//! operator's reason). Both are conditional on AWAITING_APPROVAL and audited with the
//! operator's name; like every admin route, they authenticate before reading anything.

use actix_web::{post, web, HttpRequest, HttpResponse};
use opgate_domain::BusinessId;
use opgate_store::{OperationRecord, OperatorAction};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::auth::authenticate_operator;
use crate::body::{parse_object, read_body, require_json_content_type};
use crate::problem::Problem;
use crate::routes::admin::{operation_id, AdminOperation, MAX_REASON_CHARS};
use crate::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// Why it is approved, if the operator says; kept in the audit trail after
    /// "approved by operator". At most 1000 characters, no control characters.
    #[schema(max_length = 1000)]
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    /// Why it is rejected: the operation's `last_error` becomes "rejected by operator:
    /// <reason>", and the audit trail keeps it. At most 1000 characters, no control
    /// characters.
    #[schema(max_length = 1000)]
    pub reason: String,
}

/// An approval's or rejection's reason, checked as a resolution's is.
fn decision_reason(reason: &str) -> Result<BusinessId, Problem> {
    if reason.trim().is_empty() {
        return Err(Problem::invalid_body("reason must not be empty"));
    }
    BusinessId::parse_at_most("reason", reason, MAX_REASON_CHARS)
        .map_err(|e| Problem::invalid_body(e.to_string()))
}

/// An approval decision's answer: the operation, or why nothing changed.
fn decided(action: OperatorAction) -> Result<OperationRecord, Problem> {
    match action {
        OperatorAction::Applied(op) => Ok(op),
        OperatorAction::NotAwaitingApproval(status) | OperatorAction::NotInReview(status) => {
            Err(Problem::not_awaiting_approval(status.as_str()))
        }
        OperatorAction::NotFound => Err(Problem::not_found()),
    }
}

#[utoipa::path(
    params(("operation_id" = Uuid, Path)),
    request_body(content = ApproveBody, content_type = "application/json"),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "Approved: now PENDING and queued for the executors", body = AdminOperation),
        (status = 400, description = "Malformed JSON or an empty body (send `{}` for no reason), or Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key (checked before the body is read)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such operation (or not a UUID)", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not AWAITING_APPROVAL (already decided, or expired); nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid body: not an object, unknown or repeated field, empty or over-long reason, or one holding a control character", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Unexpected error", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable; nothing changed", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/admin/operations/{operation_id}/approve")]
pub async fn approve_operation(
    request: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, Problem> {
    let operator = authenticate_operator(&request, &state.store).await?;
    let id = operation_id(&request)?;
    require_json_content_type(&request)?;
    let body: ApproveBody = parse_object(&read_body(&request, payload).await?)?;
    let reason = body.reason.as_deref().map(decision_reason).transpose()?;
    let action = state
        .store
        .approve_operation(
            id,
            &operator.operator_id,
            reason.as_ref().map(BusinessId::as_str),
        )
        .await?;
    let op = decided(action)?;
    // After the commit, never inside it: see wakeups.rs.
    state.executor_waker.operation_created();
    tracing::info!(operation_id = %id, operator = %operator.operator_id, "approved by an operator");
    Ok(HttpResponse::Ok().json(AdminOperation::from(&op)))
}

#[utoipa::path(
    params(("operation_id" = Uuid, Path)),
    request_body(content = RejectBody, content_type = "application/json"),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "Rejected: now FAILED, never sent", body = AdminOperation),
        (status = 400, description = "Malformed JSON or an empty body, or Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key (checked before the body is read)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such operation (or not a UUID)", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not AWAITING_APPROVAL (already decided, or expired); nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid body: not an object, unknown or repeated field, missing, empty or over-long reason, or one holding a control character", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Unexpected error", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable; nothing changed", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/admin/operations/{operation_id}/reject")]
pub async fn reject_operation(
    request: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, Problem> {
    let operator = authenticate_operator(&request, &state.store).await?;
    let id = operation_id(&request)?;
    require_json_content_type(&request)?;
    let body: RejectBody = parse_object(&read_body(&request, payload).await?)?;
    let reason = decision_reason(&body.reason)?;
    let action = state
        .store
        .reject_operation(id, &operator.operator_id, reason.as_str())
        .await?;
    let op = decided(action)?;
    if let Err(error) = state.store.notify_settled(&[id]).await {
        tracing::debug!(%error, "could not announce the rejection; waiters poll");
    }
    tracing::info!(operation_id = %id, operator = %operator.operator_id, "rejected by an operator");
    Ok(HttpResponse::Ok().json(AdminOperation::from(&op)))
}
