//! The `operations` table and the registration transaction: the operation row, its
//! outbox event and its first audit event are written by one statement, so they
//! commit together or not at all.

use chrono::{DateTime, Utc};
use opgate_domain::{IdempotencyKey, OperationRequest, OperationStatus, RequestHash};
use rust_decimal::Decimal;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::StoreError;
use crate::pool::Store;

#[derive(Clone, Copy)]
pub struct NewOperation<'a> {
    pub operation_id: Uuid,
    pub agent_id: &'a str,
    pub idempotency_key: &'a IdempotencyKey,
    pub request: &'a OperationRequest,
    /// The provider that will execute it (the kind's binding), recorded so that every
    /// attempt and lookup goes to the same one.
    pub provider: &'a str,
    /// `Some`: the operation waits for an operator's approval, which expires after
    /// this long; nothing is enqueued until it is given.
    pub awaiting_approval_for: Option<std::time::Duration>,
    /// W3C `traceparent` of the registering request, carried to the executor.
    pub trace_context: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OperationRecord {
    pub operation_id: Uuid,
    pub agent_id: String,
    pub operation_type: String,
    pub provider: String,
    pub status: OperationStatus,
    pub provider_reference: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub request_hash: RequestHash,
    /// The money the operation moves, for kinds that move money.
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
// One answer per request, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Registration {
    /// A new operation, with its outbox event and audit event.
    Created(OperationRecord),
    /// The key was already used by this agent for the same request.
    Replayed(OperationRecord),
    /// The key was already used by this agent for a different request; nothing written.
    KeyReused,
}

/// The columns `operation_from_row` reads, for every statement that returns operations.
macro_rules! operation_columns {
    () => {
        "operation_id, agent_id, operation_type, provider, status, provider_reference, \
         attempts, last_error, request_hash, amount, currency, created_at, updated_at"
    };
}
pub(crate) use operation_columns;

/// The operation row, or nothing when the agent's key is taken ($1..$8, $10..$12; $9,
/// the actor, is the audit row's): `ON CONFLICT DO NOTHING` makes a concurrent
/// duplicate wait for the first insert to commit and then insert nothing.
macro_rules! insert_operation_row {
    () => {
        "INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type,
                                provider, request_hash, request_payload, trace_context,
                                amount, currency, parent_operation_id, customer_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, $11, $12, $7::jsonb->>'customer_id')
        ON CONFLICT (agent_id, idempotency_key) DO NOTHING
        RETURNING "
    };
}

/// `insert_operation_row` for an operation that waits for an operator: registered as
/// AWAITING_APPROVAL with the time its approval expires ($13 ms from now).
macro_rules! insert_awaiting_row {
    () => {
        "INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type,
                                provider, request_hash, request_payload, trace_context,
                                amount, currency, parent_operation_id, customer_id, status,
                                approval_expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, $11, $12, $7::jsonb->>'customer_id',
                'AWAITING_APPROVAL', now() + $13::float8 * interval '1 millisecond')
        ON CONFLICT (agent_id, idempotency_key) DO NOTHING
        RETURNING "
    };
}

/// The outbox event and the audit event of each row of an `inserted` CTE (which
/// returns `trace_context` too), $9 the actor: the CTEs after `inserted`.
macro_rules! registered_events {
    () => {
        "outbox_event AS (
            INSERT INTO outbox (operation_id, agent_id, event_type, trace_context)
            SELECT operation_id, agent_id, 'execute', trace_context FROM inserted
        ), audit_event AS (
            INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
            SELECT operation_id, agent_id, NULL, status, $9, 'registered' FROM inserted
        )"
    };
}
pub(crate) use {insert_operation_row, registered_events};

/// The row, its outbox event and its audit event in one statement: the outbox and
/// audit rows are written only for a row this statement inserted. No
/// check-then-insert, no NOTIFY in the transaction.
pub(crate) const REGISTER_OPERATION: &str = concat!(
    "WITH inserted AS (",
    insert_operation_row!(),
    operation_columns!(),
    ", trace_context
    ), ",
    registered_events!(),
    "
    SELECT ",
    operation_columns!(),
    " FROM inserted"
);

/// `REGISTER_OPERATION` for an operation that waits for an operator: no outbox event,
/// so that nothing can claim it before the approval enqueues it.
pub(crate) const REGISTER_AWAITING_APPROVAL: &str = concat!(
    "WITH inserted AS (",
    insert_awaiting_row!(),
    operation_columns!(),
    "
    ), audit_event AS (
        INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
        SELECT operation_id, agent_id, NULL, status, $9, 'registered; awaiting approval' FROM inserted
    )
    SELECT ",
    operation_columns!(),
    " FROM inserted"
);

