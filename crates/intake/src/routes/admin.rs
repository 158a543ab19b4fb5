//! The admin API, for operators only (operator keys; agent keys get 403): list
//! operations, show one with its audit trail, and resolve the manual-review queue.
//! Every change is conditional on MANUAL_REVIEW and audited with the operator's name.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use opgate_domain::OperationStatus;
use opgate_store::{OperationFilter, OperationRecord, OperatorAction};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::authenticate_operator;
use crate::problem::Problem;
use crate::AppState;

#[derive(Debug, Deserialize, IntoParams)]
pub struct ListQuery {
    /// Only this status, e.g. MANUAL_REVIEW.
    pub status: Option<String>,
    /// Only this agent's operations.
    pub agent: Option<String>,
    /// At most this many (default 50, at most 1000).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdminOperation {
    pub operation_id: Uuid,
    pub agent_id: String,
    pub operation_type: String,
    pub status: String,
    pub provider_reference: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEvent {
    pub at: chrono::DateTime<chrono::Utc>,
    pub from_status: Option<String>,
    pub to_status: String,
    pub actor: String,
    pub reason: Option<String>,
    pub fencing_token: Option<i64>,
    /// `applied`, or `rejected_stale` for a write refused by its fencing token.
    pub outcome: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdminOperationDetail {
    #[serde(flatten)]
    pub operation: AdminOperation,
    pub events: Vec<AuditEvent>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// SUCCEEDED or FAILED.
    pub status: String,
    pub provider_reference: Option<String>,
    /// What the operator checked; kept in the audit trail.
    pub reason: String,
}

impl From<&OperationRecord> for AdminOperation {
    fn from(op: &OperationRecord) -> Self {
        Self {
            operation_id: op.operation_id,
            agent_id: op.agent_id.clone(),
            operation_type: op.operation_type.clone(),
            status: op.status.as_str().to_owned(),
            provider_reference: op.provider_reference.clone(),
            attempts: op.attempts,
            last_error: op.last_error.clone(),
            created_at: op.created_at,
            updated_at: op.updated_at,
        }
    }
}

#[utoipa::path(
    params(ListQuery),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "Operations, newest first", body = Vec<AdminOperation>),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator key", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/admin/operations")]
pub async fn list_operations(
    request: HttpRequest,
    query: web::Query<ListQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    authenticate_operator(&request, &state.store).await?;
    let status = query
        .status
        .as_deref()
        .map(|s| s.to_ascii_uppercase().parse::<OperationStatus>())
        .transpose()
        .map_err(|e| Problem::invalid_body(e.to_string()))?;
    let filter = OperationFilter {
        status,
        agent_id: query.agent.clone(),
        limit: query.limit.unwrap_or(50).clamp(1, 1000),
    };
    let operations = state.store.list_operations(&filter).await?;
    let body: Vec<AdminOperation> = operations.iter().map(AdminOperation::from).collect();
    Ok(HttpResponse::Ok().json(body))
}

#[utoipa::path(
    params(("operation_id" = Uuid, Path)),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "The operation and its audit trail", body = AdminOperationDetail),
        (status = 404, description = "No such operation", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/admin/operations/{operation_id}")]
pub async fn show_operation(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    authenticate_operator(&request, &state.store).await?;
    let id = Uuid::parse_str(&path).map_err(|_| Problem::not_found())?;
    let operation = state
        .store
        .find_operation(id)
        .await?
        .ok_or_else(Problem::not_found)?;
    let events = state.store.operation_events(id).await?;
    Ok(HttpResponse::Ok().json(AdminOperationDetail {
        operation: AdminOperation::from(&operation),
        events: events
            .into_iter()
            .map(|e| AuditEvent {
                at: e.created_at,
                from_status: e.from_status,
                to_status: e.to_status,
                actor: e.actor,
                reason: e.reason,
                fencing_token: e.fencing_token,
                outcome: e.outcome,
            })
            .collect(),
    }))
}

#[utoipa::path(
    params(("operation_id" = Uuid, Path)),
    request_body(content = ResolveBody, content_type = "application/json"),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "Resolved", body = AdminOperation),
        (status = 404, description = "No such operation", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not in MANUAL_REVIEW (already resolved?); nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/admin/operations/{operation_id}/resolve")]
pub async fn resolve_operation(
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Json<ResolveBody>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let operator = authenticate_operator(&request, &state.store).await?;
    let id = Uuid::parse_str(&path).map_err(|_| Problem::not_found())?;
    let to = match body.status.to_ascii_uppercase().as_str() {
        "SUCCEEDED" => OperationStatus::Succeeded,
        "FAILED" => OperationStatus::Failed,
        _ => return Err(Problem::invalid_body("status must be SUCCEEDED or FAILED")),
    };
    if body.reason.trim().is_empty() {
        return Err(Problem::invalid_body("reason must say what was checked"));
    }
    let actor = format!("operator:{}", operator.operator_id);
    let action = state
        .store
        .resolve_manual_review(
            id,
            to,
            body.provider_reference.as_deref(),
            body.reason.trim(),
            &actor,
        )
        .await?;
    match action {
        OperatorAction::Applied(op) => {
            if let Err(error) = state.store.notify_settled(&[id]).await {
                tracing::debug!(%error, "could not announce the resolution; waiters poll");
            }
            tracing::info!(operation_id = %id, operator = %operator.operator_id, status = %op.status, "resolved by an operator");
            Ok(HttpResponse::Ok().json(AdminOperation::from(&op)))
        }
        OperatorAction::NotInReview(status) => Err(Problem::not_in_review(status.as_str())),
        OperatorAction::NotFound => Err(Problem::not_found()),
    }
}
