//! Group commit on Citus: a batch of registrations is split by the shard each agent's
//! rows live in, and each shard's part is registered in one transaction of three
//! multi-row `INSERT … VALUES` (operations, their outbox events, their audit rows).
//! Citus sends a multi-row insert whose rows share one shard to that shard's node
//! alone, so each part commits on one node, without two phases. (The statement of one
//! PostgreSQL, whose CTEs insert from one another, Citus would run as several over
//! several connections and commit in two phases; an `INSERT … SELECT` from `unnest`
//! it copies in, also in two phases.)

use std::collections::{BTreeMap, HashMap};

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::StoreError;
use crate::operations::{
    operation_columns, operation_from_row, OperationRecord, FIND_BY_IDEMPOTENCY_KEY,
};
use crate::pool::Store;
use crate::registration_batch::PendingRegistration;

/// The shard of each agent's rows. Shard ids outlive rebalancing (a move changes the
/// node, not the id); were one stale, the insert would span two shards and Citus
/// would commit it in two phases, still correctly.
const SHARDS_OF_AGENTS: &str = "
SELECT agent_id, get_shard_id_for_distribution_column('operations', agent_id)
FROM unnest($1::text[]) AS agent_id";

/// Values per row of each insert.
const OPERATION_VALUES: usize = 10;
const OUTBOX_VALUES: usize = 3;
const AUDIT_VALUES: usize = 4;

fn insert_operations(rows: usize) -> String {
    let values = values(rows, OPERATION_VALUES, |p| {
        format!(
            "({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}::jsonb->>'customer_id')",
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[6]
        )
    });
    format!(
        "INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type, \
         provider, request_hash, request_payload, trace_context, amount, currency, \
         customer_id) VALUES {values} \
         ON CONFLICT (agent_id, idempotency_key) DO NOTHING RETURNING {}, trace_context",
        operation_columns!()
    )
}

fn insert_outbox_events(rows: usize) -> String {
    let values = values(rows, OUTBOX_VALUES, |p| {
        format!("({}, {}, 'execute', {})", p[0], p[1], p[2])
    });
    format!(
        "INSERT INTO outbox (operation_id, agent_id, event_type, trace_context) VALUES {values}"
    )
}

fn insert_registered_events(rows: usize) -> String {
    let values = values(rows, AUDIT_VALUES, |p| {
        format!(
            "({}, {}, NULL, {}, {}, 'registered')",
            p[0], p[1], p[2], p[3]
        )
    });
    format!(
        "INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, \
         actor, reason) VALUES {values}"
    )
}

