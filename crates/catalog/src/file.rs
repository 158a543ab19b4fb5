//! The catalog file as TOML: plain serde shapes, one per table, that refuse unknown
//! fields. They say what may be written; `validate` decides whether what is written
//! makes sense and turns it into the checked types.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CatalogFile {
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderFile>,
    #[serde(default)]
    pub kinds: BTreeMap<String, KindFile>,
}

/// The same file with each entry left as plain TOML: when `CatalogFile` does not fit,
/// reading each entry on its own tells which kind or provider is at fault.
#[derive(Debug, Deserialize)]
pub(crate) struct CatalogEntries {
    #[serde(default)]
    pub providers: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub kinds: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderFile {
    pub base_url_env: Option<String>,
    pub base_url: Option<String>,
    #[serde(default = "yes")]
    pub keyed_retries_safe: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KindFile {
    pub description: String,
    pub provider: String,
    pub schema: Option<serde_json::Value>,
    pub schema_file: Option<String>,
    pub money: Option<MoneyFile>,
    pub execute: ExecuteFile,
    pub lookup: LookupFile,
    pub response: ResponseFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoneyFile {
    pub amount: String,
    pub currency: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteFile {
    pub method: String,
    pub path: String,
    /// Most idempotent APIs (Stripe's among them) use this name.
    #[serde(default = "idempotency_key")]
    pub idempotency_header: String,
}

fn idempotency_key() -> String {
    "Idempotency-Key".to_owned()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LookupFile {
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResponseFile {
    pub reference: String,
    pub status: String,
    pub succeeded: Vec<StatusValue>,
    #[serde(default)]
    pub failed: Vec<StatusValue>,
    #[serde(default)]
    pub pending: Vec<StatusValue>,
    pub failure_code: Option<String>,
}

/// A status value as written in TOML: a provider's status may be a JSON string, number
/// or bool, and is compared by its text (`200`, `true`, `succeeded`).
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a status: a string, an integer or a bool")]
pub(crate) enum StatusValue {
    Text(String),
    Integer(i64),
    Bool(bool),
}

impl StatusValue {
    pub fn into_text(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Integer(number) => number.to_string(),
            Self::Bool(flag) => flag.to_string(),
        }
    }
}
