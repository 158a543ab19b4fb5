//! RFC 9457 problem details: every error intake returns is one of these, as
//! `application/problem+json`, with the status codes of the README.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use opgate_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// Seconds an agent should wait before retrying when the database is unavailable.
const UNAVAILABLE_RETRY_AFTER_SECS: u32 = 1;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// A URI that identifies the kind of problem.
    #[serde(rename = "type")]
    pub problem_type: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    /// The `Allow` header of a 405: the methods the path does answer.
    #[serde(skip)]
    allow: Option<String>,
    /// A 429's headers: (Retry-After seconds, RateLimit, RateLimit-Policy).
    #[serde(skip)]
    rate_limit: Option<Box<(u64, String, String)>>,
    /// A 403 budget-exceeded's `Retry-After`: when headroom comes back.
    #[serde(skip)]
    retry_after: Option<u64>,
}

impl Problem {
    fn new(status: StatusCode, slug: &str, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            problem_type: format!("urn:opgate:problem:{slug}"),
            title,
            status: status.as_u16(),
            detail: detail.into(),
            allow: None,
            rate_limit: None,
            retry_after: None,
        }
    }

    /// Over the agent's rate limit: nothing was read or written. `wait` is when one
    /// more request will be allowed.
    pub fn rate_limited(limit: opgate_domain::RateLimit, wait: std::time::Duration) -> Self {
        let retry_after = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let mut problem = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too many requests",
            format!(
                "This agent may make {limit} requests (bursts of {}); retry after {retry_after} s \
                 with the same Idempotency-Key. Nothing was recorded.",
                limit.burst()
            ),
        );
        // draft-ietf-httpapi-ratelimit-headers: the policy, and what is left of it now.
        problem.rate_limit = Some(Box::new((
            retry_after,
            format!("\"agent\";r=0;t={retry_after}"),
            format!("\"agent\";q={};w={}", limit.count(), limit.window_secs()),
        )));
        problem
    }

    pub fn bad_idempotency_key(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-idempotency-key",
            "Missing or invalid Idempotency-Key",
            detail,
        )
    }

    /// A header that must be sent at most once was sent more than once: which of the
    /// values counts is exactly what a proxy and intake could disagree on.
    pub fn duplicate_header(name: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "duplicate-header",
            "Repeated header",
            format!(
                "The {name} header was sent more than once; send it exactly once. \
                 Nothing was recorded."
            ),
        )
    }

    /// A query string intake cannot read: an unknown or repeated parameter, or a value
    /// out of its range.
    pub fn bad_query(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-query",
            "Invalid query string",
            detail,
        )
    }

    pub fn malformed_json(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "Malformed JSON body",
            detail,
        )
    }

    /// One answer for a missing, unknown or revoked key: nothing about which it was.
    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "Authentication required",
            "Send a valid, active agent key as 'Authorization: Bearer <key>'.",
        )
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Operation not permitted for this agent",
            detail,
        )
    }

    /// A valid key of the wrong kind: an operator's on the agent API, or an agent's on
    /// the admin API.
    pub fn wrong_key_kind(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "wrong-key-kind",
            "This key cannot be used here",
            detail,
        )
    }

    pub fn not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Operation not found",
            "No operation with this id exists for this agent.",
        )
    }

    /// No operation of this agent was registered under this idempotency key.
    pub fn no_operation_for_key() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Operation not found",
            "No operation of this agent was registered under this idempotency key.",
        )
    }

    /// An MCP tool this server does not have.
    pub fn unknown_tool(name: &str) -> Self {
        let shown: String = name.chars().take(100).collect();
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown-tool",
            "No such tool",
            format!("There is no tool {shown:?} for this agent; tools/list names those there are."),
        )
    }

    /// No route has this path (not to be confused with `not_found`: the route exists,
    /// the operation does not).
    pub fn route_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "route-not-found",
            "No such route",
            "Nothing is served at this path; GET /openapi.json lists the routes.",
        )
    }

    /// The path is served, but not with this method; `allowed` goes in `Allow`.
    pub fn method_not_allowed(allowed: &[&str]) -> Self {
        let allow = allowed.join(", ");
        let mut problem = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            format!("This path answers only {allow}. Nothing was recorded."),
        );
        problem.allow = Some(allow);
        problem
    }

    pub fn unknown_kind(kind: &str) -> Self {
        let shown: String = kind.chars().take(64).collect();
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown-kind",
            "No such operation kind",
            format!("There is no operation kind {shown:?}; GET /openapi.json lists the kinds."),
        )
    }

    pub fn payment_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Payment not found",
            "No payment with this payment_operation_id exists for this agent.",
        )
    }

    pub fn payment_not_refundable(status: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "payment-not-refundable",
            "Payment cannot be refunded",
            format!("The payment is {status}; only a SUCCEEDED payment can be refunded. Nothing was recorded."),
        )
    }

    pub fn refund_exceeds_payment(refundable: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "refund-exceeds-payment",
            "Refund exceeds the payment",
            format!("At most {refundable} of this payment remains refundable (refunds that have not failed count). Nothing was recorded."),
        )
    }

    /// 422, as draft-ietf-httpapi-idempotency-key-header says for a key reused with
    /// another payload (409 is kept for conflicts of state).
    /// Over the agent's 24-hour budget; `retry_after`: seconds until the oldest spending
    /// leaves the window.
    pub fn budget_exceeded(budget: &str, currency: &str, retry_after: Option<u64>) -> Self {
        let mut problem = Self::new(
            StatusCode::FORBIDDEN,
            "budget-exceeded",
            "Spend budget exceeded",
            format!(
                "This would take the agent past its budget of {budget} {currency} per 24 hours. \
                 Nothing was recorded."
            ),
        );
        problem.retry_after = retry_after;
        problem
    }

    pub fn key_reused() -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
            "Idempotency-Key reused with a different request",
            "This Idempotency-Key already names a different request from this agent. \
             Use a new key for a new operation.",
        )
    }

    pub fn not_in_review(status: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "not-in-manual-review",
            "Operation is not awaiting review",
            format!("The operation is {status}, not MANUAL_REVIEW; nothing was changed."),
        )
    }

    /// An approval or rejection of an operation that is not AWAITING_APPROVAL (decided
    /// already, or expired).
    pub fn not_awaiting_approval(status: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "not-awaiting-approval",
            "Operation is not awaiting approval",
            format!("The operation is {status}, not AWAITING_APPROVAL; nothing was changed."),
        )
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
            format!("The request body must be at most {limit} bytes."),
        )
    }

    /// The body did not arrive in time: the connection is closed after this answer.
    pub fn request_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request-timeout",
            "Request body not received in time",
            "The request body did not arrive in time. Nothing was recorded; retry with \
             the same Idempotency-Key.",
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "Send the body as 'Content-Type: application/json'.",
        )
    }

    pub fn invalid_body(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
            "Invalid request",
            detail,
        )
    }

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database-unavailable",
            "Service temporarily unavailable",
            "The database is unreachable. Nothing was recorded; send the same request \
             again (with the same Idempotency-Key, if it has one) after Retry-After.",
        )
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "An unexpected error occurred; it has been logged. Sending the same request \
             again, unchanged, is safe.",
        )
    }
}

