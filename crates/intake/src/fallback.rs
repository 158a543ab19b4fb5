//! The answer to a request no route takes: 405 with `Allow` when its path is one intake
//! serves (with another method), else 404; both as problems. Paths are matched against
//! `crate::ROUTES` with the router's own pattern syntax, so the two agree.

use std::sync::OnceLock;

use actix_web::dev::ResourceDef;
use actix_web::{HttpRequest, HttpResponse, ResponseError};

use crate::problem::Problem;
use crate::ROUTES;

/// The default service of the app. The path is the one the router matched against
/// (percent-decoded where that is unambiguous), so `/%68ealthz` is `/healthz` here too.
pub async fn unmatched(request: HttpRequest) -> HttpResponse {
    answer(request.match_info().as_str()).error_response()
}

fn answer(path: &str) -> Problem {
    let allowed = allowed_methods(path);
    if allowed.is_empty() {
        Problem::route_not_found()
    } else {
        Problem::method_not_allowed(&allowed)
    }
}

/// The methods of every route whose pattern matches `path`, in table order, each once.
pub(crate) fn allowed_methods(path: &str) -> Vec<&'static str> {
    static PATTERNS: OnceLock<Vec<(&'static str, ResourceDef)>> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        ROUTES
            .iter()
            .map(|&(method, pattern)| (method, ResourceDef::new(pattern)))
            .collect()
    });
    let mut allowed = Vec::new();
    for (method, pattern) in patterns {
        if pattern.is_match(path) && !allowed.contains(method) {
            allowed.push(*method);
        }
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_paths_list_their_methods_and_others_are_not_found() {
        assert_eq!(allowed_methods("/healthz"), ["GET"]);
        assert_eq!(
            allowed_methods("/agent/operations/0b7e6f5e-4c1f-4a53-9d55-7a4c2d0e9f10"),
            ["POST", "GET"]
        );
        assert_eq!(allowed_methods("/admin/operations/x/resolve"), ["POST"]);
        assert_eq!(allowed_methods("/agent/operations"), ["GET"]);
        for unknown in ["/", "/healthz/", "/agent/operations/a/b", "/nope"] {
            assert!(allowed_methods(unknown).is_empty(), "{unknown}");
        }
        let problem = answer("/nope");
        assert_eq!(
            (problem.status, problem.problem_type.as_str()),
            (404, "urn:opgate:problem:route-not-found")
        );
        assert_eq!(answer("/readyz").status, 405);
    }
}
