//! Registering an operation that spends against the agent's 24-hour budget: in one
//! transaction, lock the agent's row (every budgeted registration of the agent queues
//! on it), answer a replay, and insert the operation only if what the agent has spent
//! in that currency over the last 24 hours (money-moving operations, not refunds, not
//! FAILED) plus this amount stays within the budget. Intake's group commit batches these
//! apart from other registrations (`budget_batch.rs`): each needs to see the ones before
//! it, so a batch reads the spending once under the locks, decides each registration in
//! queue order and writes the accepted ones with one statement. A lone registration on
//! one node is sent as one round trip (`budget_in_one_trip.rs`); on Citus each runs
//! step by step here.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use crate::budget_in_one_trip::register_in_one_trip;
use crate::error::StoreError;
use crate::operations::{
    insert_operation, operation_from_row, Layout, NewOperation, Registration,
    FIND_BY_IDEMPOTENCY_KEY,
};
use crate::pool::Store;

#[derive(Debug, Clone, PartialEq)]
// One answer per request, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum BudgetedRegistration {
    Registered(Registration),
    /// Over the budget; nothing written. `frees_at`: when the oldest spending in the
    /// window leaves it (headroom may come back sooner if an operation fails).
    Exceeded {
        spent: Decimal,
        frees_at: Option<DateTime<Utc>>,
    },
    /// Only from a batch, for a registration checked against the agent's row
    /// (`PendingBudgeted::checked_against`) that the row did not confirm: nothing
    /// written; read the agent again.
    Unconfirmed,
}

/// `FOR NO KEY UPDATE`: serialises budgeted registrations of one agent without
/// blocking its other inserts (which take KEY SHARE on the row through the foreign key).
pub(crate) const LOCK_AGENT: &str = "SELECT 1 FROM agents WHERE agent_id = $1 FOR NO KEY UPDATE";

/// Read after the lock, so every registration committed before it is counted: at most
/// 25 hourly rows (the last 24 hours, rounded out to whole hours).
/// `spent_in_window!("$agent", "$currency")`: the one definition of the window, for
/// this statement and for `REGISTER_WITHIN_BUDGET`, which names its own parameters.
macro_rules! spent_in_window {
    ($agent:literal, $currency:literal) => {
        concat!(
            "SELECT COALESCE(sum(amount), 0) AS spent,
                    (min(hour) FILTER (WHERE amount > 0) + interval '25 hours') AT TIME ZONE 'UTC' AS frees_at
             FROM agent_spend
             WHERE agent_id = ",
            $agent,
            " AND currency = ",
            $currency,
            "
               AND hour >= date_trunc('hour', (now() - interval '24 hours') AT TIME ZONE 'UTC')"
        )
    };
}
pub(crate) use spent_in_window;

/// The CTEs that follow a budgeted `inserted` (with `status` and `trace_context`):
/// the outbox event of each operation not awaiting approval, and the audit event of
/// each, by `$actor`. `budget_events!("$actor")`, for both budgeted statements.
macro_rules! budget_events {
    ($actor:literal) => {
        concat!(
            "outbox_event AS (
        INSERT INTO outbox (operation_id, agent_id, event_type, trace_context)
        SELECT operation_id, agent_id, 'execute', trace_context FROM inserted
        WHERE status = 'PENDING'
    ), audit_event AS (
        INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
        SELECT operation_id, agent_id, NULL, status, ",
            $actor,
            ",
               CASE WHEN status = 'PENDING' THEN 'registered'
                    ELSE 'registered; awaiting approval' END
        FROM inserted
    )"
        )
    };
}
pub(crate) use budget_events;

const SPENT_IN_WINDOW: &str = spent_in_window!("$1", "$2");

/// Counts the amount in this hour's row, and marks the operation as counted (so that
/// it gives the amount back if it fails: migration V10's trigger).
const RECORD_SPEND: &str = "
WITH counted AS (
    UPDATE operations SET counted_in_budget = true
    WHERE operation_id = $4 AND agent_id = $1
)
INSERT INTO agent_spend (agent_id, currency, hour, amount)
VALUES ($1, $2, date_trunc('hour', now() AT TIME ZONE 'UTC'), $3)
ON CONFLICT (agent_id, currency, hour) DO UPDATE SET amount = agent_spend.amount + EXCLUDED.amount";

