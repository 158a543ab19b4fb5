//! The admin API, for operators only (operator keys; agent keys get 403): list
//! operations, show one with its audit trail, and resolve the manual-review queue
//! (approvals are in `approvals.rs`). Every change is conditional on the state it
//! leaves and audited with the operator's name.
//!
//! Every route authenticates first: the path, the query and the body are read and
//! validated only for an operator, so nothing about them is told to anyone else. Values
//! are checked before they reach the database (lengths, control characters), so a bad
//! one is a 4xx that names it, never a 500.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use opgate_domain::{AgentId, BusinessId, OperationStatus};
use opgate_store::{OperationFilter, OperationRecord, OperatorAction};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::authenticate_operator;
use crate::body::{parse_object, read_body, require_json_content_type};
use crate::problem::Problem;
use crate::AppState;

/// The longest `reason` an operator may give.
pub const MAX_REASON_CHARS: usize = 1000;
/// The longest provider reference an operator may record.
pub const MAX_PROVIDER_REFERENCE_CHARS: usize = 255;
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 1000;

/// The query of `GET /admin/operations`, each parameter at most once; any other is
/// refused (400), so a misspelt filter never lists everything.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this status, e.g. MANUAL_REVIEW (any case).
    pub status: Option<String>,
    /// Only this agent's operations: an agent id, 1..100 of `[A-Za-z0-9._-]`.
    pub agent: Option<String>,
    /// At most this many: a whole number, default 50; above 1000 counts as 1000.
    #[param(value_type = Option<i64>, minimum = 1)]
    pub limit: Option<String>,
}

impl ListQuery {
    fn parse(query: &str) -> Result<OperationFilter, Problem> {
        let query: Self = web::Query::<Self>::from_query(query)
            .map_err(|e| Problem::bad_query(query_error(e)))?
            .into_inner();
        let status = query
            .status
            .as_deref()
            .map(crate::listing::status_filter)
            .transpose()?;
        let agent_id = query
            .agent
            .as_deref()
            .map(|agent| {
                AgentId::parse(agent)
                    .map(|id| id.as_str().to_owned())
                    .map_err(|e| Problem::bad_query(format!("agent: {e}")))
            })
            .transpose()?;
        let limit = match query.limit.as_deref() {
            None => DEFAULT_LIMIT,
            Some(text) => match text.parse::<i64>() {
                Ok(limit) if limit >= 1 => limit.min(MAX_LIMIT),
                _ => {
                    return Err(Problem::bad_query(
                        "limit must be a whole number of at least 1 (at most 1000 are listed)",
                    ))
                }
            },
        };
        Ok(OperationFilter {
            status,
            agent_id,
            limit,
        })
    }
}

/// serde_urlencoded's message, without actix's prefix and never with more than a
/// short piece of what was sent.
pub(crate) fn query_error(error: actix_web::error::QueryPayloadError) -> String {
    let text = match error {
        actix_web::error::QueryPayloadError::Deserialize(e) => e.to_string(),
        other => other.to_string(),
    };
    let shown: String = text.chars().take(200).collect();
    format!("the query string cannot be read: {shown}")
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
    /// The provider's reference, if the operator found one: at most 255 characters, no
    /// control characters.
    #[schema(max_length = 255)]
    pub provider_reference: Option<String>,
    /// What the operator checked; kept in the audit trail. At most 1000 characters, no
    /// control characters.
    #[schema(max_length = 1000)]
    pub reason: String,
}

/// A resolution the store can write: every value checked.
struct Resolution {
    to: OperationStatus,
    provider_reference: Option<BusinessId>,
    reason: BusinessId,
}

impl ResolveBody {
    fn validate(&self) -> Result<Resolution, Problem> {
        let to = match self.status.to_ascii_uppercase().as_str() {
            "SUCCEEDED" => OperationStatus::Succeeded,
            "FAILED" => OperationStatus::Failed,
            _ => return Err(Problem::invalid_body("status must be SUCCEEDED or FAILED")),
        };
        if self.reason.trim().is_empty() {
            return Err(Problem::invalid_body("reason must say what was checked"));
        }
        let reason = BusinessId::parse_at_most("reason", &self.reason, MAX_REASON_CHARS)
            .map_err(|e| Problem::invalid_body(e.to_string()))?;
        let provider_reference = self
            .provider_reference
            .as_deref()
            .map(|reference| {
                BusinessId::parse_at_most(
                    "provider_reference",
                    reference,
                    MAX_PROVIDER_REFERENCE_CHARS,
                )
                .map_err(|e| Problem::invalid_body(e.to_string()))
            })
            .transpose()?;
        Ok(Resolution {
            to,
            provider_reference,
            reason,
        })
    }
}

/// The `{operation_id}` of the matched route; a malformed id is no operation.
pub(crate) fn operation_id(request: &HttpRequest) -> Result<Uuid, Problem> {
    request
        .match_info()
        .get("operation_id")
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(Problem::not_found)
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
        (status = 400, description = "Invalid query (unknown or repeated parameter, unknown status, invalid agent id, limit not a whole number >= 1), or Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator key", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Unexpected error", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/admin/operations")]
pub async fn list_operations(
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    authenticate_operator(&request, &state.store).await?;
    let filter = ListQuery::parse(request.query_string())?;
    let operations = state.store.list_operations(&filter).await?;
    let body: Vec<AdminOperation> = operations.iter().map(AdminOperation::from).collect();
    Ok(HttpResponse::Ok().json(body))
}

#[utoipa::path(
    params(("operation_id" = Uuid, Path)),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "The operation and its audit trail", body = AdminOperationDetail),
        (status = 400, description = "Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such operation (or not a UUID)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Unexpected error", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/admin/operations/{operation_id}")]
pub async fn show_operation(
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    authenticate_operator(&request, &state.store).await?;
    let id = operation_id(&request)?;
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
        (status = 400, description = "Malformed JSON, or Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key (checked before the body is read)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such operation (or not a UUID)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not in MANUAL_REVIEW (already resolved?); nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid body: unknown or repeated field, status not SUCCEEDED or FAILED, empty or over-long reason or provider_reference, or one holding a control character", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Unexpected error", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable; nothing changed", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/admin/operations/{operation_id}/resolve")]
pub async fn resolve_operation(
    request: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, Problem> {
    let operator = authenticate_operator(&request, &state.store).await?;
    let id = operation_id(&request)?;
    require_json_content_type(&request)?;
    let body: ResolveBody = parse_object(&read_body(&request, payload).await?)?;
    let resolution = body.validate()?;
    let actor = format!("operator:{}", operator.operator_id);
    let action = state
        .store
        .resolve_manual_review(
            id,
            resolution.to,
            resolution
                .provider_reference
                .as_ref()
                .map(BusinessId::as_str),
            resolution.reason.as_str(),
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
        OperatorAction::NotInReview(status) | OperatorAction::NotAwaitingApproval(status) => {
            Err(Problem::not_in_review(status.as_str()))
        }
        OperatorAction::NotFound => Err(Problem::not_found()),
    }
}
