//! What keeps the queue from being vacuumed: the outbox's dead tuples, and the oldest
//! transaction and xmin horizon that pin them. Read with the pipeline gauges by the
//! executor and reconciler (`opgate_outbox_dead_tuples`, `opgate_oldest_transaction_age`,
//! `opgate_oldest_xmin_age`); docs/operations.md says what to do when they grow.

use crate::error::StoreError;
use crate::pool::Store;

/// One reading of the queue's health.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueHealth {
    /// Dead tuples over the outbox and all its partitions, as the statistics system
    /// last counted them (backends report within about ten seconds of the writes).
    pub outbox_dead_tuples: i64,
    /// How long the oldest open transaction of another session of this database that
    /// holds back vacuum has been open, in seconds; 0 when there is none.
    pub oldest_transaction_age_seconds: f64,
    /// How many transactions old the oldest xmin that holds back vacuum of this
    /// database's tables is (sessions, prepared transactions, replication slots); 0
    /// when nothing older than the present is held.
    pub oldest_xmin_age: i64,
}

/// Dead tuples of the outbox, whether it is one table or a partitioned parent (which
/// stores no rows) with its partitions. `pg_partition_tree` lists nothing for a table
/// that is neither partitioned nor a partition, hence the table itself by name.
const OUTBOX_DEAD_TUPLES: &str = "
SELECT COALESCE(sum(n_dead_tup), 0)::int8
FROM pg_stat_user_tables
WHERE relid = 'outbox'::regclass
   OR relid IN (SELECT relid FROM pg_partition_tree('outbox'))";

/// The sessions that hold back vacuum of this database's tables (PostgreSQL ≥ 14
/// computes the horizon of a non-shared table from the backends of its own database,
/// plus walsenders, which have no database), leaving out this session and autovacuum
/// workers (vacuum ignores them when it computes the horizon, and a long autovacuum
/// is not a forgotten transaction).
///
/// The age in seconds counts sessions in a transaction that holds a snapshot (any
/// isolation level, mid-statement included) or an xid (a READ COMMITTED transaction
/// that wrote keeps the horizon between statements through its xid), or that sits idle
/// in one (even one that only read holds its locks, which block the DDL of any table
/// it touched). The xmin age is the oldest of: those sessions' snapshot xmin and own
/// xid, prepared transactions of this database (they survive restarts), and the
/// `xmin` of replication slots (a standby's hot_standby_feedback; a logical slot's
/// `catalog_xmin` holds back only the system catalogs, so it is not counted).
const HORIZON: &str = "
WITH holders AS (
    SELECT xact_start, backend_xmin, backend_xid, state
    FROM pg_stat_activity
    WHERE pid <> pg_backend_pid()
      AND (datname = current_database() OR datname IS NULL)
      AND backend_type <> 'autovacuum worker'
)
SELECT
    COALESCE((
        SELECT EXTRACT(EPOCH FROM max(clock_timestamp() - xact_start))::float8
        FROM holders
        WHERE xact_start IS NOT NULL
          AND (backend_xmin IS NOT NULL
               OR backend_xid IS NOT NULL
               OR state IN ('idle in transaction', 'idle in transaction (aborted)'))
    ), 0),
    GREATEST(
        (SELECT max(GREATEST(age(backend_xmin), age(backend_xid))) FROM holders),
        (SELECT max(age(transaction)) FROM pg_prepared_xacts
         WHERE database = current_database()),
        (SELECT max(age(xmin)) FROM pg_replication_slots),
        0
    )::int8";

impl Store {
    /// Two small reads of the statistics views: cheap at any queue size, for the
    /// gauges every few seconds. A role without `pg_read_all_stats` sees only its own
    /// role's sessions in pg_stat_activity (docs/operations.md).
    #[tracing::instrument(level = "debug", name = "SELECT pg_stat_activity", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "pg_stat_activity"))]
    pub async fn queue_health(&self) -> Result<QueueHealth, StoreError> {
        let client = self.client().await?;
        let dead = client.query_one(OUTBOX_DEAD_TUPLES, &[]).await?;
        let horizon = client.query_one(HORIZON, &[]).await?;
        Ok(QueueHealth {
            outbox_dead_tuples: dead.get(0),
            oldest_transaction_age_seconds: horizon.get(0),
            oldest_xmin_age: horizon.get(1),
        })
    }
}
