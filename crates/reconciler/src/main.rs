use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Parser;
use opgate_catalog::Catalog;
use opgate_provider::Providers;
use opgate_reconciler::{run, Config};
use opgate_store::{PoolSettings, Store};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let telemetry = Arc::new(opgate_telemetry::init("reconciler", config.log_format)?);
    if let Err(problem) = config.validate() {
        bail!(problem);
    }
    let pool = config.db.apply(PoolSettings {
        max_connections: config.concurrency + 2,
        // Every statement it runs finds its rows through an index (see `PoolSettings`).
        avoid_sequential_scans: true,
        ..PoolSettings::default()
    });
    let store =
        Store::connect(&config.database_url, &pool).context("configuring the database pool")?;
    if config.migrate {
        store.migrate().await.context("applying migrations")?;
    }
    let catalog = Arc::new(Catalog::load_at_start(config.catalog.as_deref()));
    let providers = Arc::new(
        Providers::build(&config.provider(), config.stripe().as_ref(), &catalog)
            .map_err(|e| anyhow::anyhow!(e))?,
    );
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
    let metrics_address = opgate_telemetry::serve_metrics(telemetry.clone(), config.metrics_listen)
        .await
        .context("binding --metrics-listen")?;
    let gauges = store.clone();
    opgate_telemetry::refresh_pipeline_every(config.gauge_interval, move || {
        let store = gauges.clone();
        async move {
            let counts = store.pipeline_counts().await.ok()?;
            // Apart: a failed read of the statistics views must not hide the backlog.
            let health = store.queue_health().await.ok();
            Some(opgate_telemetry::PipelineSnapshot {
                operations_by_status: counts.unsettled_by_status,
                outbox_depth: counts.outbox_depth,
                outbox_oldest_age_seconds: counts.outbox_oldest_age_seconds,
                outbox_dead_tuples: health.map(|h| h.outbox_dead_tuples),
                oldest_transaction_age_seconds: health.map(|h| h.oldest_transaction_age_seconds),
                oldest_xmin_age: health.map(|h| h.oldest_xmin_age),
            })
        }
    });
    // The one line on stdout: scripts and tests wait for it.
    println!("reconciler running as {owner}; metrics at http://{metrics_address}/metrics");
    let provider_names: Vec<&str> = providers.names().collect();
    tracing::info!(%owner, provider = %opgate_telemetry::loggable_url(&config.provider_url), providers = ?provider_names, "reconciler started");
    run(config, store, providers, owner, shutdown).await;
    tracing::info!("reconciler stopped");
    telemetry.shutdown();
    Ok(())
}
