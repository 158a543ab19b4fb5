//! opgate intake: the HTTP front door for agents. It authenticates, validates, and
//! registers each operation exactly once; it never calls a provider.

pub mod config;

mod auth;
mod body;
mod group_commit;
mod http_span;
mod openapi;
mod problem;
mod routes;
mod view;
mod wakeups;

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::{get, web, App, HttpResponse, HttpServer};
use opgate_catalog::Catalog;
use opgate_store::Store;
use opgate_telemetry::Telemetry;

pub use config::Config;

pub struct AppState {
    pub store: Store,
    /// The declared kinds, beside the built-in ones.
    pub catalog: Arc<Catalog>,
    /// The provider new payments are bound to.
    pub payment_provider: String,
    /// Group commit for registrations; `None` registers each request on its own.
    batcher: Option<group_commit::RegistrationBatcher>,
    pub telemetry: Arc<Telemetry>,
    pub executor_waker: wakeups::ExecutorWaker,
    pub settled: wakeups::SettledOperations,
}

#[get("/metrics")]
async fn metrics_text(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.telemetry.render_metrics())
}

#[get("/openapi.json")]
async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(openapi::document(&state.catalog))
}

/// Builds the server on an already-bound listener; the caller awaits it. actix stops
/// gracefully on SIGTERM/SIGINT, finishing in-flight requests. Must be called inside a
/// Tokio runtime: it starts intake's LISTEN/NOTIFY tasks.
pub fn serve(
    store: Store,
    telemetry: Arc<Telemetry>,
    catalog: Arc<Catalog>,
    config: &Config,
    listener: TcpListener,
) -> std::io::Result<Server> {
    let (database_url, workers) = (config.database_url.as_str(), config.workers);
    let state = web::Data::new(AppState {
        batcher: config.group_commit().map(|(committers, max_batch)| {
            group_commit::spawn(store.clone(), committers, max_batch)
        }),
        executor_waker: wakeups::ExecutorWaker::spawn(store.clone()),
        settled: wakeups::SettledOperations::spawn(database_url.to_owned()),
        store,
        catalog,
        payment_provider: config.payment_provider.clone(),
        telemetry,
    });
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(http_span::trace_request))
            .app_data(state.clone())
            .app_data(body::json_config())
            .service(routes::create::create_operation)
            .service(routes::operations::get_operation)
            .service(routes::admin::list_operations)
            .service(routes::admin::show_operation)
            .service(routes::admin::resolve_operation)
            .service(routes::health::healthz)
            .service(routes::health::readyz)
            .service(openapi_json)
            .service(metrics_text)
    })
    .listen(listener)?;
    if let Some(workers) = workers {
        server = server.workers(workers.max(1));
    }
    Ok(server.run())
}
