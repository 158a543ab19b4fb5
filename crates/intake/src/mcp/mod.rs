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

use std::borrow::Cow;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::{from_fn, Next};
use actix_web::{web, HttpMessage, ResponseError};
use opgate_telemetry::propagation;
use rmcp_actix_web::transport::{LocalSessionManager, StreamableHttpService};
use serde::Deserialize;

use crate::auth::{authenticate_agent_key, presented_agent_key, Reading};
use crate::body::{read_limited, require_unique_members, MAX_BODY_BYTES};
use crate::problem::Problem;
use crate::AppState;

pub use server::McpCaller;

pub const PATH: &str = "/mcp";

/// A JSON-RPC message wraps a body of at most `MAX_BODY_BYTES` in its envelope.
const MAX_MESSAGE_BYTES: usize = MAX_BODY_BYTES * 4;

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
        .max_request_body_bytes(MAX_MESSAGE_BYTES)
        .on_request_fn(|request, extensions| {
            if let Some(caller) = request.extensions().get::<McpCaller>() {
                extensions.insert(caller.clone());
            }
        })
        .build()
        .scope_with_path(PATH)
        .wrap(from_fn(authenticate_mcp))
}

/// Authenticates (and rate limits) every request to `/mcp` as the HTTP API does, reads
/// its message, and hands the agent to the MCP layer; a refusal is the HTTP API's
/// problem answer.
///
/// An agent this intake read recently is not read again for a message that only
/// registers (`tools/call` of a `request_<kind>` tool): the registration's statement
/// confirms its row, as on the HTTP API (`Reading::UnlessRemembered`). Any other message
/// reads the agent, so that a revoked key stops reading at once.
async fn authenticate_mcp(
    mut request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let Some(state) = request.app_data::<web::Data<AppState>>().cloned() else {
        return Err(actix_web::error::ErrorInternalServerError("no state"));
    };
    let key = match presented_agent_key(request.request(), &state.store).await {
        Ok(key) => key,
        Err(problem) => return Ok(refuse(request, &problem)),
    };
    let limiters = Some(&state.limiters);
    let agent = match authenticate_agent_key(
        &key,
        limiters,
        &state.store,
        None,
        Reading::UnlessRemembered,
    )
    .await
    {
        Ok((agent, _)) => agent,
        Err(problem) => return Ok(refuse(request, &problem)),
    };
    // The message is read here, within the body timeout and limit, and a member named
    // twice is refused as on the HTTP API: the SDK's parser would keep the last silently.
    let payload = request.take_payload();
    let body = match read_limited(request.request(), payload, MAX_MESSAGE_BYTES)
        .await
        .and_then(|body| require_unique_members(&body).map(|()| body))
    {
        Ok(body) => body,
        Err(problem) => return Ok(refuse(request, &problem)),
    };
    let agent = if agent.remembered.is_some() && !only_registers(&body) {
        match authenticate_agent_key(&key, limiters, &state.store, None, Reading::Again).await {
            Ok((agent, _)) => agent,
            Err(problem) => return Ok(refuse(request, &problem)),
        }
    } else {
        agent
    };
    request.set_payload(actix_web::dev::Payload::from(body));
    let span = tracing::Span::current();
    span.record("opgate.agent_id", agent.agent_id.as_str());
    request.extensions_mut().insert(McpCaller {
        agent: Arc::new(agent),
        key,
        http_traceparent: propagation::traceparent_of(&span),
    });
    Ok(next.call(request).await?.map_into_left_body())
}

/// Whether the JSON-RPC message is one `tools/call` of a `request_<kind>` tool: the only
/// message answered on a remembered agent. rmcp parses the same bytes to dispatch it, and
/// a tool call on a remembered agent is checked again there (`server.rs`).
fn only_registers(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
    }
    match serde_json::from_slice::<Message<'_>>(body) {
        Ok(Message {
            method: Some(method),
            params: Some(Params { name: Some(name) }),
        }) => method == "tools/call" && name.starts_with(tools::REQUEST_PREFIX),
        _ => false,
    }
}

fn refuse<B>(
    request: ServiceRequest,
    problem: &Problem,
) -> ServiceResponse<actix_web::body::EitherBody<B>> {
    request
        .into_response(problem.error_response())
        .map_into_right_body()
}