/// `rows` value lists of `width` parameters each, numbered on from `$1`.
fn values(rows: usize, width: usize, row: impl Fn(&[String]) -> String) -> String {
    (0..rows)
        .map(|r| {
            let params: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
            row(&params)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// `register_batch` on Citus: the batch by shard, each shard's part in its own
    /// transaction on its node. Answers in the batch's order.
    pub(crate) async fn register_batch_by_shard(
        &self,
        batch: &[PendingRegistration],
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let shards = self
            .shards_of(batch.iter().map(|r| r.agent_id.as_str()))
            .await?;
        // Keys in one order for every batch, as on one PostgreSQL (no two batches wait
        // on each other's unique-index entries); a key twice keeps the batch's order.
        let mut ordered: Vec<&PendingRegistration> = batch.iter().collect();
        ordered.sort_by(|a, b| {
            (&a.agent_id, &a.idempotency_key).cmp(&(&b.agent_id, &b.idempotency_key))
        });
        let mut by_shard: BTreeMap<i64, Vec<&PendingRegistration>> = BTreeMap::new();
        for registration in ordered {
            by_shard
                .entry(shards[&registration.agent_id])
                .or_default()
                .push(registration);
        }
        let mut created = Vec::with_capacity(batch.len());
        for part in by_shard.values() {
            created.extend(self.register_on_one_shard(part).await?);
        }
        Ok(created)
    }

    /// The operations it inserted (a key already taken inserts nothing).
    async fn register_on_one_shard(
        &self,
        part: &[&PendingRegistration],
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        let hashes: Vec<&str> = part.iter().map(|r| r.request_hash.as_str()).collect();
        let params: Vec<&(dyn ToSql + Sync)> = part
            .iter()
            .zip(&hashes)
            .flat_map(|(r, hash)| -> [&(dyn ToSql + Sync); OPERATION_VALUES] {
                [
                    &r.operation_id,
                    &r.agent_id,
                    &r.idempotency_key,
                    &r.operation_type,
                    &r.provider,
                    hash,
                    &r.payload,
                    &r.trace_context,
                    &r.amount,
                    &r.currency,
                ]
            })
            .collect();
        let insert = transaction
            .prepare_cached(&insert_operations(part.len()))
            .await?;
        let rows: Vec<Row> = transaction.query(&insert, &params).await?;
        if !rows.is_empty() {
            let inserted: Vec<Inserted> = rows.iter().map(Inserted::from).collect();
            let outbox: Vec<&(dyn ToSql + Sync)> = inserted
                .iter()
                .flat_map(|i| -> [&(dyn ToSql + Sync); OUTBOX_VALUES] {
                    [&i.operation_id, &i.agent_id, &i.trace_context]
                })
                .collect();
            let statement = transaction
                .prepare_cached(&insert_outbox_events(inserted.len()))
                .await?;
            transaction.execute(&statement, &outbox).await?;
            let audit: Vec<&(dyn ToSql + Sync)> = inserted
                .iter()
                .flat_map(|i| -> [&(dyn ToSql + Sync); AUDIT_VALUES] {
                    [&i.operation_id, &i.agent_id, &i.status, &i.actor]
                })
                .collect();
            let statement = transaction
                .prepare_cached(&insert_registered_events(inserted.len()))
                .await?;
            transaction.execute(&statement, &audit).await?;
        }
        transaction.commit().await?;
        rows.iter().map(operation_from_row).collect()
    }

    /// The operation each of these keys names (with its key), read on its agent's node.
    pub(crate) async fn find_each_by_key(
        &self,
        keys: &[(&str, &str)],
    ) -> Result<Vec<(String, OperationRecord)>, StoreError> {
        let client = self.client().await?;
        let find = client.prepare_cached(FIND_BY_IDEMPOTENCY_KEY).await?;
        let mut found = Vec::with_capacity(keys.len());
        for (agent, key) in keys {
            if let Some(row) = client.query_opt(&find, &[agent, key]).await? {
                found.push(((*key).to_owned(), operation_from_row(&row)?));
            }
        }
        Ok(found)
    }

    /// The shard of each agent, from the cache or asked for the ones not in it.
    async fn shards_of<'a>(
        &self,
        agents: impl Iterator<Item = &'a str>,
    ) -> Result<HashMap<String, i64>, StoreError> {
        let mut known = HashMap::new();
        let mut missing = Vec::new();
        {
            let cache = self.shards.lock().unwrap_or_else(|p| p.into_inner());
            for agent in agents {
                match cache.get(agent) {
                    Some(shard) => {
                        known.insert(agent.to_owned(), *shard);
                    }
                    None => missing.push(agent.to_owned()),
                }
            }
        }
        if missing.is_empty() {
            return Ok(known);
        }
        let client = self.client().await?;
        let rows = client.query(SHARDS_OF_AGENTS, &[&missing]).await?;
        let mut cache = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows {
            let (agent, shard): (String, i64) = (row.get(0), row.get(1));
            cache.insert(agent.clone(), shard);
            known.insert(agent, shard);
        }
        Ok(known)
    }
}

/// What the outbox and audit rows of an inserted operation need.
struct Inserted {
    operation_id: Uuid,
    agent_id: String,
    trace_context: Option<String>,
    status: String,
    actor: String,
}

impl From<&Row> for Inserted {
    fn from(row: &Row) -> Self {
        let agent_id: String = row.get("agent_id");
        Self {
            operation_id: row.get("operation_id"),
            actor: format!("intake:agent/{agent_id}"),
            agent_id,
            trace_context: row.get("trace_context"),
            status: row.get("status"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{insert_operations, insert_outbox_events};

    #[test]
    fn each_row_has_its_own_parameters() {
        let two = insert_operations(2);
        assert!(
            two.contains("($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $7::jsonb->>'customer_id')")
        );
        assert!(two.contains(
            "($11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $17::jsonb->>'customer_id')"
        ));
        assert!(
            insert_outbox_events(2).ends_with("($1, $2, 'execute', $3), ($4, $5, 'execute', $6)")
        );
    }
}
