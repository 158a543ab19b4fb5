//! opgate intake: the HTTP front door for agents. It authenticates, validates, and
//! registers each operation exactly once; it never calls a provider.

pub mod config;

mod auth;
mod body;
mod openapi;
mod problem;
mod routes;
mod view;

use std::net::TcpListener;

use actix_web::dev::Server;
use actix_web::{get, web, App, HttpResponse, HttpServer};
use opgate_store::Store;
use utoipa::OpenApi;

pub use config::Config;

pub struct AppState {
    pub store: Store,
}

#[get("/openapi.json")]
async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(openapi::ApiDoc::openapi())
}

/// Builds the server on an already-bound listener; the caller awaits it. actix stops
/// gracefully on SIGTERM/SIGINT, finishing in-flight requests.
pub fn serve(
    store: Store,
    listener: TcpListener,
    workers: Option<usize>,
) -> std::io::Result<Server> {
    let state = web::Data::new(AppState { store });
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .service(routes::payments::create_payment)
            .service(routes::operations::get_operation)
            .service(routes::health::healthz)
            .service(routes::health::readyz)
            .service(openapi_json)
    })
    .listen(listener)?;
    if let Some(workers) = workers {
        server = server.workers(workers.max(1));
    }
    Ok(server.run())
}