/// When a budget is set or changed: the agent's hourly spending rebuilt from its
/// operations in the window (money-moving, not refunds, not FAILED), each marked as
/// counted. Run with the agent's row locked, so no budgeted registration interleaves.
pub(crate) const CLEAR_SPEND: &str = "DELETE FROM agent_spend WHERE agent_id = $1";
pub(crate) const REFILL_SPEND: &str = "
WITH window_ops AS (
    UPDATE operations SET counted_in_budget = true
    WHERE agent_id = $1 AND amount IS NOT NULL AND operation_type <> 'refund'
      AND status <> 'FAILED'
      AND created_at >= date_trunc('hour', (now() - interval '24 hours') AT TIME ZONE 'UTC')
                        AT TIME ZONE 'UTC'
    RETURNING agent_id, currency, created_at, amount
)
INSERT INTO agent_spend (agent_id, currency, hour, amount)
SELECT agent_id, currency, date_trunc('hour', created_at AT TIME ZONE 'UTC'), sum(amount)
FROM window_ops
GROUP BY 1, 2, 3";

impl Store {
    #[tracing::instrument(name = "INSERT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operations", opgate.budgeted = true))]
    pub async fn register_within_budget(
        &self,
        new: &NewOperation<'_>,
        budget: Decimal,
    ) -> Result<BudgetedRegistration, StoreError> {
        let layout = self.layout().await?;
        if layout == Layout::Distributed {
            return self.register_within_budget_in_steps(new, budget).await;
        }
        let answer = register_in_one_trip(&self.client().await?, new, budget).await?;
        self.key_taken_meanwhile(new, answer).await
    }

    /// `answer`, or for `None` (the key was taken meanwhile by a registration that
    /// does not queue on the agent: a refund under the same key) the registration
    /// answered as any whose key exists.
    pub(crate) async fn key_taken_meanwhile(
        &self,
        new: &NewOperation<'_>,
        answer: Option<BudgetedRegistration>,
    ) -> Result<BudgetedRegistration, StoreError> {
        match answer {
            Some(answer) => Ok(answer),
            None => Ok(BudgetedRegistration::Registered(
                self.register_operation(new).await?,
            )),
        }
    }

    /// `register_within_budget` as separate statements in one transaction, for Citus
    /// (where a statement whose CTEs insert from one another spans connections).
    async fn register_within_budget_in_steps(
        &self,
        new: &NewOperation<'_>,
        budget: Decimal,
    ) -> Result<BudgetedRegistration, StoreError> {
        let money = new
            .request
            .money()
            .ok_or_else(|| StoreError::Corrupt("a budgeted operation without money".into()))?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        transaction.execute(LOCK_AGENT, &[&new.agent_id]).await?;
        let key = new.idempotency_key.as_str();
        if let Some(row) = transaction
            .query_opt(FIND_BY_IDEMPOTENCY_KEY, &[&new.agent_id, &key])
            .await?
        {
            let existing = operation_from_row(&row)?;
            transaction.rollback().await?;
            return Ok(BudgetedRegistration::Registered(
                if existing.request_hash == *new.request.request_hash() {
                    Registration::Replayed(existing)
                } else {
                    Registration::KeyReused
                },
            ));
        }
        let currency = money.currency().code();
        let window = transaction
            .query_one(SPENT_IN_WINDOW, &[&new.agent_id, &currency])
            .await?;
        let spent: Decimal = window.get("spent");
        if spent + money.amount() > budget {
            transaction.rollback().await?;
            return Ok(BudgetedRegistration::Exceeded {
                spent,
                frees_at: window.get("frees_at"),
            });
        }
        let spent_now = money.amount();
        let money = Some((spent_now, currency.to_owned()));
        let inserted = insert_operation(
            &transaction,
            new,
            new.request.fields(),
            new.provider,
            money,
            None,
            Layout::Distributed,
        )
        .await?;
        let Some(row) = inserted else {
            // Taken meanwhile by a registration that does not queue on the agent (a
            // refund under the same key): answered as any reused key is.
            transaction.rollback().await?;
            return Ok(BudgetedRegistration::Registered(
                self.register_operation(new).await?,
            ));
        };
        let record = operation_from_row(&row)?;
        transaction
            .execute(
                RECORD_SPEND,
                &[&new.agent_id, &currency, &spent_now, &record.operation_id],
            )
            .await?;
        transaction.commit().await?;
        Ok(BudgetedRegistration::Registered(Registration::Created(
            record,
        )))
    }
}
