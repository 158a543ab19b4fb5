use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Parser;
use opgate_provider::HttpProvider;
use opgate_reconciler::{run, Config};
use opgate_store::{PoolSettings, Store};
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(problem) = config.validate() {
        bail!(problem);
    }
    let pool = PoolSettings {
        max_connections: config.concurrency + 2,
        ..PoolSettings::default()
    };
    let store =
        Store::connect(&config.database_url, &pool).context("configuring the database pool")?;
    if config.migrate {
        store.migrate().await.context("applying migrations")?;
    }
    let provider = Arc::new(HttpProvider::new(config.provider()));
    let owner = format!(
        "reconciler:{}:{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    // The one line on stdout: scripts and tests wait for it.
    println!("reconciler running as {owner}");
    tracing::info!(%owner, provider = %config.provider_url, "reconciler started");
    run(config, store, provider, owner, shutdown).await;
    tracing::info!("reconciler stopped");
    Ok(())
}
