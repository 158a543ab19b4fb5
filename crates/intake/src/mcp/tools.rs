//! The tools an agent sees: `request_<kind>` for each kind it may request, and the
//! four reads of its own operations. Descriptions are written for the model that
//! chooses and calls them: what the tool does, how to choose the idempotency key, and
//! that every retry of one operation reuses it.

use std::sync::Arc;

use opgate_catalog::Catalog;
use opgate_domain::BuiltinKind;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};
use utoipa::OpenApi;

use crate::auth::AuthenticatedAgent;
use crate::registration::Kind;
use crate::wakeups::MAX_WAIT_SECS;

pub const REQUEST_PREFIX: &str = "request_";
pub const GET_OPERATION: &str = "get_operation";
pub const FIND_OPERATION: &str = "find_operation";
pub const WAIT_FOR_OPERATION: &str = "wait_for_operation";
pub const LIST_OPERATIONS: &str = "list_operations";

/// The argument every `request_<kind>` tool adds to the kind's body.
pub const KEY_ARGUMENT: &str = "idempotency_key";

/// What every `request_<kind>` tool tells the model about keys and retries.
const RETRY_RULES: &str = "\
The idempotency_key names this one operation. Build it from the business identifiers \
of the operation (for example {example}), never at random and never from the time. \
If this call fails, times out, or its answer is lost, call it again with the SAME \
idempotency_key and the same arguments: you get the one operation back and nothing \
happens twice. Never choose a new key to retry. A different operation needs a \
different key. The result's next.action says what to do next: poll (call \
wait_for_operation with its operation_id), wait_for_approval (a human operator must \
approve it first), done, or new_key_required (it failed for good; trying again is a new \
operation with a new key).";

/// Every tool this agent may call, in a stable order.
pub fn tools_for(agent: &AuthenticatedAgent, catalog: &Catalog) -> Vec<Tool> {
    let mut tools: Vec<Tool> = Kind::all(catalog)
        .filter(|kind| agent.policy.permits_operation(kind.name()).is_ok())
        .map(|kind| request_tool(kind))
        .collect();
    tools.extend(read_tools());
    tools
}

fn request_tool(kind: Kind<'_>) -> Tool {
    let (summary, example, body) = match kind {
        Kind::Builtin(BuiltinKind::Payment) => (
            "Charge a customer for one invoice, through the payment provider.".to_owned(),
            "\"payment-<invoice_id>\"",
            builtin_body_schema("PaymentBody"),
        ),
        Kind::Builtin(BuiltinKind::Refund) => (
            "Give back all or part of one of your SUCCEEDED payments (by its operation_id); \
             by default, everything not yet refunded."
                .to_owned(),
            "\"refund-<payment_operation_id>-1\" for its first refund",
            builtin_body_schema("RefundBody"),
        ),
        Kind::Declared(declared) => (
            declared.description().to_owned(),
            "\"<kind>-<the business id it acts on>\"",
            declared.schema().clone(),
        ),
    };
    let example = example.replace("<kind>", kind.name());
    let description = format!(
        "{summary} Registered exactly once per idempotency_key and then carried out by \
         opgate; the result is the operation, whose status may still be in progress. {}",
        RETRY_RULES.replace("{example}", &example)
    );
    Tool::new(
        format!("{REQUEST_PREFIX}{}", kind.name()),
        description,
        Arc::new(with_key_argument(body)),
    )
    .annotate(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(true),
    )
}

/// The kind's body schema with a required `idempotency_key` property.
fn with_key_argument(body: Value) -> JsonObject {
    let mut schema = match body {
        Value::Object(schema) => schema,
        _ => JsonObject::new(),
    };
    schema.insert("type".into(), "object".into());
    let properties = schema
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut properties = properties;
    properties.insert(
        KEY_ARGUMENT.into(),
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^[\\x21-\\x7E]+$",
            "description": "Names this one operation: built from its business identifiers, \
                            the same on every retry of it, different for a different operation."
        }),
    );
    schema.insert("properties".into(), Value::Object(properties));
    let mut required: Vec<Value> = schema
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    required.insert(0, KEY_ARGUMENT.into());
    schema.insert("required".into(), Value::Array(required));
    schema
}

/// A built-in kind's body schema, from the same OpenAPI components that document it.
fn builtin_body_schema(component: &str) -> Value {
    let document = serde_json::to_value(crate::openapi::ApiDoc::openapi()).unwrap_or_default();
    let mut schema = document["components"]["schemas"][component].clone();
    // Amounts are strings over MCP: a JSON number passes through a binary float in
    // most clients, and the amount charged must be the amount meant.
    if let Some(amount) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("amount"))
    {
        *amount = json!({
            "type": "string",
            "pattern": "^[0-9]+(\\.[0-9]+)?$",
            "description": "Decimal amount as a string, e.g. \"250.00\"; no more decimals than the currency allows."
        });
    }
    schema
}

fn read_tools() -> Vec<Tool> {
    let read_only = || {
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false)
    };
    let operation_id = json!({
        "type": "string",
        "format": "uuid",
        "description": "The operation_id a request_* tool returned."
    });
    vec![
        Tool::new(
            GET_OPERATION,
            "Read one of your operations by its operation_id: its status, what happened, and \
             next.action. Reading never changes anything.",
            object_schema(json!({ "operation_id": operation_id }), &["operation_id"]),
        )
        .annotate(read_only()),
        Tool::new(
            FIND_OPERATION,
            "Find the operation you registered under an idempotency_key, without sending \
             the request again: use it when you lost the operation_id, or to check whether \
             an earlier attempt was recorded at all.",
            object_schema(
                json!({ KEY_ARGUMENT: { "type": "string", "minLength": 1, "maxLength": 255 } }),
                &[KEY_ARGUMENT],
            ),
        )
        .annotate(read_only()),
        Tool::new(
            WAIT_FOR_OPERATION,
            format!(
                "Wait until one of your operations has finished (SUCCEEDED or FAILED), for \
                 at most timeout_seconds (1 to {MAX_WAIT_SECS}, default {MAX_WAIT_SECS}), \
                 and return it as it then is. If it has not finished, call this again; \
                 never send the request again with a new key."
            ),
            object_schema(
                json!({
                    "operation_id": operation_id,
                    "timeout_seconds": { "type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECS }
                }),
                &["operation_id"],
            ),
        )
        .annotate(read_only()),
        Tool::new(
            LIST_OPERATIONS,
            "List your operations, newest first, optionally only one status or kind. A \
             result with next_cursor has more: pass it as cursor for the next page.",
            object_schema(
                json!({
                    "status": { "type": "string", "description": "e.g. PENDING, SUCCEEDED, FAILED, UNKNOWN, AWAITING_APPROVAL" },
                    "kind": { "type": "string", "description": "e.g. payment" },
                    "limit": { "type": "integer", "minimum": 1, "maximum": crate::listing::MAX_LIMIT },
                    "cursor": { "type": "string" }
                }),
                &[],
            ),
        )
        .annotate(read_only()),
    ]
}

fn object_schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    Arc::new(match schema {
        Value::Object(schema) => schema,
        _ => JsonObject::new(),
    })
}
