//! URLs as they may be logged: a base URL can carry credentials (`user:secret@host`)
//! or keys in its query string, and neither may reach a log line.

/// `url` without its userinfo and without its query and fragment: scheme, host, port
/// and path only. Text that is not a URL is replaced whole.
pub fn loggable_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<not a URL>".to_owned();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::loggable_url;

    #[test]
    fn credentials_queries_and_fragments_never_survive() {
        assert_eq!(
            loggable_url("https://user:s3cret@api.example.test:8443/v1?key=abc#x"),
            "https://api.example.test:8443/v1"
        );
        assert_eq!(
            loggable_url("postgres://opgate:pw@db:5432/opgate?sslmode=require"),
            "postgres://db:5432/opgate"
        );
        assert_eq!(
            loggable_url("http://127.0.0.1:9090"),
            "http://127.0.0.1:9090"
        );
        assert_eq!(loggable_url("p@ss"), "<not a URL>");
    }
}
