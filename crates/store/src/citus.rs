//! Distributing opgate's tables on Citus (`opgate migrate --citus`, docs/scale-out.md):
//! `agents` and `operators` become reference tables (a copy on every node, so the
//! agent check joins locally), and every per-operation table is distributed by
//! `agent_id`, co-located with `operations`, so that everything one operation touches
//! lives on one node. Migration V14 gave every key of those tables the `agent_id`
//! column that Citus requires.
//!
//! One transaction does it all, so a failure leaves the database as it was. The
//! foreign keys between the tables are dropped first and added back, as they were,
//! once both sides are distributed: Citus refuses to distribute a table that a local
//! table references, and would otherwise turn the referencing tables into Citus local
//! tables. Running it again on a distributed database changes nothing.

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::audit_apart::write_then_audit;
use crate::error::StoreError;
use crate::migrate::{MIGRATION_LOCK_ID, RELEASE_LOCK, TAKE_LOCK};
use crate::operations::Layout;
use crate::pool::Store;

/// A copy on every node: read with every operation, written rarely.
const REFERENCE_TABLES: [&str; 2] = ["agents", "operators"];

/// Distributed by `agent_id`, co-located with the first.
const DISTRIBUTED_TABLES: [&str; 5] = [
    "operations",
    "outbox",
    "operation_events",
    "agent_spend",
    "held_operations",
];

const DISTRIBUTION_COLUMN: &str = "agent_id";

const CITUS_VERSION: &str = "SELECT extversion FROM pg_extension WHERE extname = 'citus'";

/// How each table is placed now (`n`: reference, `h`: hash-distributed); partitions
/// appear under their own names and are left out.
const PLACEMENT: &str = "
SELECT p.logicalrelid::regclass::text, p.partmethod::text,
       COALESCE(column_to_column_name(p.logicalrelid, p.partkey), ''), p.colocationid
FROM pg_dist_partition p
WHERE p.logicalrelid::regclass::text = ANY ($1)";

/// The foreign keys of and to the given tables, in a form `ADD CONSTRAINT` takes back
/// (a partitioned table's own, not the copies its partitions inherit).
const FOREIGN_KEYS: &str = "
SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
FROM pg_constraint
WHERE contype = 'f' AND conparentid = 0
  AND (conrelid::regclass::text = ANY ($1) OR confrelid::regclass::text = ANY ($1))
ORDER BY 1, 2";

/// Where the tables stand after `opgate migrate --citus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitusDistribution {
    /// The citus extension's version.
    pub citus_version: String,
    /// Tables this run made reference tables or distributed (empty: nothing to do).
    pub changed: Vec<String>,
}

/// Whether opgate's tables are distributed (`opgate migrate --citus` has run): the
/// claims then go agent by agent.
/// (Two statements: without Citus, the catalog the second reads does not exist.)
const HAS_CITUS_CATALOG: &str = "SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL";
const DISTRIBUTED: &str = "
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
               WHERE logicalrelid::regclass::text = 'operations')";

impl Store {
    /// Whether the tables are distributed on Citus. Asked once per pool, when first
    /// needed: a database distributed later needs its services restarted
    /// (docs/scale-out.md).
    pub async fn is_distributed(&self) -> Result<bool, StoreError> {
        let distributed = self
            .distributed
            .get_or_try_init(|| async {
                let client = self.client().await?;
                let has_catalog: bool = client.query_one(HAS_CITUS_CATALOG, &[]).await?.get(0);
                Ok::<_, StoreError>(has_catalog && client.query_one(DISTRIBUTED, &[]).await?.get(0))
            })
            .await?;
        Ok(*distributed)
    }

    /// `is_distributed`, as the registration statements take it.
    pub(crate) async fn layout(&self) -> Result<Layout, StoreError> {
        Ok(match self.is_distributed().await? {
            true => Layout::Distributed,
            false => Layout::Single,
        })
    }

    /// The citus extension's version, or a clear error when the database has none.
    pub async fn citus_version(&self) -> Result<String, StoreError> {
        let client = self.client().await?;
        let row = client.query_opt(CITUS_VERSION, &[]).await?;
        row.map(|row| row.get(0)).ok_or_else(|| {
            StoreError::Citus(
                "this database has no citus extension: run CREATE EXTENSION citus on the \
                 coordinator and every worker (and add the workers), or migrate without --citus"
                    .into(),
            )
        })
    }

    /// Makes the reference tables and distributes the per-operation tables that are
    /// not yet; `shard_count` applies to a first distribution (Citus's default when
    /// `None`). Run after the migrations.
    pub async fn distribute_on_citus(
        &self,
        shard_count: Option<u32>,
    ) -> Result<CitusDistribution, StoreError> {
        let citus_version = self.citus_version().await?;
        let mut client = self.client().await?;
        client.execute(TAKE_LOCK, &[&MIGRATION_LOCK_ID]).await?;
        let outcome = distribute(&mut client, shard_count).await;
        client.execute(RELEASE_LOCK, &[&MIGRATION_LOCK_ID]).await?;
        Ok(CitusDistribution {
            citus_version,
            changed: outcome?,
        })
    }
}

