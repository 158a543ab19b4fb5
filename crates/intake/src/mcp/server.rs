//! The MCP server one request talks to: `tools/list` shows the agent the kinds it may
//! request and its reads; `tools/call` runs them. Registration goes through the same
//! function as `POST /agent/operations/{kind}` (`registration.rs`): same validation,
//! hash, guardrails, group commit and audit. The agent was authenticated (and rate
//! limited) before the request reached the MCP layer (`mcp/mod.rs`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use opgate_domain::{ApiKey, IdempotencyKey};
use opgate_telemetry::propagation;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, Extensions,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tracing::Instrument;
use uuid::Uuid;

use crate::auth::{authenticate_agent_key, AuthenticatedAgent, Reading};
use crate::listing::{list_page, ListRequest};
use crate::mcp::{answers, tools};
use crate::problem::Problem;
use crate::registration::{register, Kind, Registering, Submission};
use crate::wakeups::MAX_WAIT_SECS;
use crate::AppState;

/// What `on_request` carried over from the HTTP request: the agent, and the HTTP
/// server span's trace context (the parent of a tool call that names none itself).
#[derive(Clone)]
pub struct McpCaller {
    /// Read for this request, or remembered (`AuthenticatedAgent::remembered`) for a
    /// message that only registers.
    pub agent: Arc<AuthenticatedAgent>,
    /// The key it presented, to read the agent again.
    pub key: ApiKey,
    pub http_traceparent: Option<String>,
}

const INSTRUCTIONS: &str = "\
opgate carries out business operations (payments, refunds and the other request_* \
tools) exactly once per idempotency_key. Choose each key from the business identifiers \
of the operation, and reuse the SAME key on every retry of that operation: after an \
error, a timeout or a lost answer, calling again with the same key and arguments \
returns the one operation and never repeats it. A new operation needs a new key. An \
operation may still be in progress when a tool returns: follow next.action, and use \
wait_for_operation rather than requesting again.";

#[derive(Clone)]
pub struct OpgateMcp {
    state: web::Data<AppState>,
}

impl OpgateMcp {
    pub fn new(state: web::Data<AppState>) -> Self {
        Self { state }
    }

    async fn call(&self, caller: &McpCaller, name: &str, arguments: JsonObject) -> CallToolResult {
        let answer = match name.strip_prefix(tools::REQUEST_PREFIX) {
            Some(kind) => self.request(caller, kind, arguments).await,
            None => self.read(caller, name, &arguments).await,
        };
        answer.unwrap_or_else(|problem| answers::refusal(&problem))
    }

    /// The tools that read: never on a remembered agent.
    async fn read(
        &self,
        caller: &McpCaller,
        name: &str,
        arguments: &JsonObject,
    ) -> Result<CallToolResult, Problem> {
        let agent = self.agent_as_read(caller).await?;
        let agent = agent.as_ref();
        match name {
            tools::GET_OPERATION => self.get_operation(agent, arguments).await,
            tools::FIND_OPERATION => self.find_operation(agent, arguments).await,
            tools::WAIT_FOR_OPERATION => self.wait_for_operation(agent, arguments).await,
            tools::LIST_OPERATIONS => self.list_operations(agent, arguments).await,
            _ => Err(Problem::unknown_tool(name)),
        }
    }

