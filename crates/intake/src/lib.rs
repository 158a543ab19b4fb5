//! opgate intake: the HTTP front door for agents. It authenticates, validates, and
//! registers each operation exactly once; it never calls a provider.

pub mod config;

mod auth;
mod body;
mod fallback;
mod group_commit;
mod headers;
mod http_span;
mod listing;
mod mcp;
mod openapi;
mod problem;
mod rate_limits;
mod registration;
mod routes;
mod view;
mod wakeups;

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::{get, web, App, HttpResponse, HttpServer};
use opgate_catalog::Catalog;
use opgate_store::{PoolSettings, Store};

pub use config::Config;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The declared kinds, beside the built-in ones.
    pub catalog: Arc<Catalog>,
    /// The provider new payments are bound to.
    pub payment_provider: String,
    /// How long a request body may take to arrive (408 after).
    pub body_timeout: std::time::Duration,
    /// How long an operation waits for an operator's approval.
    pub approval_timeout: std::time::Duration,
    /// Each agent's rate limit, counted in this replica.
    limiters: rate_limits::AgentLimiters,
    /// Group commit for registrations; `None` registers each request on its own.
    batcher: Option<group_commit::RegistrationBatcher>,
    /// Group commit for budgeted registrations, on the same connections.
    budgeted_batcher: Option<group_commit::BudgetedBatcher>,
    pub executor_waker: wakeups::ExecutorWaker,
    pub settled: wakeups::SettledOperations,
}

#[get("/openapi.json")]
async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(openapi::document(&state.catalog))
}

/// Registers every route and, from the same list, `ROUTES`: one place, so the table the
/// default service answers 405 from cannot drift from what is served. Each entry's
/// method and pattern must be its handler's own (the unit tests below check it).
macro_rules! intake_routes {
    ($($method:literal $pattern:literal => $service:path,)*) => {
        /// Every route intake serves, as (method, pattern).
        pub(crate) const ROUTES: &[(&str, &str)] = &[$(($method, $pattern)),*];

        fn register_routes(config: &mut web::ServiceConfig) {
            $(config.service($service);)*
        }
    };
}

intake_routes! {
    "POST" "/agent/operations/{kind}" => routes::create::create_operation,
    "GET" "/agent/operations" => routes::operations::list_operations,
    "GET" "/agent/operations/{operation_id}" => routes::operations::get_operation,
    "GET" "/admin/operations" => routes::admin::list_operations,
    "GET" "/admin/operations/{operation_id}" => routes::admin::show_operation,
    "POST" "/admin/operations/{operation_id}/resolve" => routes::admin::resolve_operation,
    "POST" "/admin/operations/{operation_id}/approve" => routes::approvals::approve_operation,
    "POST" "/admin/operations/{operation_id}/reject" => routes::approvals::reject_operation,
    "GET" "/healthz" => routes::health::healthz,
    "GET" "/readyz" => routes::health::readyz,
    "GET" "/openapi.json" => openapi_json,
}

/// The whole app but its state: routes, extractor settings that answer problems, and
/// the default service (404, or 405 with `Allow`, as problems).
fn configure(config: &mut web::ServiceConfig) {
    config
        .app_data(body::json_config())
        .app_data(
            web::QueryConfig::default().error_handler(|error, _request| {
                problem::Problem::bad_query(error.to_string()).into()
            }),
        )
        .app_data(
            web::PathConfig::default()
                .error_handler(|_error, _request| problem::Problem::route_not_found().into()),
        )
        .configure(register_routes)
        .default_service(web::to(fallback::unmatched));
}

