//! Query-string parsing for the lookups (`GET /v1/payments?idempotency_key=K` and
//! the like): `application/x-www-form-urlencoded` decoding (`%XX` escapes and `+`
//! for space).

/// The first value of `name` in `query`; `Ok(None)` if absent. Errors on bad escapes
/// or text that is not UTF-8.
pub fn param(query: Option<&str>, name: &str) -> Result<Option<String>, String> {
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(raw_name)? == name {
            return decode(raw_value).map(Some);
        }
    }
    Ok(None)
}

fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| "malformed percent-encoding in query".to_owned())?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "query is not valid UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_and_plus() {
        let q = Some("a=1&idempotency_key=opgate-x%3Ay%2Fz+w%2B&b=2");
        assert_eq!(
            param(q, "idempotency_key").unwrap().as_deref(),
            Some("opgate-x:y/z w+")
        );
        assert_eq!(param(q, "missing").unwrap(), None);
        assert_eq!(param(None, "a").unwrap(), None);
        assert_eq!(param(Some("a"), "a").unwrap().as_deref(), Some(""));
        assert_eq!(
            param(Some("k=%E2%82%AC"), "k").unwrap().as_deref(),
            Some("€")
        );
    }

    #[test]
    fn rejects_bad_escapes() {
        assert!(param(Some("k=%zz"), "k").is_err());
        assert!(param(Some("k=%4"), "k").is_err());
        assert!(param(Some("k=%+f"), "k").is_err());
        assert!(param(Some("k=%ff"), "k").is_err());
    }
}
