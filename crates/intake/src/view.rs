//! The operation as agents see it (POST and GET share it), and how its state maps to
//! an HTTP status: 200 once terminal, 202 while anything may still change.

use actix_web::http::{header, StatusCode};
use actix_web::HttpResponse;
use chrono::{DateTime, Utc};
use opgate_domain::NextAction;
use opgate_store::OperationRecord;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct OperationView {
    pub operation_id: Uuid,
    pub operation_type: String,
    /// PENDING, IN_PROGRESS, SUCCEEDED, FAILED, UNKNOWN, RECONCILING or MANUAL_REVIEW.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_reference: Option<String>,
    pub attempts: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Plain guidance for the agent.
    pub message: String,
    /// The next step, machine-readable: an agent never has to parse `message`.
    pub next: NextStep,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NextStep {
    /// poll (not settled: read it again, never re-submit), wait_for_approval (an
    /// operator must approve it first), done, or new_key_required (failed for good:
    /// another attempt is a new operation with a new key).
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_url: Option<String>,
    /// Always true: a retry of this same request must carry the same Idempotency-Key,
    /// and is answered with this operation.
    pub same_key_on_retry: bool,
}

impl NextStep {
    fn of(record: &OperationRecord) -> Self {
        let action = record.status.next_action();
        let polling = matches!(action, NextAction::Poll | NextAction::WaitForApproval);
        Self {
            action: action.as_str(),
            retry_after_seconds: record.status.check_again_after_secs(),
            poll_url: polling.then(|| location_of(record)),
            same_key_on_retry: true,
        }
    }
}

impl From<&OperationRecord> for OperationView {
    fn from(record: &OperationRecord) -> Self {
        Self {
            operation_id: record.operation_id,
            operation_type: record.operation_type.clone(),
            status: record.status.as_str().to_owned(),
            provider_reference: record.provider_reference.clone(),
            attempts: record.attempts,
            last_error: record.last_error.clone(),
            created_at: record.created_at,
            updated_at: record.updated_at,
            message: record.status.agent_message().to_owned(),
            next: NextStep::of(record),
        }
    }
}

pub fn location_of(record: &OperationRecord) -> String {
    format!("/agent/operations/{}", record.operation_id)
}

/// `waited`: the `wait=N` preference that was applied, echoed in `Preference-Applied`.
pub fn operation_response(
    record: &OperationRecord,
    replayed: bool,
    waited: Option<u64>,
) -> HttpResponse {
    let status = if record.status.is_terminal() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let mut response = HttpResponse::build(status);
    response.insert_header((header::LOCATION, location_of(record)));
    if replayed {
        response.insert_header(("Idempotent-Replayed", "true"));
    }
    if let Some(secs) = record.status.check_again_after_secs() {
        response.insert_header((header::RETRY_AFTER, secs));
    }
    if let Some(secs) = waited {
        response.insert_header(("Preference-Applied", format!("wait={secs}")));
    }
    response.json(OperationView::from(record))
}
