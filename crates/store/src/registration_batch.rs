//! Group commit for registrations: many requests' operations registered by one
//! statement (one transaction, one commit), each request still getting its own answer.
//! The statement is the single registration's, made multi-row with `unnest`: the same
//! `ON CONFLICT (agent_id, idempotency_key) DO NOTHING`, outbox and audit rows only for
//! rows it inserted. The same statement returns the operations that keys it did not
//! insert already named when it began; a key taken by a transaction it could not see
//! (a concurrent one, or the same key twice in the batch) is read after it. Each is
//! then compared by request hash, exactly as for a single registration.
//!
//! A registration may carry an `AgentCheck`: intake authenticated its agent from an
//! earlier read of the agent's row instead of reading it again. The statement then
//! writes it, and answers it from an existing operation, only while that row is the
//! version intake read and still accepts the key id; otherwise it is answered
//! `Unconfirmed` with nothing written, and intake reads the agent again. So a
//! revocation, rotation or policy change is never outrun by what intake remembers: the
//! database decides, in the statement that writes.

use std::borrow::Cow;
use std::collections::HashMap;

use opgate_domain::RequestHash;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::agents::key_id_accepted;
use crate::error::StoreError;
use crate::operations::{
    operation_columns, operation_from_row, NewOperation, OperationRecord, Registration,
};
use crate::pool::{query_rerunning_deadlock_victim, Store};

/// A registration that can wait in a queue (owns its values).
#[derive(Debug, Clone)]
pub struct PendingRegistration {
    pub(crate) operation_id: Uuid,
    pub(crate) agent_id: String,
    pub(crate) idempotency_key: String,
    pub(crate) operation_type: String,
    pub(crate) provider: String,
    pub(crate) request_hash: RequestHash,
    pub(crate) payload: serde_json::Value,
    pub(crate) amount: Option<Decimal>,
    pub(crate) currency: Option<&'static str>,
    pub(crate) trace_context: Option<String>,
    pub(crate) agent_check: Option<AgentCheck>,
}

/// The agent row a registration was authenticated against without reading it: the key
/// id presented and the row's version when it was last read
/// (`AgentRequestContext::row_version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCheck {
    pub key_id: String,
    pub row_version: i64,
}

/// The batch's answer to one registration.
#[derive(Debug, Clone)]
// One answer per request, moved once, as `Registration`.
#[allow(clippy::large_enum_variant)]
pub enum BatchAnswer {
    Registered(Registration),
    /// Carried an `AgentCheck` and was not confirmed: the agent's row changed since it
    /// was read, no longer accepts the key id, or the key was taken by a transaction
    /// the statement could not see. Nothing was written for it; read the agent again.
    Unconfirmed,
}

impl PendingRegistration {
    pub fn from_new(new: &NewOperation<'_>) -> Self {
        Self {
            operation_id: new.operation_id,
            agent_id: new.agent_id.to_owned(),
            idempotency_key: new.idempotency_key.as_str().to_owned(),
            operation_type: new.request.kind().as_str().to_owned(),
            provider: new.provider.to_owned(),
            request_hash: new.request.request_hash().clone(),
            payload: new.request.fields().clone(),
            amount: new.request.money().map(|m| m.amount()),
            currency: new.request.money().map(|m| m.currency().code()),
            trace_context: new.trace_context.map(str::to_owned),
            agent_check: None,
        }
    }

    /// Registered only while the agent's row is as `check` says (see the module).
    pub fn checked_against(mut self, check: AgentCheck) -> Self {
        self.agent_check = Some(check);
        self
    }
}

