//! Rotating the outbox's partitions (migration V13): a partition new events no longer
//! go to has its live events moved into the current one and is truncated, in one
//! transaction under its ACCESS EXCLUSIVE lock. TRUNCATE drops the file the dead rows
//! are in, which VACUUM cannot do while any snapshot is older than them.
//!
//! Safe against everything else that touches the outbox: a statement that reads or
//! writes the partition holds a lock that conflicts with ours, so it runs wholly
//! before the rotation (we wait for it, up to a short lock timeout) or wholly after
//! it, with a snapshot taken after our commit that finds the moved event in the
//! current partition. Claimed events move with their claim (claimed_by,
//! claimed_until), so a lease held across a rotation is unaffected. Rotators in
//! several executors take turns through an advisory lock.

use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::error::StoreError;
use crate::pool::Store;

/// Names opgate's rotation lock (transaction-scoped).
const ROTATION_LOCK_ID: i64 = 0x6f70_6f75_7462;

/// Partitions other than the current one worth rotating: not empty on disk, and
/// either holding few live events (cheap to move) or at least half as many dead rows
/// as live ones. Copying a large backlog to shed a few dead rows would cost more than
/// the claims save, so such a partition waits until its drain has left enough behind;
/// every dead row removed then costs at most two copies. The counts are the statistics
/// collector's estimates: they decide only when a partition rotates, never whether
/// anything is kept.
const STALE_PARTITIONS: &str = "
SELECT c.relname::text FROM pg_partition_tree('outbox') p
JOIN pg_class c ON c.oid = p.relid
LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
WHERE p.isleaf
  AND c.relname <> format('outbox_s%s', outbox_current_slot())
  AND pg_relation_size(p.relid) > 0
  AND (COALESCE(s.n_live_tup, 0) <= $1 OR COALESCE(s.n_dead_tup, 0) * 2 >= s.n_live_tup)
ORDER BY 1";

/// `STALE_PARTITIONS` on Citus, where the coordinator's partitions are empty shells:
/// the sizes and the statistics are the shards', summed over the workers.
const STALE_PARTITIONS_ON_CITUS: &str = "
SELECT c.relname::text FROM pg_partition_tree('outbox') p
JOIN pg_class c ON c.oid = p.relid
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(split_part(r.result, ' ', 1)::bigint), 0)::bigint AS live,
           COALESCE(sum(split_part(r.result, ' ', 2)::bigint), 0)::bigint AS dead
    FROM run_command_on_shards(p.relid::regclass::text,
        $cmd$SELECT COALESCE(max(n_live_tup), 0) || ' ' || COALESCE(max(n_dead_tup), 0)
             FROM pg_stat_user_tables WHERE relid = '%s'::regclass$cmd$) r
    WHERE r.success
) s
WHERE p.isleaf
  AND c.relname <> format('outbox_s%s', outbox_current_slot())
  AND citus_relation_size(p.relid) > 0
  AND (s.live <= $1 OR s.dead * 2 >= s.live)
ORDER BY 1";

/// Up to this many live events, a partition is rotated whatever its dead rows.
const CHEAP_TO_MOVE: i64 = 1000;

/// A backend whose transaction has been open for over a second and holds a lock on
/// the partition (a session that read the outbox and went idle, say). Waiting for it
/// would only queue every claim behind the rotation for the whole lock timeout.
const LONG_HOLDER: &str = "
SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = $1::text::regclass AND l.granted
  AND l.pid <> pg_backend_pid() AND a.xact_start < clock_timestamp() - interval '1 second'
LIMIT 1";

const TAKE_TURN: &str = "SELECT pg_try_advisory_xact_lock($1)";
const CURRENT_SLOT: &str = "SELECT outbox_current_slot()";

/// What one rotation did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OutboxRotation {
    /// Partitions moved out of and truncated.
    pub truncated: usize,
    /// Live events moved into the current partition.
    pub moved: u64,
    /// Partitions left for the next round: another statement held them past the lock
    /// timeout, or another executor was rotating.
    pub skipped: usize,
    /// A backend that keeps a partition from rotating: its transaction has been open
    /// for over a second and holds a lock on it.
    pub held_by: Option<i32>,
}

