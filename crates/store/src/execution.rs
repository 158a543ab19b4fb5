//! The executor's statements: claiming due outbox events under a fenced lease,
//! heartbeats, and the fenced requeue and release writes (completion is in fenced.rs).
//! Every write after the claim carries `fencing_token = $mine AND status = 'IN_PROGRESS'`; zero rows
//! affected means the lease was lost and nothing was applied.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use opgate_domain::OperationStatus;
use rust_decimal::Decimal;
use tokio_postgres::Row;

use crate::fenced::FencedWrite;
use crate::lease::Lease;
use uuid::Uuid;

use crate::audit_apart::{returning_audit_rows, write_then_audit};
use crate::citus::for_one_agent;
use crate::error::StoreError;
use crate::pool::Store;

/// An operation this worker now holds the lease on.
#[derive(Debug, Clone)]
pub struct ClaimedOperation {
    pub operation_id: Uuid,
    pub agent_id: String,
    /// The kind, and the provider recorded for it at registration.
    pub operation_type: String,
    pub provider: String,
    pub fencing_token: i64,
    /// IN_PROGRESS means a previous worker's lease expired mid-execution.
    pub previous_status: OperationStatus,
    pub attempts: i32,
    pub retry_count: i32,
    /// The normalised business fields, as registered.
    pub payload: serde_json::Value,
    /// The money it moves, for kinds that do.
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    /// Known when an earlier attempt learnt it (a pending answer, say).
    pub provider_reference: Option<String>,
    pub trace_context: Option<String>,
    /// Where its event stood in the claim order (`ClaimCursor`).
    pub position: ClaimCursor,
}

/// A position in the claim order (due time, then event id). Every event before the
/// first one a claim took was claimed, locked by another claim or finished when it
/// ran, so the next claim may start there instead of walking past them again: behind
/// a snapshot that stops VACUUM, the finished ones are dead rows it would visit one by
/// one. Only a hint: an event can become due again before it (its lease expired), so
/// the executor still claims from the start every so often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClaimCursor {
    pub available_at: SystemTime,
    pub event_id: i64,
}

pub(crate) const CLAIM_DUE: &str = "
WITH due AS (
    SELECT o.event_id, o.available_at, o.operation_id, op.status AS previous_status
    FROM outbox o
    JOIN operations op ON op.operation_id = o.operation_id
    WHERE o.available_at <= now()
      AND (o.claimed_until IS NULL OR o.claimed_until < now())
    -- No condition on op.status here: an outbox event exists only while its operation
    -- is PENDING or IN_PROGRESS (every other transition deletes it in its own
    -- statement), and with one the planner, which rightly believes few operations are
    -- unsettled, hashes all of them and sorts the whole backlog on every claim (15 ms
    -- with 15,000 queued) instead of walking the due index for the first few. The
    -- update of the operation checks the status it read here.
    ORDER BY o.available_at, o.event_id
    -- A subquery, so that no plan knows the batch size: a custom plan that did would
    -- always look cheaper than the generic one, and PostgreSQL would plan every claim
    -- again (1 ms of planning per claim). The executor's connections refuse sequential
    -- scans, so the plan it keeps walks the due index whatever the outbox held when it
    -- was made.
    LIMIT (SELECT $3::bigint)
    -- Both rows, skipping any a worker is writing: every other writer locks the
    -- operation first, so waiting on it here could deadlock.
    FOR UPDATE OF o, op SKIP LOCKED
), events AS (
    UPDATE outbox o
    SET claimed_by = $1,
        claimed_until = now() + $2::float8 * interval '1 millisecond',
        attempts = o.attempts + 1
    -- Arrays, not joins, name the rows to update: the executor's prepared statement
    -- runs a generic plan, which guesses a hundred claimed rows and then hashes the
    -- whole outbox, or every unsettled operation, to join them.
    WHERE o.event_id = ANY (ARRAY(SELECT event_id FROM due))
    RETURNING o.operation_id
), claimed AS (
    UPDATE operations op
    SET status = 'IN_PROGRESS',
        fencing_token = op.fencing_token + 1,
        lease_owner = $1,
        lease_expires_at = now() + $2::float8 * interval '1 millisecond',
        attempts = op.attempts + 1,
        updated_at = now()
    FROM due d
    -- The status as `due` locked it, which no one else can change before this commits.
    -- No column this sets is in an index of operations (V15), so PostgreSQL writes the
    -- new row version on the same page and no index entry (a HOT update).
    WHERE op.operation_id = ANY (ARRAY(SELECT operation_id FROM events))
      AND op.operation_id = d.operation_id AND d.previous_status IN ('PENDING', 'IN_PROGRESS')
    RETURNING op.operation_id, op.agent_id, op.operation_type, op.provider, op.fencing_token,
              d.previous_status, op.attempts, op.retry_count, op.request_payload, op.amount,
              op.currency, op.provider_reference, op.trace_context,
              d.available_at AS due_at, d.event_id
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, previous_status, 'IN_PROGRESS', $1,
           CASE WHEN previous_status = 'IN_PROGRESS' THEN 'lease expired; taken over' ELSE 'claimed' END,
           fencing_token
    FROM claimed
)
SELECT * FROM claimed";