impl Problem {
    /// The problem's slug: its `type` without the `urn:opgate:problem:` prefix.
    pub fn slug(&self) -> &str {
        self.problem_type
            .strip_prefix("urn:opgate:problem:")
            .unwrap_or(&self.problem_type)
    }

    /// When a retry may succeed, in seconds, where the problem says so (the
    /// `Retry-After` of its HTTP answer).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self.status {
            429 => self.rate_limit.as_deref().map(|(secs, _, _)| *secs),
            503 => Some(u64::from(UNAVAILABLE_RETRY_AFTER_SECS)),
            _ => self.retry_after,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.title)
    }
}

impl ResponseError for Problem {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        response.content_type("application/problem+json");
        match self.status {
            401 => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            403 => {
                if let Some(secs) = self.retry_after {
                    response.insert_header((header::RETRY_AFTER, secs));
                }
            }
            405 => {
                if let Some(allow) = &self.allow {
                    response.insert_header((header::ALLOW, allow.as_str()));
                }
            }
            // The rest of the body may still be on its way: do not read it.
            408 => {
                response.force_close();
            }
            429 => {
                if let Some((retry_after, remaining, policy)) = self.rate_limit.as_deref() {
                    response.insert_header((header::RETRY_AFTER, *retry_after));
                    response.insert_header(("RateLimit", remaining.as_str()));
                    response.insert_header(("RateLimit-Policy", policy.as_str()));
                }
            }
            503 => {
                response.insert_header((header::RETRY_AFTER, UNAVAILABLE_RETRY_AFTER_SECS));
            }
            _ => {}
        }
        response.json(self)
    }
}

impl From<StoreError> for Problem {
    fn from(error: StoreError) -> Self {
        if error.is_unavailable() {
            tracing::warn!(error = %error, "database unavailable");
            Problem::unavailable()
        } else {
            tracing::error!(error = %error, "store error");
            Problem::internal()
        }
    }
}
