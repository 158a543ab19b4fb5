//! Harness for opgate's end-to-end tests: a fresh database per test on the PostgreSQL
//! that `DATABASE_URL` names (the Makefile starts a throwaway one), private clusters for
//! tests that stop the database, and the real binaries started as child processes.

pub mod agent_load;
pub mod api;
pub mod binaries;
pub mod citus;
pub mod cluster;
pub mod db;
pub mod faketime;
pub mod guardrails;
pub mod kinds;
pub mod localstripe;
pub mod mcp;
pub mod metrics;
pub mod otlp;
pub mod recording_proxy;
pub mod stack;
pub mod wait;

pub use binaries::{opgate, Executor, Intake, ProviderSim, Reconciler, Service};
pub use cluster::PgCluster;
pub use db::TestDb;
pub use kinds::{Kind, KindStack};
pub use localstripe::LocalStripe;
pub use recording_proxy::{Recorded, RecordingProxy};
pub use stack::Stack;
pub use wait::eventually;