/// `CLAIM_DUE` starting at a `ClaimCursor` (`$4`, `$5`): the row comparison is a
/// condition on the due index, so the scan starts there. Its values come through
/// subqueries for the reason the batch size does.
static CLAIM_DUE_FROM: LazyLock<String> = LazyLock::new(|| {
    let from = "WHERE o.available_at <= now()\n      AND (o.available_at, o.event_id) >= ((SELECT $4::timestamptz), (SELECT $5::bigint))";
    let claim = CLAIM_DUE.replacen("WHERE o.available_at <= now()", from, 1);
    assert_ne!(
        claim, CLAIM_DUE,
        "CLAIM_DUE no longer starts its filter as expected"
    );
    claim
});

/// `CLAIM_DUE` for one agent's events (`$4`): on Citus every table in it is then
/// filtered by the distribution column, so the statement, row locks included, runs on
/// the one node that holds the agent's shard (Citus refuses `FOR UPDATE` in a query
/// that spans shards), its audit rows written apart (`audit_apart`). Its batch size is
/// a plain parameter, as it was when the Citus tests last ran: the subquery that keeps
/// one plan on a single node has not been run through Citus's router.
static CLAIM_DUE_FOR_AGENT: LazyLock<String> = LazyLock::new(|| {
    for_one_agent(
        &returning_audit_rows(CLAIM_DUE),
        &[
            ("LIMIT (SELECT $3::bigint)", "LIMIT $3"),
            (
                "JOIN operations op ON op.operation_id = o.operation_id",
                "JOIN operations op ON op.operation_id = o.operation_id AND op.agent_id = $4",
            ),
            (
                "WHERE o.available_at <= now()",
                "WHERE o.agent_id = $4 AND o.available_at <= now()",
            ),
            (
                "WHERE o.event_id = ANY (ARRAY(SELECT event_id FROM due))",
                "WHERE o.agent_id = $4 AND o.event_id = ANY (ARRAY(SELECT event_id FROM due))",
            ),
            (
                "WHERE op.operation_id = ANY (ARRAY(SELECT operation_id FROM events))",
                "WHERE op.agent_id = $4 AND op.operation_id = ANY (ARRAY(SELECT operation_id FROM events))",
            ),
        ],
    )
});

/// Agents with events due and unclaimed, in no particular order: on Citus, where the
/// executor claims one agent's events at a time, the agents to claim for. A read on
/// every shard, without locks.
const DUE_AGENTS: &str = "
SELECT DISTINCT agent_id FROM outbox
WHERE available_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
LIMIT $1";

/// The last line of `CLAIM_DUE` (the pgbench pair aggregates it instead).
pub(crate) const CLAIM_RESULT: &str = "SELECT * FROM claimed";

// Every statement below names the lease's agent (`$4`, `$3`, `$7`) beside its
// operation, for every table it touches: on Citus it then runs on the agent's node
// alone; on one PostgreSQL it is part of the primary key and changes nothing.

const HEARTBEAT: &str = "
WITH op AS (
    UPDATE operations
    SET lease_expires_at = now() + $3::float8 * interval '1 millisecond'
    WHERE operation_id = $1 AND agent_id = $4 AND fencing_token = $2 AND status = 'IN_PROGRESS'
    RETURNING operation_id, lease_expires_at
)
UPDATE outbox SET claimed_until = op.lease_expires_at
FROM op WHERE outbox.agent_id = $4 AND outbox.operation_id = op.operation_id
RETURNING outbox.operation_id";

