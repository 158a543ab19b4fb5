//! The rotating outbox (V13) against real executors and a real PostgreSQL: a lease held
//! while its event is moved to another partition is kept and nothing runs twice; the
//! drained events' dead rows leave the disk even while another session's snapshot
//! stops VACUUM; a session that read the outbox and stayed open only postpones the
//! rotation, named in the executor's log; and an upgrade keeps every pending event.

use std::collections::HashMap;
use std::time::Duration;

use opgate_e2e::citus::CitusDb;
use opgate_e2e::db::{empty_database, register_payment};
use opgate_e2e::{eventually, opgate, Executor, Stack};
use uuid::Uuid;

/// The partition each event is in, by operation.
async fn slots(db: &tokio_postgres::Client) -> HashMap<Uuid, (i16, Option<String>)> {
    db.query("SELECT operation_id, slot, claimed_by FROM outbox", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect()
}

/// Bytes on disk of the outbox's partitions, live and dead rows alike.
async fn outbox_bytes(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT COALESCE(sum(pg_relation_size(relid)), 0)::bigint \
         FROM pg_partition_tree('outbox') WHERE isleaf",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// A session that takes a REPEATABLE READ snapshot with `statement` and stays idle in
/// its transaction, as a forgotten psql does. Returns its client and backend pid.
async fn held_snapshot(url: &str, statement: &str) -> (tokio_postgres::Client, i32) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; {statement}"
        ))
        .await
        .unwrap();
    let pid = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    (client, pid)
}

#[tokio::test]
async fn a_lease_held_while_its_event_moves_partition_is_kept_and_nothing_runs_twice() {
    leases_and_events_survive_rotation(Stack::start(&[]).await).await;
}

/// The same on Citus (`make test-citus`), where the rotation reads the shards' sizes
/// and statistics and locks the partition on every worker.
#[tokio::test]
async fn citus_rotates_the_outbox_and_keeps_leases_and_events() {
    let Some((cluster, db)) =
        CitusDb::migrated("citus_rotates_the_outbox_and_keeps_leases_and_events", 8).await
    else {
        return;
    };
    leases_and_events_survive_rotation(Stack::start_on(db, &[]).await).await;
    cluster.drop_everywhere().await;
}

