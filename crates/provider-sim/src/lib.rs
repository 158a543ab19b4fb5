//! `provider-sim` as a library: the server loop, so tests can run it in-process on
//! port 0, plus the modules that hold its state, faults and routes. It serves
//! idempotent payments, refunds of them and generic resources (whatever a
//! catalog-declared operation kind creates), each under an `Idempotency-Key`; the
//! endpoints are listed in `config` (`--help`) and in the README, "provider-sim".

pub mod config;
pub mod faults;
pub mod model;
mod query;
pub mod routes;
pub mod state;
mod time;

use std::future::Future;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

pub use faults::{Fault, FaultSet, ProbFault};
pub use state::SimState;

/// Serves the provider API on `listener` until `shutdown` completes. Connections still
/// open at that point are abandoned (dropped with the runtime).
pub async fn run(listener: TcpListener, state: SimState, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => {
                tracing::info!("shutting down");
                return;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, state.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn serve_connection(stream: TcpStream, state: SimState) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| routes::handle(state.clone(), req));
    // A service error (the drop-after-commit fault) makes hyper close the connection
    // without writing a response.
    if let Err(e) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "connection closed with an error");
    }
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
