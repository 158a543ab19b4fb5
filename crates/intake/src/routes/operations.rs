//! An agent reads its own operations: one by id (`GET /agent/operations/{operation_id}`),
//! one by the Idempotency-Key it was registered under, or a page of them (`GET
//! /agent/operations`). Another agent's operation and a malformed id both answer 404,
//! so ids leak nothing. The agent is authenticated before anything else is looked at.

use actix_web::{get, web, HttpRequest, HttpResponse};
use opgate_domain::IdempotencyKey;
use opgate_store::OperationRecord;
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::auth::authenticate;
use crate::listing::{list_page, ListRequest, OperationPage};
use crate::problem::Problem;
use crate::view::{operation_response, OperationView};
use crate::wakeups::{requested_wait, SettledSubscription};
use crate::AppState;

#[utoipa::path(
    params(
        ("operation_id" = String, Path, description = "The operation's id"),
        ("Prefer" = Option<String>, Header, description = "wait=N (N <= 30): wait up to N seconds for a terminal state"),
    ),
    security(("agent_key" = [])),
    responses(
        (status = 200, description = "Terminal operation (SUCCEEDED or FAILED)", body = OperationView),
        (status = 202, description = "Operation still in progress", body = OperationView),
        (status = 400, description = "Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "An operator key: operators read operations through /admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such operation for this agent (or not a UUID)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Unexpected error", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over this agent's rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/agent/operations/{operation_id}")]
pub async fn get_operation(
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let agent = authenticate(&request, &state.store).await?;
    let operation_id = request
        .match_info()
        .get("operation_id")
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(Problem::not_found)?;
    let record = state
        .store
        .find_operation_for_agent(operation_id, &agent.agent_id)
        .await?
        .ok_or_else(Problem::not_found)?;
    Ok(respond(&request, &state, &agent.agent_id, record, false, None).await)
}

/// The query of `GET /agent/operations`: `idempotency_key` alone, or the list's
/// filters. Each parameter at most once; any other is refused (400).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AgentListQuery {
    /// The operation this agent registered under this key (then no other parameter).
    pub idempotency_key: Option<String>,
    /// Only this status, e.g. UNKNOWN (any case).
    pub status: Option<String>,
    /// Only this kind, e.g. payment.
    pub kind: Option<String>,
    /// At most this many: 1..100, default 20 (above 100 counts as 100).
    #[param(value_type = Option<i64>, minimum = 1)]
    pub limit: Option<String>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

#[utoipa::path(
    params(AgentListQuery),
    security(("agent_key" = [])),
    responses(
        (status = 200, description = "With idempotency_key: the operation, if terminal. Otherwise: a page of the agent's operations, newest first", body = OperationPage),
        (status = 202, description = "With idempotency_key: the operation, still in progress", body = OperationView),
        (status = 400, description = "An unknown or repeated parameter, idempotency_key with another parameter, or a bad status, limit or cursor; or Authorization sent more than once", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "An operator key: operators list operations through /admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "With idempotency_key: no operation of this agent has that key", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over this agent's rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/agent/operations")]
pub async fn list_operations(
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let agent = authenticate(&request, &state.store).await?;
    let query = web::Query::<AgentListQuery>::from_query(request.query_string())
        .map_err(|e| Problem::bad_query(crate::routes::admin::query_error(e)))?
        .into_inner();
    if let Some(key) = query.idempotency_key.as_deref() {
        if query.status.is_some()
            || query.kind.is_some()
            || query.limit.is_some()
            || query.cursor.is_some()
        {
            return Err(Problem::bad_query(
                "idempotency_key finds one operation; send it alone",
            ));
        }
        let key = IdempotencyKey::parse(key)
            .map_err(|e| Problem::bad_query(format!("idempotency_key: {e}")))?;
        let record = state
            .store
            .find_operation_by_key(&agent.agent_id, key.as_str())
            .await?
            .ok_or_else(Problem::no_operation_for_key)?;
        return Ok(respond(&request, &state, &agent.agent_id, record, false, None).await);
    }
    let limit = query
        .limit
        .as_deref()
        .map(|text| text.parse::<i64>().unwrap_or(0))
        .map(|limit| limit.max(0));
    let page = list_page(
        &state.store,
        &agent.agent_id,
        &ListRequest {
            status: query.status.as_deref(),
            kind: query.kind.as_deref(),
            limit,
            cursor: query.cursor.as_deref(),
        },
    )
    .await?;
    Ok(HttpResponse::Ok().json(page))
}

/// The operation's answer, after waiting for a terminal state when the request asked
/// for it with `Prefer: wait=N`. `subscribed`: settlements announced since before
/// `record` was read or written (then the wait starts without re-reading it).
pub(crate) async fn respond(
    request: &HttpRequest,
    state: &AppState,
    agent_id: &str,
    record: OperationRecord,
    replayed: bool,
    subscribed: Option<SettledSubscription>,
) -> HttpResponse {
    let waited = requested_wait(request);
    let record = match waited {
        Some(secs) => {
            let wait = std::time::Duration::from_secs(secs);
            let (settled, store) = (&state.settled, &state.store);
            match subscribed {
                Some(subscription) => {
                    settled
                        .wait_from(subscription, store, agent_id, record, wait)
                        .await
                }
                None => {
                    settled
                        .wait_until_terminal(store, agent_id, record, wait)
                        .await
                }
            }
        }
        None => record,
    };
    operation_response(&record, replayed, waited)
}