const COUNT_ATTEMPT: &str = "
UPDATE operations SET attempts = attempts + 1, updated_at = now()
WHERE operation_id = $1 AND agent_id = $3 AND fencing_token = $2 AND status = 'IN_PROGRESS'";

const REQUEUE: &str = "
WITH updated AS (
    UPDATE operations
    SET status = 'PENDING',
        retry_count = retry_count + 1,
        last_error = $3,
        lease_owner = NULL,
        lease_expires_at = NULL,
        next_attempt_at = now() + $4::float8 * interval '1 millisecond',
        updated_at = now()
    WHERE operation_id = $1 AND agent_id = $7 AND fencing_token = $2 AND status = 'IN_PROGRESS'
    RETURNING operation_id, agent_id, next_attempt_at
), requeued AS (
    UPDATE outbox
    SET claimed_by = NULL, claimed_until = NULL, available_at = updated.next_attempt_at
    FROM updated WHERE outbox.agent_id = $7 AND outbox.operation_id = updated.operation_id
), audit AS (
    INSERT INTO operation_events (operation_id, agent_id, from_status, to_status, actor, reason, fencing_token)
    SELECT operation_id, agent_id, 'IN_PROGRESS', 'PENDING', $5, $6, $2 FROM updated
)
SELECT count(*) FROM updated";

const RELEASE: &str = "
WITH op AS (
    UPDATE operations SET lease_expires_at = now()
    WHERE operation_id = $1 AND agent_id = $3 AND fencing_token = $2 AND status = 'IN_PROGRESS'
    RETURNING operation_id
)
UPDATE outbox SET claimed_until = now() - interval '1 millisecond'
FROM op WHERE outbox.agent_id = $3 AND outbox.operation_id = op.operation_id";

/// An operation going back to PENDING under its fence (`Store::requeue`).
pub(crate) struct Requeue<'a> {
    pub lease: &'a Lease,
    pub actor: &'a str,
    pub delay: Duration,
    pub last_error: &'a str,
    pub reason: &'a str,
}

