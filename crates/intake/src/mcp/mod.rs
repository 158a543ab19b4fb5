//! MCP for agents at `/mcp` on intake's own listener: the Model Context Protocol over
//! streamable HTTP, with the official Rust SDK (`rmcp`) behind `rmcp-actix-web`, the
//! SDK's actix-web bridge (kept in step with `rmcp`'s releases, so the transport's
//! protocol rules are the SDK's own, not a copy of ours).
//!
//! MCP is a second door, not a second implementation: every HTTP request to `/mcp` is
//! authenticated and rate limited exactly as the HTTP API's are, before the MCP layer
//! sees it (401 and 429 are HTTP answers); tools register through the one registration
//! path. The server is stateless (no MCP session is kept between requests), so any
//! intake replica can answer any request.

mod answers;
mod server;
mod tools;

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::{from_fn, Next};
use actix_web::{web, HttpMessage, ResponseError};
use opgate_telemetry::propagation;
use rmcp_actix_web::transport::{LocalSessionManager, StreamableHttpService};

use crate::auth::authenticate;
use crate::body::MAX_BODY_BYTES;
use crate::AppState;

pub use server::McpCaller;

pub const PATH: &str = "/mcp";

/// The `/mcp` scope: authentication in front of the SDK's streamable HTTP transport.
pub fn service(
    state: web::Data<AppState>,
) -> actix_web::Scope<
    impl actix_web::dev::ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let factory_state = state.clone();
    StreamableHttpService::builder()
        .service_factory(Arc::new(move || {
            Ok(server::OpgateMcp::new(factory_state.clone()))
        }))
        .session_manager(Arc::new(LocalSessionManager::default()))
        // Stateless: nothing ties a client to one replica.
        .stateful_mode(false)
        .json_response(true)
        // A request needs an agent key, which a DNS-rebinding page does not have; so
        // any Host is accepted and deployments need not list their hostnames.
        .allowed_hosts(Vec::new())
        .max_request_body_bytes(MAX_BODY_BYTES * 4)
        .on_request_fn(|request, extensions| {
            if let Some(caller) = request.extensions().get::<McpCaller>() {
                extensions.insert(caller.clone());
            }
        })
        .build()
        .scope_with_path(PATH)
        .wrap(from_fn(authenticate_mcp))
}

/// Authenticates (and rate limits) every request to `/mcp` as the HTTP API does, and
/// hands the agent to the MCP layer; a refusal is the HTTP API's problem answer.
async fn authenticate_mcp(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let Some(state) = request.app_data::<web::Data<AppState>>().cloned() else {
        return Err(actix_web::error::ErrorInternalServerError("no state"));
    };
    match authenticate(request.request(), &state.store).await {
        Ok(agent) => {
            tracing::Span::current().record("opgate.agent_id", agent.agent_id.as_str());
            let caller = McpCaller {
                agent: Arc::new(agent),
                http_traceparent: propagation::traceparent_of(&tracing::Span::current()),
            };
            request.extensions_mut().insert(caller);
            Ok(next.call(request).await?.map_into_left_body())
        }
        Err(problem) => Ok(request
            .into_response(problem.error_response())
            .map_into_right_body()),
    }
}
