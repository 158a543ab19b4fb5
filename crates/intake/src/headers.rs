//! Request headers that must be sent at most once. When a header that decides who asks
//! (`Authorization`) or which operation is meant (`Idempotency-Key`) is repeated, the
//! first value is not quietly taken: a proxy in front of intake may have taken another,
//! so the request is refused with 400 before anything reads the header.

use actix_web::http::header::HeaderValue;
use actix_web::HttpRequest;

use crate::problem::Problem;

/// The header's one value, `None` when it is absent, or 400 `duplicate-header` when the
/// request carries it more than once (as separate header lines; a comma inside one
/// value is that value's business). `name` is matched case-insensitively and shown in
/// the problem as given.
pub fn single_header<'r>(
    request: &'r HttpRequest,
    name: &str,
) -> Result<Option<&'r HeaderValue>, Problem> {
    let mut values = request.headers().get_all(name);
    let first = values.next();
    if values.next().is_some() {
        return Err(Problem::duplicate_header(name));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::single_header;

    #[test]
    fn one_value_none_or_a_problem() {
        let absent = TestRequest::default().to_http_request();
        assert!(matches!(
            single_header(&absent, "Idempotency-Key"),
            Ok(None)
        ));

        let once = TestRequest::default()
            .insert_header(("idempotency-key", "k1"))
            .to_http_request();
        let value = single_header(&once, "Idempotency-Key").unwrap().unwrap();
        assert_eq!(value, "k1");

        let twice = TestRequest::default()
            .append_header(("Idempotency-Key", "k1"))
            .append_header(("Idempotency-Key", "k2"))
            .to_http_request();
        let problem = single_header(&twice, "Idempotency-Key").unwrap_err();
        assert_eq!(problem.status, 400);
        assert_eq!(problem.problem_type, "urn:opgate:problem:duplicate-header");
        assert!(problem.detail.contains("Idempotency-Key"));
    }
}
