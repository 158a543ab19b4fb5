//! Path templates of declared requests (`/v1/orders/{provider_reference}`): reading
//! their placeholders at load, and filling them at call time with each value
//! percent-encoded, so that no value can change the path or the query it lands in.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The stable provider-facing key (`opgate-<operation_id>`), the same on every attempt.
pub const PROVIDER_KEY: &str = "provider_key";
/// opgate's id of the operation.
pub const OPERATION_ID: &str = "operation_id";
/// The provider's id of the object, once an answer has told it (lookups only).
pub const PROVIDER_REFERENCE: &str = "provider_reference";

/// RFC 3986 unreserved characters stay as they are; everything else is encoded, which
/// is safe in a path segment and in a query value alike.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

enum Piece<'a> {
    Literal(&'a str),
    Placeholder(&'a str),
}

/// Splits a template into literal text and placeholders; `Err` says what is wrong.
fn pieces(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        let open = rest.find('{');
        let close = rest.find('}');
        match (open, close) {
            (None, None) => {
                pieces.push(Piece::Literal(rest));
                break;
            }
            (Some(open), Some(close)) if open < close => {
                let name = &rest[open + 1..close];
                if name.is_empty() || name.contains('{') {
                    return Err(format!("{:?} is not a placeholder", &rest[open..=close]));
                }
                pieces.push(Piece::Literal(&rest[..open]));
                pieces.push(Piece::Placeholder(name));
                rest = &rest[close + 1..];
            }
            (Some(_), _) => return Err("has a '{' that is never closed".to_owned()),
            (None, Some(_)) => return Err("has a '}' that was never opened".to_owned()),
        }
    }
    Ok(pieces)
}

/// The placeholders of a template, in order, after checking that it starts with '/',
/// that its literal text needs no encoding, and that its braces are balanced.
pub(crate) fn placeholders(template: &str) -> Result<Vec<&str>, String> {
    if !template.starts_with('/') {
        return Err("must start with '/'".to_owned());
    }
    let pieces = pieces(template)?;
    let mut names = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => {
                if let Some(bad) = text.chars().find(|c| !c.is_ascii_graphic() || *c == '#') {
                    return Err(format!(
                        "contains {bad:?}: write the path as it is sent, percent-encoded, without a fragment"
                    ));
                }
            }
            Piece::Placeholder(name) => names.push(name),
        }
    }
    Ok(names)
}

/// Fills a template's placeholders, each value percent-encoded as a URL component.
/// `None` when the template needs the provider reference and it is not known yet, or
/// names a placeholder this version does not know (the catalog refuses those at load).
pub fn fill_path(
    template: &str,
    provider_key: &str,
    operation_id: &str,
    provider_reference: Option<&str>,
) -> Option<String> {
    let mut filled = String::with_capacity(template.len() + provider_key.len());
    for piece in pieces(template).ok()? {
        match piece {
            Piece::Literal(text) => filled.push_str(text),
            Piece::Placeholder(name) => {
                let value = match name {
                    PROVIDER_KEY => provider_key,
                    OPERATION_ID => operation_id,
                    PROVIDER_REFERENCE => provider_reference?,
                    _ => return None,
                };
                filled.extend(utf8_percent_encode(value, COMPONENT));
            }
        }
    }
    Some(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled() {
        let filled = fill_path(
            "/v1/resources/orders?idempotency_key={provider_key}&op={operation_id}",
            "opgate-0190",
            "0190",
            None,
        );
        assert_eq!(
            filled.as_deref(),
            Some("/v1/resources/orders?idempotency_key=opgate-0190&op=0190")
        );
        let by_reference = fill_path("/v1/orders/{provider_reference}", "k", "o", Some("res_1"));
        assert_eq!(by_reference.as_deref(), Some("/v1/orders/res_1"));
    }

    #[test]
    fn values_are_percent_encoded_and_unreserved_characters_kept() {
        let filled = fill_path("/x/{provider_reference}", "k", "o", Some("a b/c?d&e=f#g%h"));
        assert_eq!(filled.as_deref(), Some("/x/a%20b%2Fc%3Fd%26e%3Df%23g%25h"));
        let kept = fill_path("/x/{provider_key}", "AZaz09-._~", "o", None);
        assert_eq!(kept.as_deref(), Some("/x/AZaz09-._~"));
        let unicode = fill_path("/x/{provider_key}", "é", "o", None);
        assert_eq!(unicode.as_deref(), Some("/x/%C3%A9"));
    }

    #[test]
    fn a_missing_reference_or_an_unknown_placeholder_fills_nothing() {
        assert_eq!(fill_path("/x/{provider_reference}", "k", "o", None), None);
        assert_eq!(fill_path("/x/{customer}", "k", "o", Some("r")), None);
        assert_eq!(fill_path("/x/{provider_key", "k", "o", None), None);
    }

    #[test]
    fn templates_are_checked() {
        assert_eq!(
            placeholders("/a/{provider_key}/b/{operation_id}?q=1"),
            Ok(vec!["provider_key", "operation_id"])
        );
        assert_eq!(placeholders("/plain"), Ok(vec![]));
        assert_eq!(placeholders("v1/x"), Err("must start with '/'".to_owned()));
        assert!(placeholders("/a/{provider_key")
            .unwrap_err()
            .contains("never closed"));
        assert!(placeholders("/a/}x").unwrap_err().contains("never opened"));
        assert!(placeholders("/a/{}")
            .unwrap_err()
            .contains("not a placeholder"));
        assert!(placeholders("/a b").unwrap_err().contains("' '"));
        assert!(placeholders("/a#frag").unwrap_err().contains("'#'"));
    }
}