impl Store {
    /// Rotates every partition that is not the current one and is worth rotating.
    /// `lock_timeout` bounds how long claims and completions queue behind a rotation
    /// that waits for its lock.
    pub async fn rotate_outbox(
        &self,
        lock_timeout: Duration,
    ) -> Result<OutboxRotation, StoreError> {
        let distributed = self.is_distributed().await?;
        let mut client = self.client().await?;
        let stale_partitions = match distributed {
            true => STALE_PARTITIONS_ON_CITUS,
            false => STALE_PARTITIONS,
        };
        let stale: Vec<String> = client
            .query(stale_partitions, &[&CHEAP_TO_MOVE])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut rotation = OutboxRotation::default();
        for partition in stale {
            let Some(slot) = slot_of(&partition) else {
                return Err(StoreError::Corrupt(format!(
                    "outbox partition {partition} is not named outbox_s<slot>"
                )));
            };
            // (On Citus the locks are the workers': there the lock timeout alone
            // bounds the wait.)
            if !distributed {
                let holder = client.query_opt(LONG_HOLDER, &[&partition]).await?;
                if let Some(row) = holder {
                    rotation.held_by = Some(row.get(0));
                    rotation.skipped += 1;
                    continue;
                }
            }
            let transaction = client.transaction().await?;
            let rotated = rotate_one(&transaction, &partition, slot, lock_timeout, distributed);
            match rotated.await? {
                Some(moved) => {
                    transaction.commit().await?;
                    rotation.truncated += 1;
                    rotation.moved += moved;
                }
                None => {
                    transaction.rollback().await?;
                    rotation.skipped += 1;
                }
            }
        }
        Ok(rotation)
    }
}

/// Moves and truncates one partition; `None` when it must wait for another round.
async fn rotate_one(
    transaction: &tokio_postgres::Transaction<'_>,
    partition: &str,
    slot: i16,
    lock_timeout: Duration,
    distributed: bool,
) -> Result<Option<u64>, StoreError> {
    let turn: bool = transaction
        .query_one(TAKE_TURN, &[&ROTATION_LOCK_ID])
        .await?
        .get(0);
    if !turn {
        return Ok(None);
    }
    let millis = lock_timeout.as_millis().max(1);
    // On Citus the lock is taken on every worker too, where the timeout must also
    // hold; Citus sends SET LOCAL on only when asked to.
    let on_workers = match distributed {
        true => "SET LOCAL citus.propagate_set_commands = 'local'; ",
        false => "",
    };
    transaction
        .batch_execute(&format!("{on_workers}SET LOCAL lock_timeout = {millis}"))
        .await?;
    let lock = format!("LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE");
    match transaction.batch_execute(&lock).await {
        Ok(()) => {}
        Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    // Read under the lock, so that the target can never be the partition about to be
    // truncated (the slot moves on while a rotation waits).
    let current: i16 = transaction.query_one(CURRENT_SLOT, &[]).await?.get(0);
    if current == slot {
        return Ok(None);
    }
    let moved = transaction
        .execute(&move_statement(partition), &[&current])
        .await?;
    transaction
        .batch_execute(&format!("TRUNCATE {partition}"))
        .await?;
    Ok(Some(moved))
}

/// `outbox_s2` → 2; anything else is not a partition this code may truncate.
fn slot_of(partition: &str) -> Option<i16> {
    let digits = partition.strip_prefix("outbox_s")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Every column, as it is, into partition `$1` (through the parent, which routes it).
fn move_statement(partition: &str) -> String {
    const COLUMNS: &str = "event_id, operation_id, agent_id, event_type, available_at, \
                           claimed_by, claimed_until, attempts, trace_context, created_at";
    format!("INSERT INTO outbox ({COLUMNS}, slot) SELECT {COLUMNS}, $1::smallint FROM {partition}")
}

#[cfg(test)]
mod tests {
    use super::slot_of;

    #[test]
    fn only_ring_partitions_have_a_slot() {
        assert_eq!(slot_of("outbox_s0"), Some(0));
        assert_eq!(slot_of("outbox_s3"), Some(3));
        assert_eq!(slot_of("outbox_s"), None);
        assert_eq!(slot_of("outbox_s1; DROP TABLE operations"), None);
        assert_eq!(slot_of("operations"), None);
    }
}