/// On Citus, the same writes as separate statements in the caller's transaction:
/// Citus runs a statement whose CTEs insert from one another as several, over several
/// connections, and commits them in two phases; these, each naming the agent, go to
/// the one node that holds it, which commits alone.
const INSERT_OPERATION_ROW: &str = concat!(insert_operation_row!(), operation_columns!());
const INSERT_AWAITING_ROW: &str = concat!(insert_awaiting_row!(), operation_columns!());
pub(crate) const INSERT_OUTBOX_EVENT: &str = "
INSERT INTO outbox (operation_id, agent_id, event_type, trace_context)
VALUES ($1, $2, 'execute', $3)";
const INSERT_REGISTERED_EVENT: &str = "
INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
VALUES ($1, $2, NULL, $3, $4, $5)";

/// The types of `insert_operation_row`'s parameters up to $9, which it does not use
/// (so that the statements share one parameter list).
const ROW_PARAMETER_TYPES: [Type; 9] = [
    Type::UUID,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::JSONB,
    Type::TEXT,
    Type::TEXT,
];

pub(crate) const FIND_BY_IDEMPOTENCY_KEY: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE agent_id = $1 AND idempotency_key = $2"
);

const FIND_BY_ID: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE operation_id = $1"
);

const FIND_FOR_AGENT: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE operation_id = $1 AND agent_id = $2"
);

impl Store {
    /// Registers the operation once per (agent, idempotency key), or reports what the
    /// key already names. Safe under any number of concurrent identical requests.
    #[tracing::instrument(name = "INSERT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operations"))]
    pub async fn register_operation(
        &self,
        new: &NewOperation<'_>,
    ) -> Result<Registration, StoreError> {
        // Before the connection: the first call takes one of its own.
        let layout = self.layout().await?;
        let mut client = self.client().await?;
        let request_hash = new.request.request_hash();
        let money = new
            .request
            .money()
            .map(|m| (m.amount(), m.currency().code().to_owned()));
        let (payload, provider) = (new.request.fields(), new.provider);
        let inserted = match layout {
            Layout::Single => {
                insert_operation(&client, new, payload, provider, money, None, Layout::Single)
                    .await?
            }
            layout => {
                let transaction = client.transaction().await?;
                let inserted =
                    insert_operation(&transaction, new, payload, provider, money, None, layout)
                        .await?;
                transaction.commit().await?;
                inserted
            }
        };
        if let Some(row) = inserted {
            return Ok(Registration::Created(operation_from_row(&row)?));
        }
        // The key exists (committed before this statement or by the transaction it
        // waited on); read it with a fresh snapshot.
        let find = client.prepare_cached(FIND_BY_IDEMPOTENCY_KEY).await?;
        let row = client
            .query_one(&find, &[&new.agent_id, &new.idempotency_key.as_str()])
            .await?;
        let existing = operation_from_row(&row)?;
        if existing.request_hash == *request_hash {
            Ok(Registration::Replayed(existing))
        } else {
            Ok(Registration::KeyReused)
        }
    }

    /// Any agent's operation (operators' view).
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn find_operation(
        &self,
        operation_id: Uuid,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let client = self.client().await?;
        client
            .query_opt(FIND_BY_ID, &[&operation_id])
            .await?
            .map(|row| operation_from_row(&row))
            .transpose()
    }

    /// The operation, only if it belongs to this agent.
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn find_operation_for_agent(
        &self,
        operation_id: Uuid,
        agent_id: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let client = self.client().await?;
        let find = client.prepare_cached(FIND_FOR_AGENT).await?;
        client
            .query_opt(&find, &[&operation_id, &agent_id])
            .await?
            .map(|row| operation_from_row(&row))
            .transpose()
    }
}

const FIND_BY_ID_RANGE: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE operation_id BETWEEN $1 AND $2 ORDER BY operation_id LIMIT 2"
);

impl Store {
    /// The operations whose id starts with `prefix` (hex digits, dashes ignored), at
    /// most two: one means the prefix names it, two that it is ambiguous. An index
    /// range scan, however many operations there are.
    #[tracing::instrument(name = "SELECT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "operations"))]
    pub async fn find_operations_by_id_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let hex: String = prefix.chars().filter(|c| *c != '-').collect();
        let bound = |fill: char| {
            let padded: String = hex
                .chars()
                .chain(std::iter::repeat(fill))
                .take(32)
                .collect();
            Uuid::parse_str(&padded).ok()
        };
        let (Some(low), Some(high)) = (bound('0'), bound('f')) else {
            return Ok(Vec::new());
        };
        if hex.len() > 32 {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let rows = client.query(FIND_BY_ID_RANGE, &[&low, &high]).await?;
        rows.iter().map(operation_from_row).collect()
    }
}

/// The values of `insert_operation_row!`'s $1..$11 for `new`: the row's own columns
/// and, as $9, the audit row's actor. Every statement built on it takes them in this
/// order; what follows $11 is its own.
pub(crate) struct RowValues<'a> {
    new: &'a NewOperation<'a>,
    key: &'a str,
    kind: &'a str,
    hash: &'a str,
    payload: &'a serde_json::Value,
    provider: &'a str,
    amount: Option<Decimal>,
    currency: Option<String>,
    pub(crate) actor: String,
}