    /// The caller's agent, read for this request: as it came when it was, else read
    /// again (not counted against its rate limit a second time).
    async fn agent_as_read<'a>(
        &self,
        caller: &'a McpCaller,
    ) -> Result<Cow<'a, AuthenticatedAgent>, Problem> {
        if caller.agent.remembered.is_none() {
            return Ok(Cow::Borrowed(caller.agent.as_ref()));
        }
        let (agent, _) = authenticate_agent_key(
            &caller.key,
            Some(&self.state.limiters),
            &self.state.store,
            None,
            Reading::Again,
        )
        .await?;
        Ok(Cow::Owned(agent))
    }

    /// `request_<kind>`: the arguments less `idempotency_key` are the kind's body. On a
    /// remembered agent, what the registration could not confirm is judged again on a
    /// fresh read, as on the HTTP API.
    async fn request(
        &self,
        caller: &McpCaller,
        kind: &str,
        mut arguments: JsonObject,
    ) -> Result<CallToolResult, Problem> {
        let key = arguments.remove(tools::KEY_ARGUMENT);
        let registered = match self
            .request_as(&caller.agent, kind, key.as_ref(), &arguments)
            .await?
        {
            Registering::Answered(answer) => answer?,
            Registering::ReadAgentAgain => {
                let agent = self.agent_as_read(caller).await?;
                self.request_as(&agent, kind, key.as_ref(), &arguments)
                    .await?
                    .for_agent_read()?
            }
        };
        tracing::Span::current().record(
            "opgate.operation_id",
            registered.record.operation_id.to_string(),
        );
        Ok(answers::operation(&registered.record, registered.replayed))
    }

    async fn request_as(
        &self,
        agent: &AuthenticatedAgent,
        kind: &str,
        key: Option<&Value>,
        arguments: &JsonObject,
    ) -> Result<Registering, Problem> {
        let kind = match Kind::permitted(&self.state.catalog, agent, kind) {
            // A grant added since the agent was remembered is seen on a fresh read.
            Err(problem) if agent.refused_from_memory(&problem) => {
                return Ok(Registering::ReadAgentAgain)
            }
            kind => kind?,
        };
        let key = match key {
            Some(Value::String(key)) => IdempotencyKey::parse(key)
                .map_err(|e| Problem::bad_idempotency_key(format!("idempotency_key: {e}")))?,
            _ => {
                return Err(Problem::bad_idempotency_key(
                    "idempotency_key is required: a string naming this one operation.",
                ))
            }
        };
        require_string_amounts(kind, arguments)?;
        let body = serde_json::to_vec(arguments).map_err(|_| Problem::internal())?;
        let span = tracing::Span::current();
        span.record("opgate.idempotency_key", key.as_str());
        Ok(register(
            &self.state,
            Submission {
                agent,
                kind,
                idempotency_key: &key,
                body: &body,
                existing: None,
                traceparent: propagation::traceparent_of(&span),
            },
        )
        .await)
    }

    async fn get_operation(
        &self,
        agent: &AuthenticatedAgent,
        arguments: &JsonObject,
    ) -> Result<CallToolResult, Problem> {
        let record = self.own_operation(agent, arguments).await?;
        Ok(answers::operation(&record, false))
    }

    async fn find_operation(
        &self,
        agent: &AuthenticatedAgent,
        arguments: &JsonObject,
    ) -> Result<CallToolResult, Problem> {
        let key = string_argument(arguments, tools::KEY_ARGUMENT)?
            .ok_or_else(|| Problem::invalid_body("idempotency_key is required"))?;
        let key = IdempotencyKey::parse(key)
            .map_err(|e| Problem::invalid_body(format!("idempotency_key: {e}")))?;
        let record = self
            .state
            .store
            .find_operation_by_key(&agent.agent_id, key.as_str())
            .await?
            .ok_or_else(Problem::no_operation_for_key)?;
        Ok(answers::operation(&record, false))
    }

    /// Waits on the same LISTEN path as `Prefer: wait`.
    async fn wait_for_operation(
        &self,
        agent: &AuthenticatedAgent,
        arguments: &JsonObject,
    ) -> Result<CallToolResult, Problem> {
        let record = self.own_operation(agent, arguments).await?;
        let secs = match arguments.get("timeout_seconds") {
            None | Some(Value::Null) => MAX_WAIT_SECS,
            Some(value) => value
                .as_u64()
                .filter(|secs| *secs >= 1)
                .ok_or_else(|| {
                    Problem::invalid_body(format!(
                        "timeout_seconds must be a whole number from 1 to {MAX_WAIT_SECS}"
                    ))
                })?
                .min(MAX_WAIT_SECS),
        };
        let record = self
            .state
            .settled
            .wait_until_terminal(
                &self.state.store,
                &agent.agent_id,
                record,
                Duration::from_secs(secs),
            )
            .await;
        Ok(answers::operation(&record, false))
    }

    async fn list_operations(
        &self,
        agent: &AuthenticatedAgent,
        arguments: &JsonObject,
    ) -> Result<CallToolResult, Problem> {
        let limit = match arguments.get("limit") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_i64().unwrap_or(0)),
        };
        let page = list_page(
            &self.state.store,
            &agent.agent_id,
            &ListRequest {
                status: string_argument(arguments, "status")?,
                kind: string_argument(arguments, "kind")?,
                limit,
                cursor: string_argument(arguments, "cursor")?,
            },
        )
        .await?;
        Ok(answers::page(&page))
    }

    async fn own_operation(
        &self,
        agent: &AuthenticatedAgent,
        arguments: &JsonObject,
    ) -> Result<opgate_store::OperationRecord, Problem> {
        let operation_id = string_argument(arguments, "operation_id")?
            .and_then(|id| Uuid::parse_str(id).ok())
            .ok_or_else(Problem::not_found)?;
        self.state
            .store
            .find_operation_for_agent(operation_id, &agent.agent_id)
            .await?
            .ok_or_else(Problem::not_found)
    }
}

