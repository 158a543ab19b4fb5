//! What every write after a claim names: the operation, its agent and the fencing
//! token the claim took.

use uuid::Uuid;

/// A lease one worker holds on one operation. The agent is part of the operation's
/// key: every fenced statement filters on it as well as on the operation, so that on
/// Citus it runs on the one node holding the agent's rows instead of on every shard.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub operation_id: Uuid,
    pub agent_id: String,
    pub fencing_token: i64,
}