/// The arrays are read through a materialized CTE so that the planner cannot see how
/// long they are. If it could (a custom plan replaces the parameters with constants),
/// a custom plan for a batch of one or two rows would always look cheaper than the
/// generic plan, which assumes ten. PostgreSQL would then plan the statement again on
/// every execution: 0.5-0.6 ms of planning against 0.4 ms of executing, per batch.
/// With the length hidden, both plans cost the same, so after its first five
/// executions PostgreSQL keeps the generic plan. A key already stored is looked up once
/// and kept out of the INSERT: PostgreSQL checks a row's CHECK constraints before its
/// conflict, and prepares them afresh in every execution that reaches a row, so a
/// batch of replays paid for constraints on rows it never wrote. `LIMIT 1` keeps the
/// lookup of existing operations a per-row probe of the unique index. Without it the
/// generic plan may become a hash join over a sequential scan of `operations`, if that
/// plan was made while the table was small. (`docs/architecture.md`, "The plans PostgreSQL
/// keeps".)
pub const REGISTER_BATCH: &str = concat!(
    "WITH arrays AS MATERIALIZED (
        SELECT $1::uuid[] AS operation_id, $2::text[] AS agent_id, $3::text[] AS idempotency_key,
               $4::text[] AS operation_type, $5::text[] AS provider, $6::text[] AS request_hash,
               $7::jsonb[] AS request_payload, $8::text[] AS trace_context,
               $9::numeric[] AS amount, $10::text[] AS currency, $11::text[] AS key_id,
               $12::bigint[] AS agent_row_version
    ), input AS (
        SELECT t.* FROM arrays, unnest(arrays.operation_id, arrays.agent_id,
                                       arrays.idempotency_key, arrays.operation_type,
                                       arrays.provider, arrays.request_hash,
                                       arrays.request_payload, arrays.trace_context,
                                       arrays.amount, arrays.currency, arrays.key_id,
                                       arrays.agent_row_version)
            AS t(operation_id, agent_id, idempotency_key, operation_type, provider,
                 request_hash, request_payload, trace_context, amount, currency,
                 key_id, agent_row_version)
    ), confirmed AS (
        SELECT * FROM input
        WHERE agent_row_version IS NULL OR EXISTS (
            SELECT 1 FROM agents a
            WHERE a.agent_id = input.agent_id
              AND a.xmin::text::bigint = input.agent_row_version
              AND ",
    key_id_accepted!("a.", "input.key_id"),
    ")
    ), existing AS (
        SELECT confirmed.operation_id AS asked_by, stored.* FROM confirmed CROSS JOIN LATERAL (
            SELECT ",
    operation_columns!(),
    " FROM operations
            WHERE agent_id = confirmed.agent_id AND idempotency_key = confirmed.idempotency_key
            LIMIT 1
        ) stored
    ), inserted AS (
        INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type,
                                provider, request_hash, request_payload, trace_context,
                                amount, currency, customer_id)
        SELECT operation_id, agent_id, idempotency_key, operation_type, provider, request_hash,
               request_payload, trace_context, amount, currency,
               request_payload->>'customer_id'
        FROM confirmed
        WHERE confirmed.operation_id NOT IN (SELECT asked_by FROM existing)
        ON CONFLICT (agent_id, idempotency_key) DO NOTHING
        RETURNING ",
    operation_columns!(),
    ", trace_context
    ), outbox_event AS (
        INSERT INTO outbox (operation_id, agent_id, event_type, trace_context)
        SELECT operation_id, agent_id, 'execute', trace_context FROM inserted
    ), audit_event AS (
        INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason)
        SELECT operation_id, agent_id, NULL, status, 'intake:agent/' || agent_id, 'registered'
        FROM inserted
    )
    SELECT true AS created, operation_id AS asked_by, ",
    operation_columns!(),
    " FROM inserted
    UNION ALL
    SELECT false, existing.* FROM existing"
);

