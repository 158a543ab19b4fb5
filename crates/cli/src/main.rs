//! `opgate`: the operator's command: migrations, agents' and operators' credentials,
//! and the operations (the manual-review queue). A failure is one line on stderr,
//! `error: …` (the causes joined by ": "), and exit status 1, never a backtrace, even
//! with `RUST_BACKTRACE` set; clap's usage errors keep clap's format and status 2.

mod agents;
mod operations;
mod operators;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use opgate_catalog::Catalog;
use opgate_store::{PoolSettings, Store};

#[derive(Parser)]
#[command(name = "opgate", version, about = "Operate an opgate deployment")]
struct Cli {
    /// PostgreSQL connection URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://localhost/opgate",
        global = true
    )]
    database_url: String,

    /// The catalog of declared operation kinds (TOML), so that agents can be granted
    /// them (`agents create A --allow order`).
    #[arg(long, env = "OPGATE_CATALOG", global = true)]
    catalog: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending database migrations (safe to run any number of times).
    Migrate {
        /// Stop after this migration version (all when absent).
        #[arg(long, conflicts_with = "citus")]
        to: Option<u32>,
        /// Also distribute the tables on Citus (the citus extension must be installed):
        /// per-operation tables by agent_id, agents and operators as reference tables.
        #[arg(long)]
        citus: bool,
        /// With --citus, the number of shards of a first distribution (Citus's
        /// citus.shard_count when absent).
        #[arg(long, requires = "citus")]
        shard_count: Option<u32>,
    },
    /// Create, list and revoke agents' API keys.
    #[command(subcommand)]
    Agents(agents::AgentsCommand),
    /// List and inspect operations; work the manual-review queue.
    #[command(subcommand)]
    Operations(operations::OperationsCommand),
    /// Create, list and revoke operators' keys for the admin API.
    #[command(subcommand)]
    Operators(operators::OperatorsCommand),
    /// Print a pgbench script made of the store's own statements (for make bench).
    #[command(subcommand, hide = true)]
    BenchSql(BenchSql),
}

#[derive(Subcommand)]
enum BenchSql {
    /// Registering a new operation, as intake does.
    #[command(name = "register-new")]
    New {
        #[arg(long)]
        agent: String,
    },
    /// Replaying an existing key, as intake does: keys PREFIX1 … PREFIX<KEYS>.
    #[command(name = "register-replay")]
    Replay {
        /// The 16 hex digits between `opg_` and `_` in the agent's key.
        #[arg(long)]
        key_id: String,
        #[arg(long)]
        key_prefix: String,
        #[arg(long)]
        keys: u64,
    },
    /// The executor's claim of up to BATCH events and their fenced completion, one
    /// transaction.
    #[command(name = "claim-and-complete")]
    ClaimAndComplete {
        #[arg(long, default_value_t = 1)]
        batch: u32,
    },
    /// An SQL expression making an operation id as intake does (UUIDv7), for fills.
    #[command(name = "operation-id")]
    OperationId,
    /// Plain SQL registering keys PREFIX1 … PREFIX<KEYS> (to prepare a replay run).
    #[command(name = "register-keys")]
    Keys {
        #[arg(long)]
        agent: String,
        #[arg(long)]
        key_prefix: String,
        #[arg(long)]
        keys: u64,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let database = opgate_telemetry::loggable_url(&cli.database_url);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let unreachable = error.chain().any(|cause| {
                cause
                    .downcast_ref::<opgate_store::StoreError>()
                    .is_some_and(opgate_store::StoreError::is_unavailable)
            });
            // One line whatever happened; when no database answered, it also names the
            // one tried (without credentials) and how to choose another.
            let hint = if unreachable && database != "<not a URL>" {
                format!(
                    " (no database answered at {database}: set DATABASE_URL or \
                     --database-url, or run `make up`, which prints one to use)"
                )
            } else {
                String::new()
            };
            eprintln!("error: {}{hint}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", each on one line. Not `{:?}`, which
/// appends a backtrace when `RUST_BACKTRACE` is set.
fn one_line(error: &anyhow::Error) -> String {
    error
        .chain()
        .map(|cause| {
            cause
                .to_string()
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(": ")
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Command::BenchSql(script) = &cli.command {
        let text = match script {
            BenchSql::New { agent } => opgate_store::bench_sql::register_new_operation(agent),
            BenchSql::Replay {
                key_id,
                key_prefix,
                keys,
            } => opgate_store::bench_sql::register_replay(key_id, key_prefix, *keys),
            BenchSql::ClaimAndComplete { batch } => {
                opgate_store::bench_sql::claim_and_complete(*batch)
            }
            BenchSql::Keys {
                agent,
                key_prefix,
                keys,
            } => opgate_store::bench_sql::register_keys(agent, key_prefix, *keys),
            BenchSql::OperationId => format!("{}\n", opgate_store::bench_sql::NEW_OPERATION_ID),
        };
        print!("{text}");
        return Ok(());
    }
    let settings = PoolSettings {
        max_connections: 2,
        ..PoolSettings::default()
    };
    let store = Store::connect(&cli.database_url, &settings).context("configuring the database")?;
    match cli.command {
        Command::Migrate {
            to,
            citus,
            shard_count,
        } => {
            if citus {
                // Before anything is written: a database without Citus is left as it was.
                store.citus_version().await?;
            }
            let applied = store.migrate_to(to).await.context("applying migrations")?;
            eprintln!("migrations applied: {applied}");
            if citus {
                let distribution = store
                    .distribute_on_citus(shard_count)
                    .await
                    .context("distributing the tables on Citus")?;
                match distribution.changed.as_slice() {
                    [] => eprintln!(
                        "citus {}: every table already in place",
                        distribution.citus_version
                    ),
                    changed => eprintln!(
                        "citus {}: placed {}",
                        distribution.citus_version,
                        changed.join(", ")
                    ),
                }
            }
        }
        Command::Agents(command) => {
            let catalog = Catalog::load_at_start(cli.catalog.as_deref());
            agents::run(&store, &catalog, command).await?
        }
        Command::Operations(command) => operations::run(&store, command).await?,
        Command::Operators(command) => operators::run(&store, command).await?,
        Command::BenchSql(_) => unreachable!("handled before connecting"),
    }
    Ok(())
}
