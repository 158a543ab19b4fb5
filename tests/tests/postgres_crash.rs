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
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opgate_e2e::api::payment_body;
use opgate_e2e::{eventually, Executor, PgCluster, Reconciler, Stack, TestDb};
use tokio::task::JoinHandle;
use uuid::Uuid;

const CLIENTS: usize = 8;
/// Each client stops after this many keys, whatever happens: the load is bounded.
const MAX_KEYS_PER_CLIENT: usize = 300;
/// Acknowledged registrations wanted before the crash, and again after the restart.
const ACKED_PER_PHASE: usize = 150;
const BEFORE: u8 = 0;
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

    let load = Load::start(&stack.intake.base_url, &stack.key);
    load.wait_acked(ACKED_PER_PHASE).await;
    cluster.crash();
    load.phase.store(DOWN, Ordering::SeqCst);
    eventually(
        Duration::from_secs(15),
        "requests to fail while the database is down",
        || async { (load.failed.load(Ordering::SeqCst) >= CLIENTS).then_some(()) },
    )
    .await;
    cluster.start_server();
    load.phase.store(AFTER, Ordering::SeqCst);
    // Intake answers 2xx again without being restarted.
    load.wait_acked(load.acked.load(Ordering::SeqCst) + ACKED_PER_PHASE)
        .await;
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
    assert!(
        sent.iter()
            .any(|s| s.phase == DOWN && s.operation_id.is_none()),
        "no request failed during the outage: the crash was not felt"
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
                let answer = send(&client, &stack.intake.base_url, &stack.key, &s.key).await;
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
    let counts = eventually(
        Duration::from_secs(120),
        "every operation to reach a final state",
        || async {
            let counts = stack.db.store.count_by_status().await.ok()?;
            let done: i64 = ["SUCCEEDED", "FAILED"]
                .iter()
                .filter_map(|s| counts.get(*s))
                .sum();
            (done == total).then_some(counts)
        },
    )
    .await;
    assert_eq!(
        counts,
        BTreeMap::from([("SUCCEEDED".to_owned(), total)]),
        "every payment succeeds"
    );
    let ledger = stack.sim.ledger().await;
    let charges = ledger["charges"].as_array().expect("charges");
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    let mut per_invoice: HashMap<&str, usize> = HashMap::new();
    for charge in charges {
        *per_key
            .entry(charge["idempotency_key"].as_str().unwrap_or_default())
            .or_default() += 1;
        *per_invoice
            .entry(charge["invoice_id"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    let not_once: Vec<_> = stored
        .iter()
        .filter_map(|(key, id)| {
            let under_key = per_key
                .get(format!("opgate-{id}").as_str())
                .copied()
                .unwrap_or(0);
            let for_invoice = per_invoice
                .get(format!("inv-{key}").as_str())
                .copied()
                .unwrap_or(0);
            (under_key != 1 || for_invoice != 1)
                .then(|| format!("{key}: {under_key}/{for_invoice}"))
        })
        .collect();
    assert!(
        not_once.is_empty(),
        "operations not charged exactly once (under its key / for its invoice): {not_once:?}"
    );
    assert_eq!(
        charges.len(),
        stored.len(),
        "charges in the ledger beside those of the operations"
    );
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

/// Every operation's id by its idempotency key.
async fn stored_ids(sql: &tokio_postgres::Client) -> HashMap<String, Uuid> {
    sql.query("SELECT idempotency_key, operation_id FROM operations", &[])
        .await
        .expect("read operations")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// One key a client sent, and how its first request was answered.
struct Sent {
    key: String,
    phase: u8,
    /// HTTP status, or 0 when no answer came (connection refused or reset).
    status: u16,
    operation_id: Option<Uuid>,
}

struct Answer {
    status: u16,
    operation_id: Option<Uuid>,
    replayed: bool,
}

/// Sends the payment for `key` (its invoice is `inv-<key>`): the status (0 when nothing
/// answered) and, on a 2xx, the operation id.
async fn send(client: &reqwest::Client, base: &str, agent_key: &str, key: &str) -> Answer {
    let body = payment_body("cus_crash", &format!("inv-{key}"), "10.00");
    let request = client
        .post(format!("{base}/agent/operations/payment"))
        .bearer_auth(agent_key)
        .header("Idempotency-Key", key)
        .json(&body);
    let Ok(response) = request.send().await else {
        return Answer {
            status: 0,
            operation_id: None,
            replayed: false,
        };
    };
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let operation_id = (200..300)
        .contains(&status)
        .then(|| body["operation_id"].as_str()?.parse().ok())
        .flatten();
    Answer {
        status,
        operation_id,
        replayed,
    }
}

/// Agents registering payments, each under new keys, one request at a time.
struct Load {
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    clients: Vec<JoinHandle<Vec<Sent>>>,
}

impl Load {
    fn start(base: &str, agent_key: &str) -> Self {
        let phase = Arc::new(AtomicU8::new(BEFORE));
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap();
        let clients = (0..CLIENTS)
            .map(|n| {
                let (http, base, agent_key) = (http.clone(), base.to_owned(), agent_key.to_owned());
                let (phase, stop) = (phase.clone(), stop.clone());
                let (acked, failed) = (acked.clone(), failed.clone());
                tokio::spawn(async move {
                    let mut sent = Vec::new();
                    for i in 0..MAX_KEYS_PER_CLIENT {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let key = format!("crash-{n}-{i}");
                        let at = phase.load(Ordering::SeqCst);
                        let answer = send(&http, &base, &agent_key, &key).await;
                        if answer.operation_id.is_some() {
                            acked.fetch_add(1, Ordering::SeqCst);
                        } else {
                            failed.fetch_add(1, Ordering::SeqCst);
                            // An agent backs off after an error.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        sent.push(Sent {
                            key,
                            phase: at,
                            status: answer.status,
                            operation_id: answer.operation_id,
                        });
                    }
                    sent
                })
            })
            .collect();
        Self {
            phase,
            stop,
            acked,
            failed,
            clients,
        }
    }

    async fn wait_acked(&self, count: usize) {
        eventually(
            Duration::from_secs(60),
            &format!("{count} registrations answered 2xx"),
            || async { (self.acked.load(Ordering::SeqCst) >= count).then_some(()) },
        )
        .await;
    }

    async fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::SeqCst);
        let mut sent = Vec::new();
        for client in self.clients {
            sent.extend(client.await.expect("client task"));
        }
        sent
    }
}
