//! A budgeted registration on one node in one round trip: BEGIN, the agent's lock, one
//! statement that reads the window, answers a replay and writes the operation, its
//! outbox and audit events and its spending, and COMMIT, sent together (pipelined on
//! one connection). Done step by step (`budgets.rs`, kept for Citus) it took seven
//! round trips, five of them with the agent's lock held; since every budgeted
//! registration of an agent queues on that lock, the round trips were its ceiling.

use rust_decimal::Decimal;
use tokio_postgres::Row;

use crate::budgets::{budget_events, spent_in_window, BudgetedRegistration, LOCK_AGENT};
use crate::error::StoreError;
use crate::operations::{
    operation_columns, operation_from_row, NewOperation, Registration, RowValues,
};

/// $1 id, $2 agent, $3 key, $4 kind, $5 provider, $6 request hash, $7 payload, $8 trace
/// context, $9 actor, $10 amount, $11 currency, $12 approval timeout in ms (NULL: none),
/// $13 budget. Runs after the agent's lock, so its snapshot holds every budgeted
/// registration committed before. Always one row: the window's spending, and the
/// operation inserted (`created`) or already under the key, or none of either (over
/// the budget, or the key taken meanwhile by a refund, which does not lock the agent).
pub(crate) const REGISTER_WITHIN_BUDGET: &str = concat!(
    "WITH window_spent AS (",
    spent_in_window!("$2::text", "$11::text"),
    "
    ), existing AS (
        SELECT ",
    operation_columns!(),
    " FROM operations WHERE agent_id = $2::text AND idempotency_key = $3::text
    ), inserted AS (
        INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type,
                                provider, request_hash, request_payload, trace_context,
                                amount, currency, customer_id, counted_in_budget, status,
                                approval_expires_at)
        SELECT $1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::jsonb, $8::text,
               $10::numeric, $11::text, $7::jsonb->>'customer_id', true,
               CASE WHEN $12::float8 IS NULL THEN 'PENDING' ELSE 'AWAITING_APPROVAL' END,
               now() + $12::float8 * interval '1 millisecond'
        FROM window_spent
        WHERE window_spent.spent + $10::numeric <= $13::numeric
          AND NOT EXISTS (SELECT 1 FROM existing)
        ON CONFLICT (agent_id, idempotency_key) DO NOTHING
        RETURNING ",
    operation_columns!(),
    ", trace_context
    ), ",
    budget_events!("$9::text"),
    ", spending AS (
        INSERT INTO agent_spend (agent_id, currency, hour, amount)
        SELECT agent_id, currency, date_trunc('hour', now() AT TIME ZONE 'UTC'), amount
        FROM inserted
        ON CONFLICT (agent_id, currency, hour)
            DO UPDATE SET amount = agent_spend.amount + EXCLUDED.amount
    )
    SELECT window_spent.spent, window_spent.frees_at, found.*
    FROM window_spent LEFT JOIN (
        SELECT true AS created, ",
    operation_columns!(),
    " FROM inserted
        UNION ALL
        SELECT false AS created, ",
    operation_columns!(),
    " FROM existing
    ) AS found ON true"
);

/// What the statement found: the answer, or `None` when the key was taken meanwhile
/// (the caller answers it as any registration whose key exists).
pub(crate) async fn register_in_one_trip(
    client: &deadpool_postgres::Object,
    new: &NewOperation<'_>,
    budget: Decimal,
) -> Result<Option<BudgetedRegistration>, StoreError> {
    let money = new
        .request
        .money()
        .ok_or_else(|| StoreError::Corrupt("a budgeted operation without money".into()))?;
    let amount = money.amount();
    let values = RowValues::new(
        new,
        new.request.fields(),
        new.provider,
        Some((amount, money.currency().code().to_owned())),
    );
    let approval_ms = new.awaiting_approval_for.map(crate::execution::millis);
    // Prepared before the pipeline (once per connection), so that the four requests
    // below are all sent on the first poll: none waits for another's answer.
    let lock = client.prepare_cached(LOCK_AGENT).await?;
    let register = client.prepare_cached(REGISTER_WITHIN_BUDGET).await?;
    let rest: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&approval_ms, &budget];
    let params = values.params_with(&rest);
    // If a statement fails, the transaction is aborted and the COMMIT that follows it
    // in the pipeline ends it as a rollback: the connection goes back idle either way.
    // Every answer is awaited, and the first error in pipeline order is the cause (a
    // later one only says the transaction was aborted).
    let agent: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&new.agent_id];
    let (begin, locked, registered, commit) = tokio::join!(
        client.batch_execute("BEGIN"),
        client.execute(&lock, &agent),
        client.query_one(&register, &params),
        client.batch_execute("COMMIT"),
    );
    begin?;
    locked?;
    let row = registered?;
    commit?;
    answer(&row, new, amount, budget)
}

fn answer(
    row: &Row,
    new: &NewOperation<'_>,
    amount: Decimal,
    budget: Decimal,
) -> Result<Option<BudgetedRegistration>, StoreError> {
    let registered = |registration| Ok(Some(BudgetedRegistration::Registered(registration)));
    match row.get::<_, Option<bool>>("created") {
        Some(true) => registered(Registration::Created(operation_from_row(row)?)),
        Some(false) => {
            let existing = operation_from_row(row)?;
            registered(if existing.request_hash == *new.request.request_hash() {
                Registration::Replayed(existing)
            } else {
                Registration::KeyReused
            })
        }
        None => {
            let spent: Decimal = row.get("spent");
            if spent + amount > budget {
                Ok(Some(BudgetedRegistration::Exceeded {
                    spent,
                    frees_at: row.get("frees_at"),
                }))
            } else {
                Ok(None)
            }
        }
    }
}