const FIND_BY_KEYS: &str = concat!(
    "SELECT ",
    operation_columns!(),
    ", idempotency_key FROM operations
     WHERE (agent_id, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
);

impl Store {
    /// Registers every operation of the batch in one transaction and answers each in
    /// order. If the statement fails, it fails for the whole batch and nothing of it
    /// is written. (On Citus, one transaction per shard the batch touches:
    /// `register_batch_by_shard`.)
    #[tracing::instrument(name = "INSERT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operations", db.operation.batch.size = batch.len()))]
    pub async fn register_batch(
        &self,
        batch: &[PendingRegistration],
    ) -> Result<Vec<BatchAnswer>, StoreError> {
        if self.is_distributed().await? {
            return self.register_batch_distributed(batch).await;
        }
        let client = self.client().await?;
        // Keys in one order for every batch: two batches inserting overlapping keys in
        // different orders would each wait on the other's unique-index entry (deadlock).
        let mut ordered: Vec<&PendingRegistration> = batch.iter().collect();
        ordered.sort_by(|a, b| {
            (&a.agent_id, &a.idempotency_key).cmp(&(&b.agent_id, &b.idempotency_key))
        });
        let ids: Vec<Uuid> = ordered.iter().map(|r| r.operation_id).collect();
        let agents: Vec<&str> = ordered.iter().map(|r| r.agent_id.as_str()).collect();
        let keys: Vec<&str> = ordered.iter().map(|r| r.idempotency_key.as_str()).collect();
        let kinds: Vec<&str> = ordered.iter().map(|r| r.operation_type.as_str()).collect();
        let providers: Vec<&str> = ordered.iter().map(|r| r.provider.as_str()).collect();
        let hashes: Vec<&str> = ordered.iter().map(|r| r.request_hash.as_str()).collect();
        let payloads: Vec<&serde_json::Value> = ordered.iter().map(|r| &r.payload).collect();
        let traces: Vec<Option<&str>> =
            ordered.iter().map(|r| r.trace_context.as_deref()).collect();
        let amounts: Vec<Option<Decimal>> = ordered.iter().map(|r| r.amount).collect();
        let currencies: Vec<Option<&str>> = ordered.iter().map(|r| r.currency).collect();
        let key_ids: Vec<Option<&str>> = ordered
            .iter()
            .map(|r| r.agent_check.as_ref().map(|c| c.key_id.as_str()))
            .collect();
        let versions: Vec<Option<i64>> = ordered
            .iter()
            .map(|r| r.agent_check.as_ref().map(|c| c.row_version))
            .collect();
        let register = client.prepare_cached(REGISTER_BATCH).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
            &ids,
            &agents,
            &keys,
            &kinds,
            &providers,
            &hashes,
            &payloads,
            &traces,
            &amounts,
            &currencies,
            &key_ids,
            &versions,
        ];
        // A deadlock victim's statement was rolled back whole, so running it again is
        // safe (a single-request registration from another intake can still interleave).
        let rows =
            query_rerunning_deadlock_victim(&client, &register, &params, "registration batch")
                .await?;
        // Each row answers the registration that asked (`asked_by`): the operation it
        // created, or the one its key already named when the statement began.
        let (mut created, mut existing) = (HashMap::new(), HashMap::new());
        for row in &rows {
            let answered = if row.get("created") {
                &mut created
            } else {
                &mut existing
            };
            answered.insert(row.get::<_, Uuid>("asked_by"), operation_from_row(row)?);
        }
        // Keys taken by a transaction the statement could not see, read now that it
        // has committed; a checked registration is left unconfirmed instead.
        let (agents, keys): (Vec<&str>, Vec<&str>) = batch
            .iter()
            .filter(|r| r.agent_check.is_none())
            .filter(|r| !created.contains_key(&r.operation_id))
            .filter(|r| !existing.contains_key(&r.operation_id))
            .map(|r| (r.agent_id.as_str(), r.idempotency_key.as_str()))
            .unzip();
        let mut found = Vec::new();
        if !keys.is_empty() {
            let find = client.prepare_cached(FIND_BY_KEYS).await?;
            for row in client.query(&find, &[&agents, &keys]).await? {
                found.push((row.get("idempotency_key"), operation_from_row(&row)?));
            }
        }
        answers(batch, created, existing, found)
    }

    /// `register_batch` on Citus. A checked registration is answered `Unconfirmed`
    /// unwritten: there each node keeps its own copy of the agent's row, so intake
    /// never checks against one.
    async fn register_batch_distributed(
        &self,
        batch: &[PendingRegistration],
    ) -> Result<Vec<BatchAnswer>, StoreError> {
        // Intake sends none there; only a caller that does pays for the copy.
        let unchecked: Cow<[PendingRegistration]> = if batch.iter().all(|r| r.agent_check.is_none())
        {
            Cow::Borrowed(batch)
        } else {
            batch
                .iter()
                .filter(|r| r.agent_check.is_none())
                .cloned()
                .collect()
        };
        let created = self.register_batch_by_shard(&unchecked).await?;
        let created: HashMap<Uuid, OperationRecord> =
            created.into_iter().map(|r| (r.operation_id, r)).collect();
        let taken: Vec<(&str, &str)> = unchecked
            .iter()
            .filter(|r| !created.contains_key(&r.operation_id))
            .map(|r| (r.agent_id.as_str(), r.idempotency_key.as_str()))
            .collect();
        let found = self.find_each_by_key(&taken).await?;
        answers(batch, created, HashMap::new(), found)
    }
}

/// Each registration's answer, in the batch's order: the operation it `created`, or
/// the one its key names (`existing` when the statement began, by the registration
/// that asked, else `found` after it, by key), replayed or a reused key; a checked
/// registration answered by neither, unconfirmed.
fn answers(
    batch: &[PendingRegistration],
    mut created: HashMap<Uuid, OperationRecord>,
    mut existing: HashMap<Uuid, OperationRecord>,
    found: Vec<(String, OperationRecord)>,
) -> Result<Vec<BatchAnswer>, StoreError> {
    let by_key: HashMap<(&str, &str), &OperationRecord> = found
        .iter()
        .map(|(key, r)| ((r.agent_id.as_str(), key.as_str()), r))
        .collect();
    batch
        .iter()
        .map(|r| {
            if let Some(record) = created.remove(&r.operation_id) {
                return Ok(BatchAnswer::Registered(Registration::Created(record)));
            }
            let record = match existing.remove(&r.operation_id) {
                Some(record) => record,
                None if r.agent_check.is_some() => return Ok(BatchAnswer::Unconfirmed),
                None => by_key
                    .get(&(r.agent_id.as_str(), r.idempotency_key.as_str()))
                    .map(|record| (*record).clone())
                    .ok_or_else(|| StoreError::Corrupt("a conflicting key vanished".into()))?,
            };
            Ok(BatchAnswer::Registered(
                if record.request_hash == r.request_hash {
                    Registration::Replayed(record)
                } else {
                    Registration::KeyReused
                },
            ))
        })
        .collect()
}
