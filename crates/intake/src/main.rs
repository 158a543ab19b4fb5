use std::net::TcpListener;

use anyhow::Context;
use clap::Parser;
use opgate_intake::{serve, Config};
use opgate_store::Store;
use tracing_subscriber::EnvFilter;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();

    let store = Store::connect(&config.database_url, &config.pool_settings())
        .context("configuring the database pool")?;
    if config.migrate {
        let applied = store.migrate().await.context("applying migrations")?;
        tracing::info!(applied, "migrations applied");
    }
    let listener =
        TcpListener::bind(config.listen).with_context(|| format!("binding {}", config.listen))?;
    let address = listener.local_addr()?;
    // The one line on stdout: scripts and tests read the chosen address from it.
    println!("intake listening on http://{address}");
    tracing::info!(%address, "intake listening");
    serve(store, &config.database_url, listener, config.workers)?.await?;
    tracing::info!("intake stopped");
    Ok(())
}