/// Tool arguments arrive parsed, numbers through a binary float: an amount must be a
/// string, so that the amount charged is exactly the amount meant.
fn require_string_amounts(kind: Kind<'_>, arguments: &JsonObject) -> Result<(), Problem> {
    let member = match kind {
        Kind::Builtin(_) => "amount".to_owned(),
        Kind::Declared(declared) => match declared.money() {
            Some(money) => money.amount_member(),
            None => return Ok(()),
        },
    };
    match arguments.get(&member) {
        Some(Value::Number(number)) => Err(Problem::invalid_body(format!(
            "{member} must be a decimal string over MCP (\"{number}\"), not a JSON number"
        ))),
        _ => Ok(()),
    }
}

fn string_argument<'a>(arguments: &'a JsonObject, name: &str) -> Result<Option<&'a str>, Problem> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(Problem::invalid_body(format!("{name} must be a string"))),
    }
}

/// The caller `on_request` stored in the HTTP request's extensions.
fn caller_of(extensions: &Extensions) -> Option<McpCaller> {
    extensions
        .get::<http::request::Parts>()?
        .extensions
        .get::<Extensions>()?
        .get::<McpCaller>()
        .cloned()
}

fn unauthenticated() -> ErrorData {
    ErrorData::invalid_request("this request carried no authenticated agent", None)
}

impl ServerHandler for OpgateMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS);
        info.server_info = Implementation::new("opgate", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller_of(&context.extensions).ok_or_else(unauthenticated)?;
        // Boxed, as in `call_tool`: rmcp's per-request task holds the largest of its
        // handlers' futures.
        let agent = Box::pin(self.agent_as_read(&caller))
            .await
            .map_err(|problem| ErrorData::internal_error(problem.title.to_string(), None))?;
        let mut result =
            ListToolsResult::with_all_items(tools::tools_for(&agent, &self.state.catalog));
        // Each agent sees its own tools: no cache may share them.
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&context.extensions).ok_or_else(unauthenticated)?;
        let name = request.name.to_string();
        // A tool call continues the trace its `_meta.traceparent` names, else the HTTP
        // request's (itself continuing any `traceparent` header).
        // (rmcp moves the request's `_meta` into the context.)
        let traceparent = context
            .meta
            .get_traceparent()
            .map(str::to_owned)
            .or_else(|| caller.http_traceparent.clone());
        let span = tracing::info_span!(
            "MCP tool call",
            otel.name = %format!("tools/call {name}"),
            otel.kind = "server",
            rpc.system = "jsonrpc",
            mcp.method.name = "tools/call",
            gen_ai.tool.name = %name,
            opgate.agent_id = %caller.agent.agent_id,
            opgate.operation_id = tracing::field::Empty,
            opgate.idempotency_key = tracing::field::Empty,
        );
        propagation::continue_trace(&span, traceparent.as_deref());
        let arguments = request.arguments.unwrap_or_default();
        // Boxed: rmcp moves the future of each request into a task of its own, and
        // again at every level above it, so it is a pointer rather than the whole
        // registration's state (kilobytes, copied on every move).
        let result = Box::pin(self.call(&caller, &name, arguments))
            .instrument(span)
            .await;
        Ok(result.into())
    }
}
