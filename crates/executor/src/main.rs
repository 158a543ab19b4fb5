use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Parser;
use opgate_catalog::Catalog;
use opgate_executor::{run, Config};
use opgate_provider::Providers;
use opgate_store::{PoolSettings, Store};
use tokio::signal::unix::{signal, SignalKind};

/// The most connections one executor opens.
const MAX_POOL: usize = 32;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let telemetry = Arc::new(opgate_telemetry::init("executor", config.log_format)?);
    if let Err(problem) = config.validate() {
        bail!(problem);
    }
    let pool = config.db.apply(PoolSettings {
        // Workers hold a connection only for a statement: at 256 in flight the drain
        // used about 10 (docs/benchmarks.md), so the pool stays well inside the
        // server's default max_connections (100) however high --concurrency goes.
        max_connections: (config.concurrency + 4).min(MAX_POOL),
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
        "executor:{}:{}",
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
    println!("executor running as {owner}; metrics at http://{metrics_address}/metrics");
    let provider_names: Vec<&str> = providers.names().collect();
    tracing::info!(%owner, provider = %opgate_telemetry::loggable_url(&config.provider_url), providers = ?provider_names, concurrency = config.concurrency, "executor started");
    run(config, store, providers, owner, shutdown).await;
    tracing::info!("executor stopped");
    telemetry.shutdown();
    Ok(())
}

/// jemalloc rather than glibc's allocator, as in intake: every claimed operation
/// allocates and frees its rows, payload, provider request and answer across the
/// runtime's threads, and under callgrind glibc's malloc and free were about a fifth of
/// the executor's instructions per drained operation (docs/profile.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
