//! opgate executor: drains the outbox and carries out each operation once. Claims are
//! `FOR UPDATE SKIP LOCKED` batches that take a fenced lease; each claimed operation
//! runs on its own task, bounded by `--concurrency`. Wakes on LISTEN/NOTIFY and polls
//! as a fallback. On shutdown it stops claiming, lets in-flight work finish within a
//! grace period, and releases the leases of whatever is left.

mod completions;
pub mod config;
mod dispatcher;
mod due_agents;
mod heartbeat;
mod rotation;
mod rules;
mod settled;
mod worker;

pub use config::Config;
pub use dispatcher::run;
