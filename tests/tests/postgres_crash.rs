//! PostgreSQL killed (`pg_ctl stop -m immediate`: no checkpoint, every backend gone at
//! once) while agents register payments through intake and an executor drains them
//! against provider-sim; then restarted, crash recovery replaying the WAL. Intake, the
//! executor and the reconciler are not restarted: they must reconnect by themselves.
//!
//! What must hold: every request answered 2xx survives with its operation and its outbox
//! event (or has been executed since); a request that failed during the outage, re-sent
//! with the same Idempotency-Key as an agent would, registers one operation at most;
//! every operation ends SUCCEEDED with exactly one charge in the provider's ledger.
//! The private cluster commits synchronously (tests/src/cluster.rs), so an
//! acknowledged commit cannot be lost legitimately.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use opgate_e2e::agent_load::{
    assert_all_succeed, assert_charged_once_each, send_payment, stored_ids, AgentLoad,
};
use opgate_e2e::{eventually, Executor, PgCluster, Reconciler, Stack, TestDb};
use uuid::Uuid;

const CLIENTS: usize = 8;
/// Each client stops after this many keys, whatever happens: the load is bounded.
const MAX_KEYS_PER_CLIENT: usize = 300;
/// Acknowledged registrations wanted before the crash, and again after the restart.
const ACKED_PER_PHASE: usize = 150;
// Phases of the load: 0 before the crash (where it starts), then:
const DOWN: u8 = 1;
const AFTER: u8 = 2;

/// Operations that are still to execute but have no outbox event to execute them.
const WITHOUT_EVENT: &str = "
SELECT count(*) FROM operations o
WHERE o.status IN ('PENDING', 'IN_PROGRESS')
  AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.operation_id)";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_crash_under_load_loses_no_acknowledged_operation_and_charges_none_twice() {
    let started = Instant::now();
    let cluster = PgCluster::start();
    let db = TestDb::create_on(&cluster.admin_url()).await;
    // A provider that takes a moment, so that provider calls are in flight at the crash.
    let stack = Stack::start_custom(
        db,
        &["delay-ms=25"],
        &["--allow", "payment"],
        &["--db-timeout", "1s"],
        &[],
    )
    .await;
    let executor = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "2s"]).await;
    let _reconciler = Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &[]).await;

    let load = AgentLoad::start(
        &stack.intake.base_url,
        &stack.key,
        "crash",
        CLIENTS,
        MAX_KEYS_PER_CLIENT,
    );
    load.wait_acked(ACKED_PER_PHASE).await;
    cluster.crash();
    load.set_phase(DOWN);
    eventually(
        Duration::from_secs(15),
        "requests to fail while the database is down",
        || async { (load.failed() >= CLIENTS).then_some(()) },
    )
    .await;
    cluster.start_server();
    load.set_phase(AFTER);
    // Intake answers 2xx again without being restarted.
    load.wait_acked(load.acked() + ACKED_PER_PHASE).await;
    let sent = load.stop().await;

    assert!(
        cluster
            .server_log()
            .contains("automatic recovery in progress"),
        "the server did not recover from a crash:\n{}",
        cluster.server_log()
    );
    let sql = stack.db.sql().await;
    let without_event: i64 = sql.query_one(WITHOUT_EVENT, &[]).await.unwrap().get(0);
    assert_eq!(
        without_event, 0,
        "operations to execute without an outbox event after the crash"
    );

    // What the clients saw: 2xx, or the database's 503 (0: no answer at all).
    let mut by_phase: BTreeMap<(u8, u16), usize> = BTreeMap::new();
    for s in &sent {
        *by_phase.entry((s.phase, s.status)).or_default() += 1;
    }
    println!("(phase, status) → requests: {by_phase:?}  [phase 0: before the crash, 1: down or restarting, 2: after]");
    let unexpected: Vec<_> = sent
        .iter()
        .filter(|s| !(200..300).contains(&s.status) && s.status != 503 && s.status != 0)
        .map(|s| (s.key.as_str(), s.status))
        .collect();
    assert!(
        unexpected.is_empty(),
        "answers other than 2xx, 503 or no answer: {unexpected:?}"
    );
    // Those in flight when the server died were sent before the phase moved on, so
    // failures are counted whatever phase they were sent in.
    assert!(
        sent.iter().filter(|s| s.operation_id.is_none()).count() >= CLIENTS,
        "fewer requests failed than there are clients: the crash was not felt"
    );

    // Every acknowledged operation is there, under its key, with the id it was given.
    let stored = stored_ids(&sql).await;
    let lost: Vec<_> = sent
        .iter()
        .filter_map(|s| s.operation_id.map(|id| (s, id)))
        .filter(|(s, id)| stored.get(&s.key) != Some(id))
        .map(|(s, id)| format!("{} ({id}): stored {:?}", s.key, stored.get(&s.key)))
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");

    // The agent re-sends what failed, with the same key; and a replay of what succeeded
    // names the same operation.
    let client = reqwest::Client::new();
    let mut answered: HashMap<String, Uuid> = HashMap::new();
    for s in &sent {
        let answer = eventually(
            Duration::from_secs(30),
            &format!("{} to be answered 2xx", s.key),
            || async {
                let answer = send_payment(
                    &client,
                    &stack.intake.base_url,
                    &stack.key,
                    "cus_crash",
                    &s.key,
                )
                .await;
                answer.operation_id.is_some().then_some(answer)
            },
        )
        .await;
        let id = answer.operation_id.unwrap();
        if let Some(first) = s.operation_id {
            assert_eq!(id, first, "{}: a replay named another operation", s.key);
            assert!(
                answer.replayed,
                "{}: acknowledged, then registered anew",
                s.key
            );
        }
        answered.insert(s.key.clone(), id);
    }
    let stored = stored_ids(&sql).await;
    assert_eq!(
        stored, answered,
        "the database holds exactly one operation per key sent, each as answered"
    );

    // Every operation ends SUCCEEDED, with one charge.
    let total = stored.len() as i64;
    assert_all_succeed(&sql, total).await;
    let ledger = stack.sim.ledger().await;
    assert_charged_once_each(&ledger, &stored);
    let charges = ledger["charges"].as_array().expect("charges");
    let outbox: i64 = sql
        .query_one("SELECT count(*) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        outbox, 0,
        "events left in the outbox after every operation ended"
    );

    let taken_over: i64 = sql
        .query_one(
            "SELECT count(*) FROM operation_events WHERE reason = 'lease expired; taken over'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let retried_writes = executor
        .service
        .logs()
        .matches("could not record the outcome; retrying")
        .count();
    println!(
        "{total} operations, {} charges; {taken_over} leases taken over after the crash, \
         {retried_writes} outcome writes retried by the executor; {:.1} s",
        charges.len(),
        started.elapsed().as_secs_f64()
    );
}
