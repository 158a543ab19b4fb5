//! Every SQL statement of opgate lives in this crate: the connection pool, the
//! migrations, and one module per table. Callers get domain types and `StoreError`,
//! never SQL or driver types.

mod agent_reads;
mod agent_request;
mod agents;
mod approval_expiry;
mod audit;
mod audit_apart;
pub mod bench_sql;
mod budget_batch;
mod budget_in_one_trip;
mod budgets;
mod citus;
mod error;
mod execution;
mod fenced;
mod group_commit;
mod lease;
mod migrate;
mod notifications;
mod operations;
mod operator_actions;
mod operators;
mod outbox_rotation;
mod pool;
pub mod queue_health;
mod rate_limited;
mod reconciliation;
mod refunds;
mod registration_batch;
mod registration_by_shard;
mod stats;
mod tuning;

pub use agent_reads::AgentOperationFilter;
pub use agent_request::AgentRequestContext;
pub use agents::{AgentRecord, AgentUpdate, NewAgent};
pub use audit::{OperationEvent, PipelineCounts};
pub use budget_batch::PendingBudgeted;
pub use budgets::BudgetedRegistration;
pub use citus::CitusDistribution;
pub use error::StoreError;
pub use execution::{ClaimCursor, ClaimedOperation};
pub use fenced::{FencedTransition, FencedWrite};
pub use group_commit::GroupCommit;
pub use lease::Lease;
pub use notifications::{spawn_listener, Wakeup, OUTBOX_CHANNEL, SETTLED_CHANNEL};
pub use operations::{NewOperation, OperationRecord, Registration};
pub use operator_actions::{OperationFilter, OperatorAction};
pub use operators::{OperatorRecord, OperatorRevocation};
pub use outbox_rotation::OutboxRotation;
pub use pool::{PoolSettings, Store, DEFAULT_KEEPALIVE_IDLE, DEFAULT_STATEMENT_TIMEOUT};
pub use reconciliation::ClaimedReconciliation;
pub use refunds::{NewRefund, RefundRegistration};
pub use registration_batch::{AgentCheck, BatchAnswer, PendingRegistration, REGISTER_BATCH};
pub use stats::TableCounts;
pub use tuning::DbTuning;
