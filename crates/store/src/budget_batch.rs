//! Group commit for budgeted registrations. One at a time, each budgeted registration
//! of an agent holds the agent's lock through its own commit, so an agent's
//! registrations were one per commit (about 1,000/s here, a seventh of its unbudgeted
//! rate). A batch takes the locks once, decides every registration in queue order
//! from one read of the spending, writes the accepted ones with one statement and
//! commits once (`budget_batch_trip.rs`): each registration is still judged as if it
//! had run alone after the ones before it, so exactly what fits is accepted.
//!
//! A batch that the database refuses (an error it reports, which rolled the whole
//! transaction back) is run again one registration at a time, so a registration that
//! cannot be written fails alone and the others are answered as if never batched. A
//! lost connection fails the batch: whether its COMMIT arrived is not known, and each
//! agent retries under its key, as for a single registration.

use std::time::Duration;

use opgate_domain::{IdempotencyKey, OperationRequest};
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::budget_batch_trip::{register_batch_in_two_trips, Budgeted};
use crate::budgets::BudgetedRegistration;
use crate::error::StoreError;
use crate::operations::{Layout, NewOperation};
use crate::pool::Store;
use crate::registration_batch::AgentCheck;

/// A budgeted registration that can wait in a queue (owns its values).
#[derive(Debug, Clone)]
pub struct PendingBudgeted {
    operation_id: Uuid,
    agent_id: String,
    idempotency_key: IdempotencyKey,
    request: OperationRequest,
    provider: String,
    awaiting_approval_for: Option<Duration>,
    trace_context: Option<String>,
    budget: Decimal,
    agent_check: Option<AgentCheck>,
}

impl PendingBudgeted {
    /// `new`, to be registered only if it fits in `budget` (the agent's daily budget in
    /// the operation's currency).
    pub fn from_new(new: &NewOperation<'_>, budget: Decimal) -> Self {
        Self {
            operation_id: new.operation_id,
            agent_id: new.agent_id.to_owned(),
            idempotency_key: new.idempotency_key.clone(),
            request: new.request.clone(),
            provider: new.provider.to_owned(),
            awaiting_approval_for: new.awaiting_approval_for,
            trace_context: new.trace_context.map(str::to_owned),
            budget,
            agent_check: None,
        }
    }

    /// Registered, and answered from a stored operation, only while the agent's row is
    /// as `check` says, as in the plain batch (`PendingRegistration::checked_against`):
    /// the policy the budget came from is the one in force. Otherwise `Unconfirmed`.
    pub fn checked_against(mut self, check: AgentCheck) -> Self {
        self.agent_check = Some(check);
        self
    }

    fn new_operation(&self) -> NewOperation<'_> {
        NewOperation {
            operation_id: self.operation_id,
            agent_id: &self.agent_id,
            idempotency_key: &self.idempotency_key,
            request: &self.request,
            provider: &self.provider,
            awaiting_approval_for: self.awaiting_approval_for,
            trace_context: self.trace_context.as_deref(),
        }
    }
}

impl Store {
    /// Registers each of `batch` within its budget and answers each in order (see the
    /// module): `Err` fails the whole batch, an inner `Err` only its member. On Citus
    /// each is registered on its own, step by step.
    #[tracing::instrument(name = "INSERT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operations", opgate.budgeted = true, db.operation.batch.size = batch.len()))]
    pub async fn register_budgeted_batch(
        &self,
        batch: &[PendingBudgeted],
    ) -> Result<Vec<Result<BudgetedRegistration, StoreError>>, StoreError> {
        let checked = batch.iter().any(|pending| pending.agent_check.is_some());
        if (batch.len() > 1 || checked) && self.layout().await? == Layout::Single {
            match self.register_together(batch).await {
                Err(StoreError::Query(error)) => {
                    let (size, error) = (batch.len(), StoreError::Query(error));
                    tracing::warn!(size, %error, "budgeted batch refused; registering its members one by one");
                }
                answered => return answered,
            }
        }
        let mut answers = Vec::with_capacity(batch.len());
        for pending in batch {
            // Alone, nothing reads the agent's row to confirm it (on Citus each node
            // keeps its own copy of it): the caller reads the agent and comes back.
            if pending.agent_check.is_some() {
                answers.push(Ok(BudgetedRegistration::Unconfirmed));
                continue;
            }
            let new = pending.new_operation();
            answers.push(self.register_within_budget(&new, pending.budget).await);
        }
        Ok(answers)
    }

    async fn register_together(
        &self,
        batch: &[PendingBudgeted],
    ) -> Result<Vec<Result<BudgetedRegistration, StoreError>>, StoreError> {
        let items: Vec<Budgeted> = batch
            .iter()
            .map(|pending| Budgeted {
                new: pending.new_operation(),
                budget: pending.budget,
                check: pending.agent_check.as_ref(),
            })
            .collect();
        let answers = register_batch_in_two_trips(&self.client().await?, &items).await?;
        let mut registered = Vec::with_capacity(batch.len());
        for (item, answer) in items.iter().zip(answers) {
            registered.push(self.key_taken_meanwhile(&item.new, answer).await);
        }
        Ok(registered)
    }
}
