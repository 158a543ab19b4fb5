//! Load-time checks of a kind: turns its TOML shape (`file.rs`) into a `DeclaredKind`,
//! or the first `CatalogError` naming the file, the kind and the field. Every mistake
//! a kind can hold is caught here, at start, never on a request.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use opgate_domain::{BuiltinKind, KindName};
use serde_json::Value;

use crate::error::{Blame, CatalogError, Item};
use crate::file::KindFile;
use crate::kind::{DeclaredKind, ExecuteRequest, LookupRequest, MoneyFields};
use crate::path::{placeholders, OPERATION_ID, PROVIDER_KEY, PROVIDER_REFERENCE};
use crate::provider::DeclaredProvider;
use crate::response::ResponseMapping;

pub(crate) fn kind(
    file: &str,
    name: &str,
    raw: KindFile,
    providers: &BTreeMap<String, DeclaredProvider>,
    base_dir: &Path,
) -> Result<DeclaredKind, CatalogError> {
    let blame = Blame {
        file,
        item: Item::Kind(name.to_owned()),
    };
    let kind_name = KindName::parse(name).map_err(|error| blame.at("name", error.to_string()))?;
    if BuiltinKind::parse(name).is_some() {
        return Err(blame.at("name", "is a built-in kind; choose another name"));
    }
    let description = raw.description.trim().to_owned();
    if description.is_empty() {
        return Err(blame.at("description", "must say what the operation does"));
    }
    if !providers.contains_key(&raw.provider) {
        return Err(blame.at(
            "provider",
            format!("no [providers.{}] is declared", raw.provider),
        ));
    }

    let schema = match (raw.schema, raw.schema_file) {
        (Some(schema), None) => schema,
        (None, Some(relative)) => read_schema_file(&blame, base_dir, &relative)?,
        (Some(_), Some(_)) => {
            return Err(blame.at("schema", "give schema or schema_file, not both"))
        }
        (None, None) => return Err(blame.at("schema", "is required (or schema_file)")),
    };
    let validator = compile_schema(&blame, &schema)?;
    let properties = schema.get("properties").and_then(Value::as_object);
    let defaults = properties
        .into_iter()
        .flatten()
        .filter_map(|(name, property)| Some((name.clone(), property.get("default")?.clone())))
        .collect();

    let money = match raw.money {
        None => None,
        Some(money) => {
            for (field, pointer) in [
                ("money.amount", &money.amount),
                ("money.currency", &money.currency),
            ] {
                let property =
                    top_level_property(pointer).map_err(|message| blame.at(field, message))?;
                if !properties.is_some_and(|properties| properties.contains_key(&property)) {
                    return Err(blame.at(
                        field,
                        format!(
                            "{pointer:?} must name a property in the schema's top-level properties"
                        ),
                    ));
                }
            }
            Some(MoneyFields {
                amount: money.amount,
                currency: money.currency,
            })
        }
    };

    let method = raw.execute.method.trim().to_ascii_uppercase();
    if method != "POST" && method != "PUT" {
        return Err(blame.at(
            "execute.method",
            format!("{:?} is not POST or PUT", raw.execute.method),
        ));
    }
    let execute_placeholders =
        placeholders(&raw.execute.path).map_err(|message| blame.at("execute.path", message))?;
    for placeholder in execute_placeholders {
        if placeholder == PROVIDER_REFERENCE {
            return Err(blame.at(
                "execute.path",
                "{provider_reference} is not known before the operation is executed",
            ));
        }
        check_placeholder(&blame, "execute.path", placeholder)?;
    }
    let header = raw.execute.idempotency_header.trim();
    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
        return Err(blame.at(
            "execute.idempotency_header",
            format!("{header:?} is not an HTTP header name"),
        ));
    }

    let lookup_placeholders =
        placeholders(&raw.lookup.path).map_err(|message| blame.at("lookup.path", message))?;
    for placeholder in &lookup_placeholders {
        check_placeholder(&blame, "lookup.path", placeholder)?;
    }
    if !lookup_placeholders
        .iter()
        .any(|p| *p == PROVIDER_KEY || *p == PROVIDER_REFERENCE)
    {
        return Err(blame.at(
            "lookup.path",
            "must contain {provider_key} or {provider_reference}, to find the operation's object",
        ));
    }

    let response = response(&blame, raw.response)?;
    Ok(DeclaredKind {
        name: kind_name,
        description,
        provider: raw.provider,
        schema,
        validator,
        defaults,
        money,
        execute: ExecuteRequest {
            method,
            path: raw.execute.path,
            idempotency_header: header.to_owned(),
        },
        lookup: LookupRequest {
            path: raw.lookup.path,
        },
        response,
    })
}

