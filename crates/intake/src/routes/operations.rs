//! `GET /agent/operations/{operation_id}`: an agent reads one of its own operations.
//! Another agent's operation and a malformed id both answer 404, so ids leak nothing.
//! The agent is authenticated before the id is even looked at.

use actix_web::{get, web, HttpRequest, HttpResponse};
use opgate_store::OperationRecord;
use uuid::Uuid;

use crate::auth::authenticate;
use crate::problem::Problem;
use crate::view::{operation_response, OperationView};
use crate::wakeups::requested_wait;
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
    Ok(respond(&request, &state, &agent.agent_id, record, false).await)
}

/// The operation's answer, after waiting for a terminal state when the request asked
/// for it with `Prefer: wait=N`.
pub(crate) async fn respond(
    request: &HttpRequest,
    state: &AppState,
    agent_id: &str,
    record: OperationRecord,
    replayed: bool,
) -> HttpResponse {
    let waited = requested_wait(request);
    let record = match waited {
        Some(secs) => {
            let wait = std::time::Duration::from_secs(secs);
            state
                .settled
                .wait_until_terminal(&state.store, agent_id, record, wait)
                .await
        }
        None => record,
    };
    operation_response(&record, replayed, waited)
}
