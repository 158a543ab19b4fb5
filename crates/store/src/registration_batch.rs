//! Group commit for registrations: many requests' operations registered by one
//! statement (one transaction, one commit), each request still getting its own answer.
//! The statement is the single registration's, made multi-row with `unnest`: the same
//! `ON CONFLICT (agent_id, idempotency_key) DO NOTHING`, outbox and audit rows only for
//! rows it inserted. Keys it did not insert (taken before, or twice in the batch) are
//! then read and compared by request hash, exactly as for a single registration.

use std::collections::HashMap;

use opgate_domain::RequestHash;
use rust_decimal::Decimal;
use uuid::Uuid;

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
        }
    }
}

const REGISTER_BATCH: &str = concat!(
    "WITH input AS (
        SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::jsonb[], $8::text[], $9::numeric[], $10::text[])
            AS t(operation_id, agent_id, idempotency_key, operation_type, provider,
                 request_hash, request_payload, trace_context, amount, currency)
    ), inserted AS (
        INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type,
                                provider, request_hash, request_payload, trace_context,
                                amount, currency, customer_id)
        SELECT operation_id, agent_id, idempotency_key, operation_type, provider, request_hash,
               request_payload, trace_context, amount, currency,
               request_payload->>'customer_id'
        FROM input
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
    SELECT ",
    operation_columns!(),
    " FROM inserted"
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
    ) -> Result<Vec<Registration>, StoreError> {
        if self.is_distributed().await? {
            let created = self.register_batch_by_shard(batch).await?;
            let created: HashMap<Uuid, OperationRecord> =
                created.into_iter().map(|r| (r.operation_id, r)).collect();
            let taken: Vec<(&str, &str)> = batch
                .iter()
                .filter(|r| !created.contains_key(&r.operation_id))
                .map(|r| (r.agent_id.as_str(), r.idempotency_key.as_str()))
                .collect();
            let existing = self.find_each_by_key(&taken).await?;
            return answers(batch, created, existing);
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
        let register = client.prepare_cached(REGISTER_BATCH).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
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
        ];
        // A deadlock victim's statement was rolled back whole, so running it again is
        // safe (a single-request registration from another intake can still interleave).
        let rows =
            query_rerunning_deadlock_victim(&client, &register, &params, "registration batch")
                .await?;
        let mut created = HashMap::new();
        for row in &rows {
            let record = operation_from_row(row)?;
            created.insert(record.operation_id, record);
        }
        let mut existing = Vec::new();
        if created.len() < batch.len() {
            let (agents, keys): (Vec<&str>, Vec<&str>) = batch
                .iter()
                .filter(|r| !created.contains_key(&r.operation_id))
                .map(|r| (r.agent_id.as_str(), r.idempotency_key.as_str()))
                .unzip();
            let find = client.prepare_cached(FIND_BY_KEYS).await?;
            for row in client.query(&find, &[&agents, &keys]).await? {
                existing.push((row.get("idempotency_key"), operation_from_row(&row)?));
            }
        }
        answers(batch, created, existing)
    }
}

/// Each registration's answer, in the batch's order: created by this batch, or the
/// operation its key already names (`existing`, with that key), replayed or a reused
/// key.
fn answers(
    batch: &[PendingRegistration],
    mut created: HashMap<Uuid, OperationRecord>,
    existing: Vec<(String, OperationRecord)>,
) -> Result<Vec<Registration>, StoreError> {
    let by_key: HashMap<(&str, &str), &OperationRecord> = existing
        .iter()
        .map(|(key, r)| ((r.agent_id.as_str(), key.as_str()), r))
        .collect();
    batch
        .iter()
        .map(|r| {
            if let Some(record) = created.remove(&r.operation_id) {
                return Ok(Registration::Created(record));
            }
            let record = by_key
                .get(&(r.agent_id.as_str(), r.idempotency_key.as_str()))
                .ok_or_else(|| StoreError::Corrupt("a conflicting key vanished".into()))?;
            Ok(if record.request_hash == r.request_hash {
                Registration::Replayed((*record).clone())
            } else {
                Registration::KeyReused
            })
        })
        .collect()
}