fn read_schema_file(
    blame: &Blame<'_>,
    base_dir: &Path,
    relative: &str,
) -> Result<Value, CatalogError> {
    let path = base_dir.join(relative);
    let text = std::fs::read_to_string(&path).map_err(|error| {
        blame.at(
            "schema_file",
            format!("cannot read {}: {error}", path.display()),
        )
    })?;
    serde_json::from_str(&text).map_err(|error| {
        blame.at(
            "schema_file",
            format!("{} is not JSON: {error}", path.display()),
        )
    })
}

/// The schema must be a valid Draft 2020-12 schema of an object. It is compiled
/// offline: a `$ref` to anything outside the schema is refused, never fetched.
fn compile_schema(
    blame: &Blame<'_>,
    schema: &Value,
) -> Result<jsonschema::Validator, CatalogError> {
    if let Err(error) = jsonschema::draft202012::meta::validate(schema) {
        let path = error.instance_path().as_str();
        let place = if path.is_empty() {
            String::new()
        } else {
            format!("at {path}: ")
        };
        return Err(blame.at("schema", format!("{place}{error}")));
    }
    if schema.get("type") != Some(&Value::from("object")) {
        return Err(blame.at(
            "schema",
            "must have \"type\": \"object\" at the top: a body is a JSON object",
        ));
    }
    jsonschema::draft202012::options()
        .offline()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|error| blame.at("schema", error.to_string()))
}

fn check_placeholder(
    blame: &Blame<'_>,
    field: &str,
    placeholder: &str,
) -> Result<(), CatalogError> {
    if [PROVIDER_KEY, OPERATION_ID, PROVIDER_REFERENCE].contains(&placeholder) {
        Ok(())
    } else {
        Err(blame.at(
            field,
            format!("{{{placeholder}}} is not a placeholder: use {{provider_key}}, {{operation_id}} or {{provider_reference}}"),
        ))
    }
}

/// RFC 6901 syntax: empty (the whole document), or '/'-separated tokens in which '~'
/// is only ever `~0` or `~1`.
fn check_pointer(pointer: &str) -> Result<(), String> {
    let bad =
        || format!("{pointer:?} is not a JSON pointer (\"\" or \"/a/b\", with ~0 and ~1 escapes)");
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(bad());
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(bad());
        }
    }
    Ok(())
}

/// The property a one-token pointer names (`/total` → `total`).
fn top_level_property(pointer: &str) -> Result<String, String> {
    check_pointer(pointer)?;
    match pointer.strip_prefix('/') {
        Some(token) if !token.contains('/') => Ok(token.replace("~1", "/").replace("~0", "~")),
        _ => Err(format!(
            "{pointer:?} must name a top-level property, like \"/total\""
        )),
    }
}

fn response(
    blame: &Blame<'_>,
    raw: crate::file::ResponseFile,
) -> Result<ResponseMapping, CatalogError> {
    check_pointer(&raw.reference).map_err(|message| blame.at("response.reference", message))?;
    check_pointer(&raw.status).map_err(|message| blame.at("response.status", message))?;
    if let Some(pointer) = &raw.failure_code {
        check_pointer(pointer).map_err(|message| blame.at("response.failure_code", message))?;
    }
    let texts = |values: Vec<crate::file::StatusValue>| -> Vec<String> {
        values.into_iter().map(|value| value.into_text()).collect()
    };
    let (succeeded, failed, pending) =
        (texts(raw.succeeded), texts(raw.failed), texts(raw.pending));
    if succeeded.is_empty() {
        return Err(blame.at("response.succeeded", "must list at least one status"));
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (list, values) in [
        ("succeeded", &succeeded),
        ("failed", &failed),
        ("pending", &pending),
    ] {
        let distinct: BTreeSet<&str> = values.iter().map(String::as_str).collect();
        for value in distinct {
            if let Some(other) = seen.insert(value, list) {
                return Err(blame.at(
                    &format!("response.{list}"),
                    format!("{value:?} is also in response.{other}: a status means one outcome"),
                ));
            }
        }
    }
    Ok(ResponseMapping {
        reference: raw.reference,
        status: raw.status,
        succeeded,
        failed,
        pending,
        failure_code: raw.failure_code,
    })
}
