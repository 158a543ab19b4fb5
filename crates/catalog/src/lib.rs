//! opgate's catalog of declared operation kinds: any idempotent HTTP API an operator
//! wants agents to use (orders, bookings, provisioning…), declared in a TOML file
//! instead of code. Pure logic plus reading one file: no network, no database.
//!
//! intake, executor and reconciler load it at start (`--catalog FILE` /
//! `OPGATE_CATALOG`); any mistake in it is a [`CatalogError`] naming the file, the kind
//! or provider and the field, and the service refuses to start. No file is
//! [`Catalog::default()`], a catalog without declared kinds.
//!
//! # The file
//!
//! ```toml
//! # A provider that declared kinds call: its base URL, from an environment variable
//! # (read at start; unset and no base_url → the service refuses to start) or literal.
//! [providers.fulfilment]
//! base_url_env = "FULFILMENT_URL"      # either this…
//! base_url = "http://127.0.0.1:9090"   # …or this (base_url_env wins when both are given and it is set)
//! keyed_retries_safe = true            # default true: it deduplicates by the idempotency header
//!
//! [kinds.order]                        # the kind's name: a-z, 0-9, '_'; not "payment" or "refund"
//! description = "Place an order for a customer's items with the fulfilment service."
//! provider = "fulfilment"              # must name a [providers.X]
//! # The body agents send, as a JSON Schema (Draft 2020-12) whose top is "type": "object",
//! # written as a TOML table (or schema_file = "order.schema.json", relative to the
//! # catalog file's directory). Top-level `default`s are applied to absent properties.
//! schema = { type = "object", additionalProperties = false, required = ["customer_id", "sku", "quantity", "total"], properties = { customer_id = { type = "string", minLength = 1 }, sku = { type = "string" }, quantity = { type = "integer", minimum = 1 }, total = { type = ["string", "number"] }, currency = { type = "string", default = "USD" } } }
//! # Optional: the money the operation moves (JSON pointers to top-level properties),
//! # for the agent's limits. The amount is normalised to the currency's minor units.
//! money = { amount = "/total", currency = "/currency" }
//!
//! [kinds.order.execute]
//! method = "POST"                      # POST or PUT; the body is the normalised request
//! path = "/v1/resources/orders"        # may contain {provider_key} or {operation_id}
//! idempotency_header = "Idempotency-Key"   # the default; it carries {provider_key}
//!
//! [kinds.order.lookup]                 # a GET; must contain {provider_key} or {provider_reference}
//! path = "/v1/resources/orders?idempotency_key={provider_key}"
//!
//! [kinds.order.response]               # how a 2xx answer is read
//! reference = "/id"                    # JSON pointer to the provider's id of the object
//! status = "/status"                   # JSON pointer to its state
//! succeeded = ["succeeded"]            # required; the three lists must not overlap
//! failed = ["failed"]
//! pending = ["pending"]
//! failure_code = "/failure_code"       # optional; else the failed status is the code
//! ```
//!
//! Unknown fields are refused. Placeholders are filled percent-encoded ([`fill_path`]).
//! A body is validated by [`DeclaredKind::validate`]: defaults, then every string
//! trimmed, then the schema, then money; its request hash is SHA-256 of the RFC 8785
//! canonical JSON of `{"operation_type": kind, "request": normalised body}`.

mod body;
mod error;
mod file;
mod kind;
mod path;
mod provider;
mod response;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;

pub use error::{BodyError, CatalogError, Item};
pub use kind::{DeclaredKind, ExecuteRequest, LookupRequest, MoneyFields};
pub use path::fill_path;
pub use provider::DeclaredProvider;
pub use response::{Classified, ResponseMapping};

/// The declared kinds and their providers, checked. Empty by default.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    providers: BTreeMap<String, DeclaredProvider>,
    kinds: BTreeMap<String, DeclaredKind>,
}

impl Catalog {
    /// Reads and checks a catalog file, resolving `base_url_env` from the process's
    /// environment. Schema files are found relative to the catalog's directory.
    /// For a service starting: the catalog at `path`, or an empty one without a path. A
    /// mistake is printed on stderr (file, kind, field) and the process exits with 2:
    /// a service must not run with a catalog other than the one it was given.
    pub fn load_at_start(path: Option<&Path>) -> Catalog {
        let Some(path) = path else {
            return Catalog::default();
        };
        match Self::load(path) {
            Ok(catalog) => catalog,
            Err(error) => {
                eprintln!("{error}");
                std::process::exit(2);
            }
        }
    }

    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| CatalogError::Unreadable {
            file: file.clone(),
            cause: error.to_string(),
        })?;
        let base_dir = path.parent().unwrap_or_else(|| Path::new("."));
        Self::parse_with_env(&text, &file, base_dir, &|name| std::env::var(name).ok())
    }

    /// Checks a catalog's text; `file` names it in errors, `env` resolves
    /// `base_url_env` (tests pass their own).
    pub fn parse_with_env(
        text: &str,
        file: &str,
        base_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Catalog, CatalogError> {
        let raw: file::CatalogFile =
            toml::from_str(text).map_err(|error| shape_error(text, file, error))?;
        let mut providers = BTreeMap::new();
        for (name, provider) in raw.providers {
            let provider = provider::check(file, &name, provider, env)?;
            providers.insert(name, provider);
        }
        let mut kinds = BTreeMap::new();
        for (name, kind) in raw.kinds {
            let kind = validate::kind(file, &name, kind, &providers, base_dir)?;
            kinds.insert(name, kind);
        }
        Ok(Catalog { providers, kinds })
    }

    pub fn kind(&self, name: &str) -> Option<&DeclaredKind> {
        self.kinds.get(name)
    }

    /// In name order.
    pub fn kinds(&self) -> impl Iterator<Item = &DeclaredKind> {
        self.kinds.values()
    }

    pub fn provider(&self, name: &str) -> Option<&DeclaredProvider> {
        self.providers.get(name)
    }

    /// In name order.
    pub fn providers(&self) -> impl Iterator<Item = &DeclaredProvider> {
        self.providers.values()
    }
}

/// toml's error (with line and column) for a file that is not TOML or not of the
/// catalog's shape, attributed to the kind or provider at fault when one is.
fn shape_error(text: &str, file: &str, error: toml::de::Error) -> CatalogError {
    let item = toml::from_str::<file::CatalogEntries>(text)
        .ok()
        .and_then(|entries| {
            let bad_provider = entries.providers.into_iter().find_map(|(name, value)| {
                value
                    .try_into::<file::ProviderFile>()
                    .err()
                    .map(|_| Item::Provider(name))
            });
            bad_provider.or_else(|| {
                entries.kinds.into_iter().find_map(|(name, value)| {
                    value
                        .try_into::<file::KindFile>()
                        .err()
                        .map(|_| Item::Kind(name))
                })
            })
        });
    CatalogError::Syntax {
        file: file.to_owned(),
        item,
        message: error.to_string().trim_end().to_owned(),
    }
}
