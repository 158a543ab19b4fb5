//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the database
//! answers too).

use actix_web::{get, web, HttpResponse};
use serde_json::json;

use crate::problem::Problem;
use crate::AppState;

#[utoipa::path(responses((status = 200, description = "The process is up")))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

#[utoipa::path(responses(
    (status = 200, description = "The database is reachable"),
    (status = 500, description = "The database answered with an unexpected error", body = Problem,
     content_type = "application/problem+json"),
    (status = 503, description = "The database is unreachable", body = Problem,
     content_type = "application/problem+json"),
))]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, Problem> {
    state.store.ping().await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ready"})))
}
