//! `opgate operations list|show|resolve|retry-reconcile|approve|reject`: the operator's
//! view of the operations, the manual-review queue and the operations awaiting
//! approval. Every change is conditional on the state it leaves (MANUAL_REVIEW,
//! AWAITING_APPROVAL), and audited with the operator's name.

use anyhow::bail;
use anyhow::Context;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Subcommand, ValueEnum};
use opgate_domain::{AgentId, BusinessId, OperationStatus};
use opgate_store::{OperationFilter, OperationRecord, OperatorAction, Store};
use uuid::Uuid;

#[derive(Subcommand)]
pub enum OperationsCommand {
    /// List operations, newest first.
    List {
        /// Only this status (e.g. MANUAL_REVIEW; any case).
        #[arg(long, ignore_case = true, value_parser = status_parser())]
        status: Option<OperationStatus>,
        /// Only this agent's operations.
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one operation and its whole audit trail.
    Show {
        /// The operation's id, or enough of its start to name only it (8 or more hex
        /// digits, as `operations list` shows them).
        operation_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Resolve an operation in MANUAL_REVIEW as SUCCEEDED or FAILED.
    Resolve {
        operation_id: Uuid,
        #[arg(long, value_enum, ignore_case = true)]
        status: Resolution,
        /// The provider's reference for the payment, when known.
        #[arg(long)]
        provider_reference: Option<String>,
        /// Why: what the operator checked. Kept in the audit trail.
        #[arg(long)]
        reason: String,
        /// Who is deciding.
        #[arg(long)]
        operator: String,
    },
    /// Send an operation in MANUAL_REVIEW back to the reconciler.
    RetryReconcile {
        operation_id: Uuid,
        #[arg(long, default_value = "sent back to the reconciler by an operator")]
        reason: String,
        #[arg(long, env = "USER", default_value = "operator")]
        operator: String,
    },
    /// Approve an operation that is AWAITING_APPROVAL: it becomes PENDING and is queued
    /// for the executors.
    Approve {
        operation_id: Uuid,
        /// Who is deciding.
        #[arg(long)]
        operator: String,
        /// Why, if worth saying. Kept in the audit trail.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject an operation that is AWAITING_APPROVAL: it becomes FAILED and is never
    /// sent.
    Reject {
        operation_id: Uuid,
        /// Who is deciding.
        #[arg(long)]
        operator: String,
        /// Why. Kept in the audit trail and as the operation's last error.
        #[arg(long)]
        reason: String,
    },
}

/// The longest reason an operator may give (as the admin API allows).
const MAX_REASON_CHARS: usize = 1000;

/// An operator's name, as `opgate operators create` accepts it.
fn operator_name(name: &str) -> anyhow::Result<AgentId> {
    AgentId::parse(name).with_context(|| format!("invalid operator name {name:?}"))
}

/// A decision's reason: not empty, at most 1000 characters, no control characters.
fn decision_reason(reason: &str) -> anyhow::Result<BusinessId> {
    Ok(BusinessId::parse_at_most(
        "reason",
        reason,
        MAX_REASON_CHARS,
    )?)
}

#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Resolution {
    Succeeded,
    Failed,
}

/// One of the statuses, in any case; clap's error for anything else lists them.
fn status_parser() -> impl TypedValueParser<Value = OperationStatus> {
    PossibleValuesParser::new(OperationStatus::ALL.map(OperationStatus::as_str))
        .try_map(|status| status.to_ascii_uppercase().parse::<OperationStatus>())
}

pub async fn run(store: &Store, command: OperationsCommand) -> anyhow::Result<()> {
    match command {
        OperationsCommand::List {
            status,
            agent,
            limit,
            json,
        } => {
            let filter = OperationFilter {
                status,
                agent_id: agent,
                limit: limit.clamp(1, 10_000),
            };
            let operations = store.list_operations(&filter).await?;
            if json {
                for op in &operations {
                    println!("{}", operation_json(op));
                }
            } else {
                print_table(&operations);
            }
            Ok(())
        }
        OperationsCommand::Show { operation_id, json } => show(store, operation_id, json).await,
        OperationsCommand::Resolve {
            operation_id,
            status,
            provider_reference,
            reason,
            operator,
        } => {
            let to = match status {
                Resolution::Succeeded => OperationStatus::Succeeded,
                Resolution::Failed => OperationStatus::Failed,
            };
            let actor = format!("operator:{operator}");
            let action = store
                .resolve_manual_review(
                    operation_id,
                    to,
                    provider_reference.as_deref(),
                    &reason,
                    &actor,
                )
                .await?;
            if matches!(action, OperatorAction::Applied(_)) {
                // Agents waiting with Prefer: wait hear of it at once; if this fails they poll.
                let _ = store.notify_settled(&[operation_id]).await;
            }
            report(operation_id, action)
        }
        OperationsCommand::RetryReconcile {
            operation_id,
            reason,
            operator,
        } => {
            let actor = format!("operator:{operator}");
            let action = store
                .resolve_manual_review(
                    operation_id,
                    OperationStatus::Unknown,
                    None,
                    &reason,
                    &actor,
                )
                .await?;
            report(operation_id, action)
        }
        OperationsCommand::Approve {
            operation_id,
            operator,
            reason,
        } => {
            let operator = operator_name(&operator)?;
            let reason = reason.as_deref().map(decision_reason).transpose()?;
            let action = store
                .approve_operation(
                    operation_id,
                    operator.as_str(),
                    reason.as_ref().map(BusinessId::as_str),
                )
                .await?;
            if matches!(action, OperatorAction::Applied(_)) {
                // Executors hear of it at once; if this fails they find it when they poll.
                let _ = store.notify_outbox().await;
            }
            report(operation_id, action)
        }
        OperationsCommand::Reject {
            operation_id,
            operator,
            reason,
        } => {
            let operator = operator_name(&operator)?;
            let reason = decision_reason(&reason)?;
            let action = store
                .reject_operation(operation_id, operator.as_str(), reason.as_str())
                .await?;
            if matches!(action, OperatorAction::Applied(_)) {
                // Agents waiting with Prefer: wait hear of it at once; if this fails they poll.
                let _ = store.notify_settled(&[operation_id]).await;
            }
            report(operation_id, action)
        }
    }
}

fn report(operation_id: Uuid, action: OperatorAction) -> anyhow::Result<()> {
    match action {
        OperatorAction::Applied(op) => {
            println!("{operation_id} is now {}", op.status);
            Ok(())
        }
        OperatorAction::NotInReview(status) => {
            bail!("{operation_id} is {status}, not MANUAL_REVIEW: nothing changed")
        }
        OperatorAction::NotAwaitingApproval(status) => {
            bail!("{operation_id} is {status}, not AWAITING_APPROVAL: nothing changed")
        }
        OperatorAction::NotFound => bail!("no operation {operation_id}"),
    }
}

async fn show(store: &Store, id_or_prefix: String, json: bool) -> anyhow::Result<()> {
    let op = match Uuid::parse_str(&id_or_prefix) {
        Ok(id) => store.find_operation(id).await?,
        Err(_) => {
            let hex = id_or_prefix.chars().filter(|c| *c != '-').count();
            if hex < 8
                || !id_or_prefix
                    .chars()
                    .all(|c| c == '-' || c.is_ascii_hexdigit())
            {
                bail!(
                    "{id_or_prefix:?} is not an operation id nor 8 or more of its first hex digits"
                );
            }
            let mut found = store.find_operations_by_id_prefix(&id_or_prefix).await?;
            if found.len() > 1 {
                bail!("{id_or_prefix} starts more than one operation id; give more of it");
            }
            found.pop()
        }
    };
    let Some(op) = op else {
        bail!("no operation {id_or_prefix}");
    };
    let operation_id = op.operation_id;
    let events = store.operation_events(operation_id).await?;
    if json {
        let trail: Vec<_> = events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "at": e.created_at, "from": e.from_status, "to": e.to_status, "actor": e.actor,
                    "reason": e.reason, "fencing_token": e.fencing_token, "outcome": e.outcome,
                })
            })
            .collect();
        let mut body = operation_json(&op);
        body["events"] = trail.into();
        println!("{body}");
        return Ok(());
    }
    println!("operation    {}", op.operation_id);
    println!("agent        {}", op.agent_id);
    println!("type         {}", op.operation_type);
    println!("status       {}", op.status);
    println!(
        "reference    {}",
        op.provider_reference.as_deref().unwrap_or("-")
    );
    println!("attempts     {}", op.attempts);
    println!("last error   {}", op.last_error.as_deref().unwrap_or("-"));
    println!(
        "created      {}",
        op.created_at.format("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    println!(
        "updated      {}",
        op.updated_at.format("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    println!();
    println!(
        "{:<24} {:<13} {:<13} {:<6} {:<32} REASON",
        "AT", "FROM", "TO", "TOKEN", "ACTOR"
    );
    for e in events {
        let to = if e.outcome == "applied" {
            e.to_status
        } else {
            format!("{} (refused)", e.to_status)
        };
        println!(
            "{:<24} {:<13} {:<13} {:<6} {:<32} {}",
            e.created_at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            e.from_status.as_deref().unwrap_or("-"),
            to,
            e.fencing_token
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into()),
            e.actor,
            e.reason.as_deref().unwrap_or(""),
        );
    }
    Ok(())
}

fn operation_json(op: &OperationRecord) -> serde_json::Value {
    serde_json::json!({
        "operation_id": op.operation_id, "agent_id": op.agent_id, "operation_type": op.operation_type,
        "status": op.status.as_str(), "provider_reference": op.provider_reference, "attempts": op.attempts,
        "last_error": op.last_error, "created_at": op.created_at, "updated_at": op.updated_at,
    })
}

fn print_table(operations: &[OperationRecord]) {
    println!(
        "{:<36}  {:<24} {:<13} {:>8}  {:<20} LAST ERROR",
        "OPERATION", "AGENT", "STATUS", "ATTEMPTS", "UPDATED"
    );
    for op in operations {
        println!(
            "{:<36}  {:<24} {:<13} {:>8}  {:<20} {}",
            op.operation_id,
            op.agent_id,
            op.status.as_str(),
            op.attempts,
            op.updated_at.format("%Y-%m-%dT%H:%M:%SZ"),
            op.last_error.as_deref().unwrap_or("-"),
        );
    }
}
