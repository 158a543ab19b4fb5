//! `/metrics` for the binaries that have no HTTP server of their own (executor,
//! reconciler): a minimal hyper server on `--metrics-listen`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::Telemetry;

/// Binds `address` and serves `GET /metrics` (and `/healthz`) in the background;
/// returns the bound address.
pub async fn serve_metrics(
    telemetry: Arc<Telemetry>,
    address: SocketAddr,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let telemetry = telemetry.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: Request<hyper::body::Incoming>| {
                        let telemetry = telemetry.clone();
                        async move { Ok::<_, Infallible>(respond(&telemetry, request.uri().path())) }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn respond(telemetry: &Telemetry, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            telemetry.render_metrics(),
        ),
        "/healthz" => (
            StatusCode::OK,
            "application/json",
            r#"{"status":"ok"}"#.to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}
