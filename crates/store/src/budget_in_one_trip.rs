//! Budgeted registrations on one node in one round trip: BEGIN, the agents' locks, for
//! each registration one statement that reads the window, answers a replay and writes
//! the operation, its outbox and audit events and its spending, and COMMIT, sent
//! together (pipelined on one connection). Done step by step (`budgets.rs`, kept for Citus) it took seven
//! round trips, five of them with the agent's lock held; since every budgeted
//! registration of an agent queues on that lock, the round trips were its ceiling.

use std::future::Future;
use std::pin::Pin;

use futures_util::future::join_all;
use rust_decimal::Decimal;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::budgets::{spent_in_window, BudgetedRegistration, LOCK_AGENT};
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
    ), outbox_event AS (
        INSERT INTO outbox (operation_id, agent_id, event_type, trace_context)
        SELECT operation_id, agent_id, 'execute', trace_context FROM inserted
        WHERE status = 'PENDING'
    ), audit_event AS (
        INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
        SELECT operation_id, agent_id, NULL, status, $9::text,
               CASE WHEN status = 'PENDING' THEN 'registered'
                    ELSE 'registered; awaiting approval' END
        FROM inserted
    ), spending AS (
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

/// One request of the pipeline: a registration's row, or nothing for the others.
type Request<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Row>, tokio_postgres::Error>> + Send + 'a>>;

/// One budgeted registration, as the statement takes it.
pub(crate) struct Budgeted<'a> {
    pub new: NewOperation<'a>,
    pub budget: Decimal,
}

/// What the statement found for each registration, in order: the answer, or `None`
/// when the key was taken meanwhile (the caller answers it as any registration whose
/// key exists).
///
/// All in one transaction, sent together: BEGIN, the lock of every agent the batch
/// names (in a fixed order, so two batches never wait for each other in a cycle), one
/// `REGISTER_WITHIN_BUDGET` per registration, COMMIT. The statements run in the order
/// sent, each seeing the spending and keys of the ones before it, exactly as if each
/// had its own transaction; the agent's lock is taken, and the commit waited for, once
/// for the batch rather than once for each registration.
pub(crate) async fn register_in_one_trip(
    client: &deadpool_postgres::Object,
    batch: &[Budgeted<'_>],
) -> Result<Vec<Option<BudgetedRegistration>>, StoreError> {
    let amounts = batch
        .iter()
        .map(|item| {
            item.new
                .request
                .money()
                .ok_or_else(|| StoreError::Corrupt("a budgeted operation without money".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let values: Vec<RowValues> = batch
        .iter()
        .zip(&amounts)
        .map(|(item, money)| {
            let money = (money.amount(), money.currency().code().to_owned());
            RowValues::new(
                &item.new,
                item.new.request.fields(),
                item.new.provider,
                Some(money),
            )
        })
        .collect();
    let approvals: Vec<Option<f64>> = batch
        .iter()
        .map(|item| item.new.awaiting_approval_for.map(crate::execution::millis))
        .collect();
    let rests: Vec<[&(dyn ToSql + Sync); 2]> = approvals
        .iter()
        .zip(batch)
        .map(|(approval_ms, item)| [approval_ms as _, &item.budget as _])
        .collect();
    let params: Vec<_> = values
        .iter()
        .zip(&rests)
        .map(|(values, rest)| values.params_with(rest))
        .collect();
    let mut agents: Vec<&str> = batch.iter().map(|item| item.new.agent_id).collect();
    agents.sort_unstable();
    agents.dedup();
    // Prepared before the pipeline (once per connection), so that every request below
    // is sent on the first poll: none waits for another's answer.
    let lock = client.prepare_cached(LOCK_AGENT).await?;
    let register = client.prepare_cached(REGISTER_WITHIN_BUDGET).await?;
    // If a statement fails, the transaction is aborted and the COMMIT that follows it
    // in the pipeline ends it as a rollback: the connection goes back idle either way.
    // Every answer is awaited, and the first error in pipeline order is the cause (a
    // later one only says the transaction was aborted). `join_all` polls in order, so
    // the requests leave in this order.
    let mut pipeline: Vec<Request> = Vec::with_capacity(agents.len() + batch.len() + 2);
    pipeline.push(Box::pin(async {
        client.batch_execute("BEGIN").await.map(|_| None)
    }));
    for agent in &agents {
        let lock = &lock;
        pipeline.push(Box::pin(async move {
            client.execute(lock, &[agent]).await.map(|_| None)
        }));
    }
    for params in &params {
        let register = &register;
        pipeline.push(Box::pin(async move {
            client.query_one(register, params).await.map(Some)
        }));
    }
    pipeline.push(Box::pin(async {
        client.batch_execute("COMMIT").await.map(|_| None)
    }));
    let mut rows = Vec::with_capacity(batch.len());
    for answer in join_all(pipeline).await {
        if let Some(row) = answer? {
            rows.push(row);
        }
    }
    rows.iter()
        .zip(batch)
        .zip(&amounts)
        .map(|((row, item), money)| answer(row, &item.new, money.amount(), item.budget))
        .collect()
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