async fn leases_and_events_survive_rotation(stack: Stack) {
    // Every provider call takes 8 s: the events rotate (every 2 s) while their
    // leases are held, and the 3 s lease must be renewed by heartbeats that find them
    // in their new partition.
    stack
        .sim
        .set_faults(serde_json::json!({"delay_ms": 8000}))
        .await;
    let ids = stack.pay_many(100, 25).await;
    let db = stack.db.sql().await;
    let executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--concurrency", "128", "--lease", "3s"],
    )
    .await;
    let claimed = eventually(Duration::from_secs(10), "every event claimed", || async {
        let now = slots(&db).await;
        (now.len() == ids.len() && now.values().all(|(_, owner)| owner.is_some())).then_some(now)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let later = slots(&db).await;
    assert_eq!(later.len(), ids.len(), "events vanished in flight");
    for (id, (slot, owner)) in &later {
        let (before, before_owner) = &claimed[id];
        assert_ne!(slot, before, "event of {id} did not move in 4.5 s");
        assert_eq!(owner, before_owner, "the claim moved with the event");
    }

    stack
        .wait_all_succeeded(ids.len() as i64, Duration::from_secs(60))
        .await;
    for id in &ids {
        assert_eq!(stack.charges_for(*id).await.len(), 1, "{id}");
        let trail = stack.trail(*id).await;
        assert_eq!(
            trail.iter().filter(|t| t.contains("IN_PROGRESS")).count(),
            1,
            "claimed once, lease never lost: {trail:?}"
        );
    }
    assert_eq!(stack.db.counts().await.outbox, 0);
    drop(executor);
}

#[tokio::test]
async fn drained_events_leave_the_disk_while_a_snapshot_stops_vacuum() {
    let stack = Stack::start(&[]).await;
    let (held, held_pid) = held_snapshot(&stack.db.url, "SELECT count(*) FROM agents").await;
    let ids = stack.pay_many(600, 32).await;
    let _executor =
        Executor::start(&stack.db.url, &stack.sim.base_url, &["--concurrency", "64"]).await;
    stack
        .wait_all_succeeded(ids.len() as i64, Duration::from_secs(60))
        .await;

    let db = stack.db.sql().await;
    // Once the slot has moved on, the partitions the events were in are truncated:
    // nothing of 600 events' rows is left, though none of them could be vacuumed.
    eventually(
        Duration::from_secs(15),
        "an empty outbox on disk",
        || async { (outbox_bytes(&db).await == 0).then_some(()) },
    )
    .await;
    // The snapshot was held all along: VACUUM still cannot remove the operations'
    // old row versions.
    db.batch_execute("VACUUM operations").await.unwrap();
    let dead: i64 = db
        .query_one(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'operations'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(dead > 0, "the held snapshot did not hold back VACUUM");
    let state: String = db
        .query_one(
            "SELECT state FROM pg_stat_activity WHERE pid = $1",
            &[&held_pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "idle in transaction");
    held.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test]
async fn a_session_that_read_the_outbox_postpones_the_rotation_and_is_named() {
    let stack = Stack::start(&[]).await;
    // Reading the outbox takes a lock on every partition, held to the transaction's
    // end: no partition can be truncated meanwhile.
    let (held, held_pid) = held_snapshot(&stack.db.url, "SELECT count(*) FROM outbox").await;
    let ids = stack.pay_many(300, 32).await;
    let executor =
        Executor::start(&stack.db.url, &stack.sim.base_url, &["--concurrency", "64"]).await;
    stack
        .wait_all_succeeded(ids.len() as i64, Duration::from_secs(60))
        .await;
    for id in &ids {
        assert_eq!(stack.charges_for(*id).await.len(), 1, "{id}");
    }
    let needle = format!("\"pid\":{held_pid}");
    eventually(
        Duration::from_secs(15),
        "the executor to name the holder",
        || async {
            let logs = executor.service.logs();
            logs.lines()
                .any(|l| l.contains("cannot rotate") && l.contains(&needle))
                .then_some(())
        },
    )
    .await;
    let db = stack.db.sql().await;
    assert!(outbox_bytes(&db).await > 0, "rotated despite the lock");

    held.batch_execute("COMMIT").await.unwrap();
    eventually(
        Duration::from_secs(15),
        "an empty outbox on disk",
        || async { (outbox_bytes(&db).await == 0).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn an_upgrade_keeps_every_pending_event_and_its_id() {
    let url = empty_database().await;
    opgate(&url, &["migrate", "--to", "12"]).success();
    opgate(&url, &["agents", "create", "agent"]).success();
    let store = opgate_store::Store::connect(&url, &Default::default()).unwrap();
    for i in 0..20 {
        register_payment(&store, "agent", &format!("before-{i}"), "10.00").await;
    }
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // One event claimed, as an executor of the previous release would have left it.
    db.execute(
        "UPDATE outbox SET claimed_by = 'executor:old', claimed_until = now() + interval '1 minute', \
         attempts = 1 WHERE event_id = (SELECT min(event_id) FROM outbox)",
        &[],
    )
    .await
    .unwrap();
    const EVENTS: &str = "SELECT event_id, operation_id, agent_id, event_type, available_at, \
                          claimed_by, claimed_until, attempts, trace_context, created_at \
                          FROM outbox ORDER BY event_id";
    let render = |rows: Vec<tokio_postgres::Row>| -> Vec<String> {
        rows.iter()
            .map(|r| {
                format!(
                    "{}|{}|{}|{}|{:?}|{:?}|{:?}|{}|{:?}|{:?}",
                    r.get::<_, i64>(0),
                    r.get::<_, Uuid>(1),
                    r.get::<_, String>(2),
                    r.get::<_, String>(3),
                    r.get::<_, std::time::SystemTime>(4),
                    r.get::<_, Option<String>>(5),
                    r.get::<_, Option<std::time::SystemTime>>(6),
                    r.get::<_, i32>(7),
                    r.get::<_, Option<String>>(8),
                    r.get::<_, std::time::SystemTime>(9),
                )
            })
            .collect()
    };
    let before = render(db.query(EVENTS, &[]).await.unwrap());
    assert_eq!(before.len(), 20);

    opgate(&url, &["migrate"]).success();
    let after = render(db.query(EVENTS, &[]).await.unwrap());
    assert_eq!(after, before, "every event, as it was");
    let last: i64 = db
        .query_one("SELECT max(event_id) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    let id = register_payment(&store, "agent", "after", "10.00").await;
    let new: i64 = db
        .query_one(
            "SELECT event_id FROM outbox WHERE operation_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(new > last, "event ids carry on ({new} after {last})");
}
