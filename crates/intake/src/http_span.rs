//! The server span of every API request, following the HTTP semantic conventions
//! (`http.request.method`, `http.route`, `url.path`, `http.response.status_code`),
//! continuing the caller's W3C `traceparent` when it sends one; and the request
//! counter by outcome. Headers and bodies are never recorded. Probes (`/healthz`,
//! `/readyz`) get neither span nor count.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use opgate_telemetry::{metrics, propagation};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

const PROBES: [&str; 2] = ["/healthz", "/readyz"];

pub async fn trace_request(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    if PROBES.contains(&request.path()) {
        return next.call(request).await;
    }
    let route = request
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = request.method().as_str().to_owned();
    let span = tracing::info_span!(
        "HTTP request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = %route,
        url.path = %request.path(),
        url.scheme = "http",
        http.response.status_code = tracing::field::Empty,
        opgate.agent_id = tracing::field::Empty,
        opgate.operation_id = tracing::field::Empty,
        opgate.idempotency_key = tracing::field::Empty,
        opgate.outcome = tracing::field::Empty,
    );
    let caller = propagation::context_from_headers(
        request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?))),
    );
    let _ = span.set_parent(caller);

    let response = next.call(request).instrument(span.clone()).await?;
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    // An MCP request's HTTP answer is 200 whatever the tool did: "mcp", not "created".
    let outcome = if route == crate::mcp::PATH && (200..300).contains(&status) {
        "mcp"
    } else {
        outcome(&method, status, replayed)
    };
    span.record("http.response.status_code", status);
    span.record("opgate.outcome", outcome);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
    metrics().intake_request(route_label(&route), outcome, status);
    Ok(response)
}

fn outcome(method: &str, status: u16, replayed: bool) -> &'static str {
    match status {
        200..=299 if replayed => "replayed",
        200..=299 if method == "POST" => "created",
        200..=299 => "read",
        409 => "conflict",
        503 => "unavailable",
        400..=499 => "rejected",
        _ => "error",
    }
}

/// Known route patterns (`crate::ROUTES`, the routes intake serves), so that a label
/// never carries what a client typed.
fn route_label(route: &str) -> &'static str {
    if route == crate::mcp::PATH {
        return crate::mcp::PATH;
    }
    crate::ROUTES
        .iter()
        .find(|(_, pattern)| *pattern == route)
        .map_or("other", |(_, pattern)| pattern)
}

#[cfg(test)]
mod tests {
    use super::{outcome, route_label};

    #[test]
    fn outcomes_follow_status_and_replay() {
        assert_eq!(outcome("POST", 202, false), "created");
        assert_eq!(outcome("POST", 202, true), "replayed");
        assert_eq!(outcome("POST", 200, true), "replayed");
        assert_eq!(outcome("GET", 200, false), "read");
        assert_eq!(outcome("POST", 409, false), "conflict");
        assert_eq!(outcome("POST", 422, false), "rejected");
        assert_eq!(outcome("POST", 503, false), "unavailable");
        assert_eq!(outcome("POST", 500, false), "error");
    }

    #[test]
    fn labels_are_route_patterns_never_paths() {
        assert_eq!(
            route_label("/agent/operations/{kind}"),
            "/agent/operations/{kind}"
        );
        assert_eq!(route_label("/admin/operations"), "/admin/operations");
        assert_eq!(route_label("/mcp"), "/mcp");
        assert_eq!(route_label("unmatched"), "other");
        assert_eq!(route_label("/agent/operations/payment"), "other");
    }
}
