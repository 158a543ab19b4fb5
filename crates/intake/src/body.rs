//! Reading a JSON request body: content type first, then size (checked against
//! `Content-Length` before reading, and again while reading), then syntax.

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use futures_util::StreamExt;

use crate::problem::Problem;

pub const MAX_BODY_BYTES: usize = 16 * 1024;

pub fn require_json_content_type(request: &HttpRequest) -> Result<(), Problem> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Problem::unsupported_media_type())
    }
}

/// Reads at most `MAX_BODY_BYTES` and parses it as JSON (any shape).
pub async fn read_json(
    request: &HttpRequest,
    mut payload: web::Payload,
) -> Result<serde_json::Value, Problem> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES) {
        return Err(Problem::too_large(MAX_BODY_BYTES));
    }
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| Problem::malformed_json(format!("could not read body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(Problem::too_large(MAX_BODY_BYTES));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body)
        .map_err(|e| Problem::malformed_json(format!("body is not valid JSON: {e}")))
}

/// For routes that take `web::Json`: the same limit and the same problem answers as
/// the payment route.
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_BODY_BYTES)
        .error_handler(|error, _request| {
            use actix_web::error::JsonPayloadError;
            let problem = match &error {
                JsonPayloadError::ContentType => Problem::unsupported_media_type(),
                JsonPayloadError::Overflow { .. }
                | JsonPayloadError::OverflowKnownLength { .. } => {
                    Problem::too_large(MAX_BODY_BYTES)
                }
                JsonPayloadError::Deserialize(e) if e.is_data() => {
                    Problem::invalid_body(e.to_string())
                }
                other => Problem::malformed_json(other.to_string()),
            };
            problem.into()
        })
}
