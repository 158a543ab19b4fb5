//! Providers that declared kinds call: their name and base URL, resolved at load from
//! an environment variable or the literal in the file, so that a deployment that
//! forgot the variable refuses to start instead of calling the wrong place.

use opgate_domain::OPGATE_HTTP_PROVIDER;

use crate::error::{Blame, CatalogError, Item};
use crate::file::ProviderFile;

/// A provider declared kinds call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredProvider {
    pub name: String,
    /// Without a trailing '/': request paths start with one.
    pub base_url: String,
    /// Whether sending the same idempotency key again is safe (the provider
    /// deduplicates), so that an uncertain attempt may be retried with it.
    pub keyed_retries_safe: bool,
}

pub(crate) fn check(
    file: &str,
    name: &str,
    raw: ProviderFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<DeclaredProvider, CatalogError> {
    let blame = Blame {
        file,
        item: Item::Provider(name.to_owned()),
    };
    let mut chars = name.chars();
    let well_formed = name.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !well_formed {
        return Err(blame.at(
            "name",
            "use 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter",
        ));
    }
    // Operations record their provider by name; sharing the built-in adapter's name
    // would make a recorded name ambiguous.
    if name == OPGATE_HTTP_PROVIDER {
        return Err(blame.at("name", "is the built-in provider's name; choose another"));
    }
    let from_env = raw
        .base_url_env
        .as_deref()
        .and_then(env)
        .filter(|url| !url.trim().is_empty());
    let (field, url) = match (from_env, raw.base_url, raw.base_url_env) {
        (Some(url), _, _) => ("base_url_env", url),
        (None, Some(url), _) => ("base_url", url),
        (None, None, Some(variable)) => {
            return Err(blame.at(
                "base_url_env",
                format!("the environment variable {variable} is not set, and no base_url is given"),
            ))
        }
        (None, None, None) => {
            return Err(blame.at("base_url", "is required: give base_url or base_url_env"))
        }
    };
    let url = url.trim();
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    if !host.is_some_and(|host| !host.is_empty() && !host.starts_with('/'))
        || url.contains(['?', '#'])
    {
        return Err(blame.at(
            field,
            format!("{url:?} is not an http:// or https:// base URL (without query or fragment)"),
        ));
    }
    Ok(DeclaredProvider {
        name: name.to_owned(),
        base_url: url.trim_end_matches('/').to_owned(),
        keyed_retries_safe: raw.keyed_retries_safe,
    })
}