async fn distribute(
    client: &mut deadpool_postgres::Object,
    shard_count: Option<u32>,
) -> Result<Vec<String>, StoreError> {
    let all: Vec<&str> = REFERENCE_TABLES
        .iter()
        .chain(DISTRIBUTED_TABLES.iter())
        .copied()
        .collect();
    let transaction = client.transaction().await?;
    let placed = placement(&transaction, &all).await?;
    let missing_reference: Vec<&str> = REFERENCE_TABLES
        .into_iter()
        .filter(|table| !placed.iter().any(|p| p.table == *table))
        .collect();
    let missing_distributed: Vec<&str> = DISTRIBUTED_TABLES
        .into_iter()
        .filter(|table| !placed.iter().any(|p| p.table == *table))
        .collect();
    check_placed(&placed)?;
    if missing_reference.is_empty() && missing_distributed.is_empty() {
        return Ok(Vec::new());
    }
    // One connection per worker for the whole transaction: Citus refuses to modify a
    // table after a parallel operation on another in the same transaction.
    transaction
        .batch_execute("SET LOCAL citus.multi_shard_modify_mode TO sequential")
        .await?;
    // operations carries the budget and refund triggers, which are to run on its shards.
    transaction
        .batch_execute("SET LOCAL citus.enable_unsafe_triggers TO on")
        .await?;
    if let Some(count) = shard_count {
        transaction
            .batch_execute(&format!("SET LOCAL citus.shard_count TO {count}"))
            .await?;
    }
    let foreign_keys = transaction.query(FOREIGN_KEYS, &[&all]).await?;
    let mut dropped = Vec::new();
    for row in &foreign_keys {
        let (table, name, definition): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        if placed.iter().any(|p| p.table == table) {
            continue;
        }
        transaction
            .batch_execute(&format!("ALTER TABLE {table} DROP CONSTRAINT {name}"))
            .await?;
        dropped.push((table, name, definition));
    }
    for table in &missing_reference {
        transaction
            .execute(
                "SELECT create_reference_table($1::text::regclass)",
                &[table],
            )
            .await?;
    }
    for table in &missing_distributed {
        let colocate_with = if *table == DISTRIBUTED_TABLES[0] {
            "none"
        } else {
            DISTRIBUTED_TABLES[0]
        };
        transaction
            .execute(
                "SELECT create_distributed_table($1::text::regclass, $2, colocate_with => $3)",
                &[table, &DISTRIBUTION_COLUMN, &colocate_with],
            )
            .await?;
    }
    for (table, name, definition) in &dropped {
        transaction
            .batch_execute(&format!(
                "ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"
            ))
            .await?;
    }
    check_placed(&placement(&transaction, &all).await?)?;
    transaction.commit().await?;
    Ok(missing_reference
        .into_iter()
        .chain(missing_distributed)
        .map(str::to_owned)
        .collect())
}

/// `statement` with each `(from, to)` applied once: the one-agent form of a statement
/// that finds due rows across agents, so that Citus can run it on one node. Panics
/// (at first use, in every test that runs it) when the statement no longer contains
/// a `from`.
pub(crate) fn for_one_agent(statement: &str, replacements: &[(&str, &str)]) -> String {
    replacements
        .iter()
        .fold(statement.to_owned(), |sql, (from, to)| {
            assert!(
                sql.contains(from),
                "the statement no longer contains {from:?}"
            );
            sql.replacen(from, to, 1)
        })
}

/// On Citus, a claim agent by agent: runs `per_agent` for each agent that `agents`
/// finds (its `$1`: at most `batch` of them), with `leading`, then the rows still
/// wanted, then the agent as its parameters, until `batch` rows came back. Each
/// statement names one agent, so Citus runs it on one node, and returns its audit
/// rows (`audit_apart`), inserted in the same transaction.
pub(crate) async fn agent_by_agent(
    client: &mut deadpool_postgres::Object,
    agents: &str,
    per_agent: &str,
    leading: &[&(dyn ToSql + Sync)],
    batch: i64,
) -> Result<Vec<Row>, StoreError> {
    let agents = client.prepare_cached(agents).await?;
    let mut rows = Vec::new();
    for row in client.query(&agents, &[&batch]).await? {
        let agent: String = row.get(0);
        let left = batch - rows.len() as i64;
        if left <= 0 {
            break;
        }
        let mut params = leading.to_vec();
        params.push(&left);
        params.push(&agent);
        rows.extend(write_then_audit(client, per_agent, &params).await?);
    }
    Ok(rows)
}

struct Placement {
    table: String,
    method: String,
    column: String,
    colocation: i32,
}

async fn placement(
    transaction: &tokio_postgres::Transaction<'_>,
    tables: &[&str],
) -> Result<Vec<Placement>, StoreError> {
    Ok(transaction
        .query(PLACEMENT, &[&tables])
        .await?
        .iter()
        .map(|row| Placement {
            table: row.get(0),
            method: row.get(1),
            column: row.get(2),
            colocation: row.get(3),
        })
        .collect())
}

/// Every table already placed is placed as opgate needs it: a reference table where
/// one is expected, the others by agent_id and all co-located. Anything else was done
/// by hand, and going on would hide it.
fn check_placed(placed: &[Placement]) -> Result<(), StoreError> {
    let anchor = placed
        .iter()
        .find(|p| p.table == DISTRIBUTED_TABLES[0])
        .map(|p| p.colocation);
    for p in placed {
        let expected_reference = REFERENCE_TABLES.contains(&p.table.as_str());
        let wrong = if expected_reference {
            p.method != "n"
        } else {
            p.method != "h"
                || p.column != DISTRIBUTION_COLUMN
                || anchor.is_some_and(|colocation| colocation != p.colocation)
        };
        if wrong {
            return Err(StoreError::Citus(format!(
                "table {} is already placed on Citus in a way opgate does not use \
                 (method {}, column '{}'): {} must be {}",
                p.table,
                p.method,
                p.column,
                p.table,
                if expected_reference {
                    "a reference table".to_owned()
                } else {
                    format!("distributed by {DISTRIBUTION_COLUMN}, co-located with operations")
                }
            )));
        }
    }
    Ok(())
}
