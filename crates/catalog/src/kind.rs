//! A declared kind as the services use it once the catalog has checked it: its body
//! schema (compiled once), the request that executes it, the request that looks it up
//! and how the answer is read. Validating a body is in `body.rs`.

use opgate_domain::KindName;

use crate::response::ResponseMapping;

/// One kind from the catalog, checked at load.
#[derive(Debug, Clone)]
pub struct DeclaredKind {
    pub(crate) name: KindName,
    pub(crate) description: String,
    pub(crate) provider: String,
    pub(crate) schema: serde_json::Value,
    pub(crate) validator: jsonschema::Validator,
    /// Top-level `default`s of the schema, applied to absent properties before anything
    /// else, so that leaving out a defaulted field and sending its default hash alike.
    pub(crate) defaults: Vec<(String, serde_json::Value)>,
    pub(crate) money: Option<MoneyFields>,
    pub(crate) execute: ExecuteRequest,
    pub(crate) lookup: LookupRequest,
    pub(crate) response: ResponseMapping,
}

/// Where the money an operation moves is in its body (JSON pointers, each naming a
/// top-level property), for the agent's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoneyFields {
    pub amount: String,
    pub currency: String,
}

impl MoneyFields {
    /// The name of the top-level member holding the amount: the pointer "/total" names
    /// "total" (with `~1` and `~0` unescaped).
    pub fn amount_member(&self) -> String {
        self.amount
            .trim_start_matches('/')
            .replace("~1", "/")
            .replace("~0", "~")
    }
}

/// The request that executes an operation: the body is the normalised request, the
/// idempotency header carries the provider key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteRequest {
    /// `POST` or `PUT`.
    pub method: String,
    /// A path template (see [`crate::fill_path`]), relative to the provider's base URL.
    pub path: String,
    pub idempotency_header: String,
}

/// The `GET` that asks the provider what became of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupRequest {
    /// A path template containing `{provider_key}` or `{provider_reference}`.
    pub path: String,
}

impl DeclaredKind {
    pub fn name(&self) -> &KindName {
        &self.name
    }

    /// What the operation does, written for the AI model that chooses it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The name of the `[providers.X]` that executes it.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The body schema as JSON (Draft 2020-12), for OpenAPI and MCP.
    pub fn schema(&self) -> &serde_json::Value {
        &self.schema
    }

    pub fn money(&self) -> Option<&MoneyFields> {
        self.money.as_ref()
    }

    pub fn execute(&self) -> &ExecuteRequest {
        &self.execute
    }

    pub fn lookup(&self) -> &LookupRequest {
        &self.lookup
    }

    pub fn response(&self) -> &ResponseMapping {
        &self.response
    }
}