impl<'a> RowValues<'a> {
    pub(crate) fn new(
        new: &'a NewOperation<'a>,
        payload: &'a serde_json::Value,
        provider: &'a str,
        money: Option<(Decimal, String)>,
    ) -> Self {
        let (amount, currency) = money.unzip();
        Self {
            new,
            key: new.idempotency_key.as_str(),
            kind: new.request.kind().as_str(),
            hash: new.request.request_hash().as_str(),
            payload,
            provider,
            amount,
            currency,
            actor: format!("intake:agent/{}", new.agent_id),
        }
    }

    /// $1..$11, then `rest` from $12 on.
    pub(crate) fn params_with<'b>(
        &'b self,
        rest: &[&'b (dyn ToSql + Sync)],
    ) -> Vec<&'b (dyn ToSql + Sync)> {
        let own: [&(dyn ToSql + Sync); 11] = [
            &self.new.operation_id,
            &self.new.agent_id,
            &self.key,
            &self.kind,
            &self.provider,
            &self.hash,
            self.payload,
            &self.new.trace_context,
            &self.actor,
            &self.amount,
            &self.currency,
        ];
        let mut params = Vec::with_capacity(own.len() + rest.len());
        params.extend_from_slice(&own);
        params.extend_from_slice(rest);
        params
    }
}

/// Runs `REGISTER_OPERATION` for `new` on any client or transaction: the row, its
/// outbox event and its audit event, or `None` when the key was already taken. The
/// payload, provider, money and parent are the caller's (a refund resolves its own).
pub(crate) async fn insert_operation<C: deadpool_postgres::GenericClient>(
    client: &C,
    new: &NewOperation<'_>,
    payload: &serde_json::Value,
    provider: &str,
    money: Option<(Decimal, String)>,
    parent_operation_id: Option<Uuid>,
    layout: Layout,
) -> Result<Option<Row>, StoreError> {
    let values = RowValues::new(new, payload, provider, money);
    let expires_in = new.awaiting_approval_for.map(crate::execution::millis);
    let parent: [&(dyn ToSql + Sync); 1] = [&parent_operation_id];
    let mut params = values.params_with(&parent);
    if let Some(millis) = &expires_in {
        params.push(millis);
    }
    if layout == Layout::Distributed {
        return insert_operation_on_one_node(client, new, &params, &values.actor).await;
    }
    let statement = match expires_in {
        Some(_) => REGISTER_AWAITING_APPROVAL,
        None => REGISTER_OPERATION,
    };
    let register = client.prepare_cached(statement).await?;
    Ok(client.query_opt(&register, &params).await?)
}

/// `insert_operation` on Citus (`INSERT_OPERATION_ROW`): the caller's transaction
/// makes the three writes one.
async fn insert_operation_on_one_node<C: deadpool_postgres::GenericClient>(
    client: &C,
    new: &NewOperation<'_>,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    actor: &str,
) -> Result<Option<Row>, StoreError> {
    let awaiting = new.awaiting_approval_for.is_some();
    let statement = if awaiting {
        INSERT_AWAITING_ROW
    } else {
        INSERT_OPERATION_ROW
    };
    let insert = client
        .prepare_typed_cached(statement, &ROW_PARAMETER_TYPES)
        .await?;
    let Some(row) = client.query_opt(&insert, params).await? else {
        return Ok(None);
    };
    let status: String = row.get("status");
    let reason = if awaiting {
        "registered; awaiting approval"
    } else {
        client
            .execute(
                INSERT_OUTBOX_EVENT,
                &[&new.operation_id, &new.agent_id, &new.trace_context],
            )
            .await?;
        "registered"
    };
    client
        .execute(
            INSERT_REGISTERED_EVENT,
            &[&new.operation_id, &new.agent_id, &status, &actor, &reason],
        )
        .await?;
    Ok(Some(row))
}

/// Whether the tables are distributed on Citus (`Store::layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    Single,
    Distributed,
}

pub(crate) fn operation_from_row(row: &Row) -> Result<OperationRecord, StoreError> {
    let status: String = row.get("status");
    let status = status.parse()?;
    let request_hash: String = row.get("request_hash");
    Ok(OperationRecord {
        operation_id: row.get("operation_id"),
        agent_id: row.get("agent_id"),
        operation_type: row.get("operation_type"),
        provider: row.get("provider"),
        status,
        provider_reference: row.get("provider_reference"),
        attempts: row.get("attempts"),
        last_error: row.get("last_error"),
        request_hash: RequestHash::from_stored(request_hash),
        amount: row.get("amount"),
        currency: row.get("currency"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    })
}
