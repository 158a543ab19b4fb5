//! `provider-sim`: parses the command line, binds, prints the one line tests read
//! (`provider-sim listening on http://ADDR`) to stdout, then serves until SIGTERM or
//! SIGINT. Logs go to stderr.

use anyhow::Context;
use opgate_provider_sim::config::Config;
use opgate_provider_sim::{run, shutdown_signal, SimState};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (config, faults) = Config::from_args();
    let telemetry = opgate_telemetry::init("provider-sim", opgate_telemetry::LogFormat::Json)?;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    println!("provider-sim listening on http://{addr}");
    tracing::info!(?faults, "faults armed");
    run(listener, SimState::new(faults), shutdown_signal()).await;
    telemetry.shutdown();
    Ok(())
}