/// Builds the server on an already-bound listener; the caller awaits it. actix stops
/// gracefully on SIGTERM/SIGINT, finishing in-flight requests. Must be called inside a
/// Tokio runtime: it starts intake's LISTEN/NOTIFY tasks.
pub fn serve(
    store: Store,
    catalog: Arc<Catalog>,
    config: &Config,
    listener: TcpListener,
) -> std::io::Result<Server> {
    // Shared by the workers: the rate limits (one count per agent in this replica) and
    // the settlements heard on LISTEN. Each worker makes its database pools, its
    // batchers and its executor waker on its own thread (below).
    let limiters = rate_limits::AgentLimiters::default();
    let settled = wakeups::SettledOperations::spawn(config.database_url.clone());
    let payment_provider = config.payment_provider.clone();
    let (body_timeout, approval_timeout) = (config.body_timeout, config.approval_timeout);
    let wake_interval = config.executor_wake_interval;
    // The process's pool applied the migrations; the workers read through their own
    // pools, so its connections are closed and `--db-connections` bounds what they hold.
    store.close_idle();
    let workers = config.http_workers();
    let reads_pool = PoolSettings {
        max_connections: (config.db_connections / workers).max(1),
        ..config.pool_settings()
    };
    let committers = config.committers();
    let database_url = config.database_url.clone();
    let server = HttpServer::new(move || {
        // The factory runs on each HTTP worker's own thread. The worker's pools, and
        // their connections' I/O, run there too: a read or a registration is answered
        // without waiting for another thread to be scheduled. (A pool shared by the
        // workers does each connection's I/O on the thread that opened it: refunds,
        // then four round trips each, went from 1,490 to 1,840/s with a fifth less of
        // intake's CPU when each worker got its own, in alternated runs.) The URL and
        // settings already made the process's pool, so connecting does not fail; if it
        // did, the worker would use that pool instead.
        let own_pool = |settings: &PoolSettings| {
            Store::connect(&database_url, settings).unwrap_or_else(|error| {
                tracing::warn!(%error, "a worker shares the process's pool");
                store.clone()
            })
        };
        let reads = own_pool(&reads_pool);
        // The executors are woken from the worker too, on the committers' connections
        // when there are any: through one waker for the process, on the main thread and
        // its pool, a lone registration waited for two more threads to be scheduled
        // before its NOTIFY left (`Prefer: wait`'s p50, alternated runs:
        // docs/architecture.md).
        let (batcher, budgeted_batcher, waker_store) = match &committers {
            Some(group) => {
                let committing = own_pool(&group.pool);
                (
                    Some(group_commit::spawn(
                        committing.clone(),
                        group.committers,
                        group.max_batch,
                    )),
                    Some(group_commit::spawn_budgeted(
                        committing.clone(),
                        group.max_batch,
                    )),
                    committing,
                )
            }
            None => (None, None, reads.clone()),
        };
        let state = web::Data::new(AppState {
            store: reads,
            catalog: catalog.clone(),
            payment_provider: payment_provider.clone(),
            body_timeout,
            approval_timeout,
            limiters: limiters.clone(),
            batcher,
            budgeted_batcher,
            executor_waker: wakeups::ExecutorWaker::spawn(waker_store, wake_interval),
            settled: settled.clone(),
        });
        App::new()
            .wrap(actix_web::middleware::from_fn(http_span::trace_request))
            .app_data(state.clone())
            .service(mcp::service(state))
            .configure(configure)
    })
    .listen(listener)?
    .workers(workers);
    Ok(server.run())
}

#[cfg(test)]
mod tests {
    use actix_web::http::{header, Method, StatusCode};
    use actix_web::test::{call_service, init_service, read_body_json, TestRequest};
    use actix_web::App;
    use utoipa::OpenApi;

    use super::{configure, ROUTES};

    /// A path the pattern matches: every `{segment}` filled in.
    fn example_path(pattern: &str) -> String {
        pattern
            .split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "0b7e6f5e-4c1f-4a53-9d55-7a4c2d0e9f10"
                } else {
                    segment
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Without the app state, a handler answers 500 (or, for the probes that need
    /// none, 200): anything but the default service's 404 and 405.
    #[actix_web::test]
    async fn every_route_in_the_table_reaches_its_handler_and_other_methods_get_405() {
        let app = init_service(App::new().configure(configure)).await;
        for &(method, pattern) in ROUTES {
            let path = example_path(pattern);
            let request = TestRequest::default()
                .method(Method::from_bytes(method.as_bytes()).unwrap())
                .uri(&path)
                .to_request();
            let response = call_service(&app, request).await;
            assert!(
                !matches!(
                    response.status(),
                    StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
                ),
                "{method} {pattern} is in ROUTES but no handler took {path}"
            );

            let allowed: Vec<&str> = ROUTES
                .iter()
                .filter(|(_, other)| example_path(other) == path)
                .map(|(method, _)| *method)
                .collect();
            for wrong in ["PUT", "DELETE", "PATCH", "TRACE", "OPTIONS", "GET", "POST"] {
                if allowed.contains(&wrong) {
                    continue;
                }
                let request = TestRequest::default()
                    .method(Method::from_bytes(wrong.as_bytes()).unwrap())
                    .uri(&path)
                    .to_request();
                let response = call_service(&app, request).await;
                assert_eq!(response.status(), 405, "{wrong} {path}");
                assert_eq!(
                    response.headers().get(header::CONTENT_TYPE).unwrap(),
                    "application/problem+json"
                );
                assert_eq!(
                    response.headers().get(header::ALLOW).unwrap(),
                    allowed.join(", ").as_str(),
                    "{wrong} {path}"
                );
            }
        }
        let request = TestRequest::get().uri("/no/such/route").to_request();
        let response = call_service(&app, request).await;
        assert_eq!(response.status(), 404);
        let body: serde_json::Value = read_body_json(response).await;
        assert_eq!(body["type"], "urn:opgate:problem:route-not-found");
    }

    #[test]
    fn every_documented_route_is_in_the_table() {
        let document = serde_json::to_value(crate::openapi::ApiDoc::openapi()).unwrap();
        let paths = document["paths"].as_object().unwrap();
        assert!(!paths.is_empty());
        for (path, item) in paths {
            for method in [
                "get", "post", "put", "delete", "patch", "head", "options", "trace",
            ] {
                if item.get(method).is_some() {
                    let method = method.to_ascii_uppercase();
                    assert!(
                        ROUTES.contains(&(method.as_str(), path.as_str())),
                        "{method} {path} is documented but not in ROUTES"
                    );
                }
            }
        }
    }
}