pub(crate) fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Store {
    /// Claims up to `batch` due events (new, or abandoned by an expired lease), taking
    /// a lease on each operation with a new fencing token, in one committed statement.
    #[tracing::instrument(level = "debug", name = "UPDATE outbox", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "outbox"))]
    pub async fn claim_due_operations(
        &self,
        owner: &str,
        lease: Duration,
        batch: i64,
    ) -> Result<Vec<ClaimedOperation>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(CLAIM_DUE).await?;
        let rows = client
            .query(&statement, &[&owner, &millis(lease), &batch])
            .await?;
        rows.iter().map(claimed_from_row).collect()
    }

    /// `claim_due_operations`, considering only events at or after `from` in the
    /// claim order.
    #[tracing::instrument(level = "debug", name = "UPDATE outbox", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "outbox"))]
    pub async fn claim_due_operations_from(
        &self,
        owner: &str,
        lease: Duration,
        batch: i64,
        from: ClaimCursor,
    ) -> Result<Vec<ClaimedOperation>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(&CLAIM_DUE_FROM).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &owner,
            &millis(lease),
            &batch,
            &from.available_at,
            &from.event_id,
        ];
        let rows = client.query(&statement, &params).await?;
        rows.iter().map(claimed_from_row).collect()
    }

    /// `claim_due_operations` for one agent's events only (`DUE_AGENTS`).
    #[tracing::instrument(level = "debug", name = "UPDATE outbox", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "outbox"))]
    pub async fn claim_due_operations_of_agent(
        &self,
        owner: &str,
        lease: Duration,
        batch: i64,
        agent_id: &str,
    ) -> Result<Vec<ClaimedOperation>, StoreError> {
        let mut client = self.client().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&owner, &millis(lease), &batch, &agent_id];
        let rows = write_then_audit(&mut client, &CLAIM_DUE_FOR_AGENT, &params).await?;
        rows.iter().map(claimed_from_row).collect()
    }

    /// Up to `limit` agents with events due and unclaimed.
    pub async fn due_agents(&self, limit: i64) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(DUE_AGENTS).await?;
        let rows = client.query(&statement, &[&limit]).await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Extends the lease; `false` means it was lost (another worker took over).
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn heartbeat(&self, lease: &Lease, length: Duration) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(HEARTBEAT).await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
            &lease.operation_id,
            &lease.fencing_token,
            &millis(length),
            &lease.agent_id,
        ];
        let rows = client.query(&statement, &params).await?;
        Ok(!rows.is_empty())
    }

    /// Counts one more provider call under this lease; `false` if the lease was lost.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn count_attempt(&self, lease: &Lease) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&lease.operation_id, &lease.fencing_token, &lease.agent_id];
        // Prepared once per connection: with the text, each retry of a call paid a
        // round trip to parse the same statement again first.
        let statement = client.prepare_cached(COUNT_ATTEMPT).await?;
        Ok(client.execute(&statement, &params).await? == 1)
    }

    /// Puts the operation back to PENDING (the request never reached the provider) and
    /// makes its outbox event due again after `delay`.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn requeue_with_fence(
        &self,
        lease: &Lease,
        actor: &str,
        delay: Duration,
        last_error: &str,
    ) -> Result<FencedWrite, StoreError> {
        let reason = "request never reached the provider; retry scheduled";
        let requeue = Requeue {
            lease,
            actor,
            delay,
            last_error,
            reason,
        };
        self.requeue(REQUEUE, &requeue).await
    }

    /// Runs a requeue statement (`$1` operation, `$2` fencing token, `$3` last error,
    /// `$4` delay in ms, `$5` actor, `$6` audit reason, `$7` agent, one count back)
    /// and records a refusal as a stale write.
    pub(crate) async fn requeue(
        &self,
        statement: &str,
        requeue: &Requeue<'_>,
    ) -> Result<FencedWrite, StoreError> {
        let distributed = self.is_distributed().await?;
        let mut client = self.client().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &requeue.lease.operation_id,
            &requeue.lease.fencing_token,
            &requeue.last_error,
            &millis(requeue.delay),
            &requeue.actor,
            &requeue.reason,
            &requeue.lease.agent_id,
        ];
        let count = if distributed {
            let statement = returning_audit_rows(statement);
            write_then_audit(&mut client, &statement, &params)
                .await?
                .len() as i64
        } else {
            let statement = client.prepare_cached(statement).await?;
            client.query_one(&statement, &params).await?.get(0)
        };
        drop(client);
        let write = FencedWrite::from_count(count);
        if write == FencedWrite::RejectedStale {
            self.record_stale_write(requeue.lease, "PENDING", requeue.actor, requeue.reason)
                .await?;
        }
        Ok(write)
    }

    /// Gives the lease up at once (on shutdown), so another worker can take over now
    /// rather than after the lease expires.
    #[tracing::instrument(name = "UPDATE operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "operations"))]
    pub async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let client = self.client().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&lease.operation_id, &lease.fencing_token, &lease.agent_id];
        client.execute(RELEASE, &params).await?;
        Ok(())
    }
}

impl ClaimedOperation {
    /// The lease this claim took, for the writes that follow it.
    pub fn lease(&self) -> Lease {
        Lease {
            operation_id: self.operation_id,
            agent_id: self.agent_id.clone(),
            fencing_token: self.fencing_token,
        }
    }
}

fn claimed_from_row(row: &Row) -> Result<ClaimedOperation, StoreError> {
    let previous: String = row.get("previous_status");
    Ok(ClaimedOperation {
        operation_id: row.get("operation_id"),
        agent_id: row.get("agent_id"),
        operation_type: row.get("operation_type"),
        provider: row.get("provider"),
        fencing_token: row.get("fencing_token"),
        previous_status: previous.parse()?,
        attempts: row.get("attempts"),
        retry_count: row.get("retry_count"),
        payload: row.get("request_payload"),
        amount: row.get("amount"),
        currency: row.get("currency"),
        provider_reference: row.get("provider_reference"),
        trace_context: row.get("trace_context"),
        position: ClaimCursor {
            available_at: row.get("due_at"),
            event_id: row.get("event_id"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::{CLAIM_DUE, CLAIM_DUE_FOR_AGENT, CLAIM_DUE_FROM};

    #[test]
    fn the_claim_variants_are_made_from_the_claim() {
        assert!(CLAIM_DUE.contains("LIMIT (SELECT $3::bigint)"));
        assert!(CLAIM_DUE_FROM.contains("((SELECT $4::timestamptz), (SELECT $5::bigint))"));
        // On Citus (one agent's claim, $4) the batch size stays a plain parameter.
        assert!(CLAIM_DUE_FOR_AGENT.contains("LIMIT $3\n"));
        assert!(CLAIM_DUE_FOR_AGENT.contains("WHERE o.agent_id = $4 AND o.available_at <= now()"));
    }
}
