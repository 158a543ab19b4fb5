//! Executors whose clocks disagree by minutes drain one queue. A lease's expiry is the
//! database's `now()` plus the lease, written and compared by PostgreSQL, never a
//! worker's own time of day: an executor ten minutes behind does not find its
//! neighbours' live leases expired (no takeover, no stale write), and one ten minutes
//! ahead does not keep a dead lease for ten minutes (killed, its operations are taken
//! over as soon as its lease runs out by the database's clock).
//!
//! The skew is real: libfaketime (tests/src/faketime.rs) moves the executors' wall
//! clocks, and the test checks that their own log timestamps moved with it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opgate_e2e::faketime::skewed_clock;
use opgate_e2e::{eventually, Executor, Stack};
use uuid::Uuid;

/// Longer than a heartbeat's interval (a third of the lease) many times over, and than
/// a scheduling hiccup on a loaded 2-core machine.
const LEASE_SECS: f64 = 3.0;
/// Each provider call outlasts the lease: the lease survives only by heartbeats.
const PROVIDER_DELAY: &str = "delay-ms=3500";
const SKEW_SECS: f64 = 600.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executors_minutes_apart_neither_steal_live_leases_nor_keep_dead_ones() {
    let started = Instant::now();
    let stack = Stack::start(&[PROVIDER_DELAY]).await;
    let sim = stack.sim.base_url.clone();
    let flags = ["--lease", "3s", "--concurrency", "8"];
    let on_time = Executor::start(&stack.db.url, &sim, &flags).await;
    let ahead_env = skewed_clock("+10m");
    let ahead = Executor::start_with_env(&stack.db.url, &sim, &flags, &as_refs(&ahead_env)).await;
    let behind_env = skewed_clock("-10m");
    let behind = Executor::start_with_env(&stack.db.url, &sim, &flags, &as_refs(&behind_env)).await;
    let owners = [
        on_time.owner().to_owned(),
        ahead.owner().to_owned(),
        behind.owner().to_owned(),
    ];

    // The skew applies: each executor's log stamps its start with its own clock.
    let sql = stack.db.sql().await;
    let mut skews = Vec::new();
    for (executor, expected) in [(&on_time, 0.0), (&ahead, SKEW_SECS), (&behind, -SKEW_SECS)] {
        let stamp = first_log_timestamp(executor).await;
        let skew: f64 = sql
            .query_one(
                "SELECT EXTRACT(EPOCH FROM ($1::text::timestamptz - now()))::float8",
                &[&stamp],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            (skew - expected).abs() < 60.0,
            "{}: log time {stamp} is {skew:.0} s from the database's, expected {expected:.0} s",
            executor.owner()
        );
        skews.push(format!("{skew:+.0} s"));
    }
    println!("executors' clocks against the database's: {skews:?}");

    // Phase 1: all three drain together; every lease is judged by the database's clock.
    let sampler = LeaseSampler::start(&stack).await;
    let first = stack.pay_many(48, 8).await;
    stack
        .wait_all_succeeded(first.len() as i64, Duration::from_secs(120))
        .await;
    let remaining = sampler.stop().await;
    println!("lease time left by owner, seconds (min, max): {remaining:?}");
    for owner in &owners {
        let (_, longest) = remaining
            .get(owner)
            .unwrap_or_else(|| panic!("{owner} held no lease while the queue drained"));
        assert!(
            *longest <= LEASE_SECS + 0.05,
            "{owner}: a lease {longest:.1} s from expiry by the database's clock; the lease is \
             {LEASE_SECS} s"
        );
    }
    let claims = claims_by_owner(&sql).await;
    for owner in &owners {
        assert!(
            claims.get(owner).copied().unwrap_or(0) > 0,
            "{owner} claimed nothing: {claims:?}"
        );
    }
    assert_eq!(
        takeovers(&sql).await,
        Vec::<(Uuid, String, String)>::new(),
        "leases taken over while every owner was alive"
    );
    assert_eq!(
        count(
            &sql,
            "SELECT count(*) FROM operation_events WHERE outcome = 'rejected_stale'"
        )
        .await,
        0,
        "stale writes while every owner was alive"
    );
    for id in &first {
        assert_eq!(stack.charges_for(*id).await.len(), 1, "{id}: charges");
        assert_eq!(stack.requests_for(*id).await, 1, "{id}: provider calls");
    }

    // Phase 2: the executor ten minutes ahead dies holding leases. Were its leases judged
    // by its own clock they would hold for ten minutes; they run out in LEASE_SECS.
    let ahead_owner = ahead.owner().to_owned();
    let mut second = Vec::new();
    let mut held = None;
    for wave in 0..20 {
        for i in 0..4 {
            second.push(stack.pay("cus_skew", &format!("dead-{wave}-{i}")).await);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        held = sql
            .query_opt(
                "SELECT operation_id FROM operations
                 WHERE status = 'IN_PROGRESS' AND lease_owner = $1 LIMIT 1",
                &[&ahead_owner],
            )
            .await
            .unwrap()
            .map(|row| row.get::<_, Uuid>(0));
        if held.is_some() {
            break;
        }
    }
    let held = held.expect("the executor ahead never held a lease");
    ahead.service.kill9().await;
    let killed_at = Instant::now();
    stack
        .wait_for_status(held, "SUCCEEDED", Duration::from_secs(60))
        .await;
    let taken_over_in = killed_at.elapsed();
    stack
        .wait_all_succeeded((first.len() + second.len()) as i64, Duration::from_secs(60))
        .await;
    let taken = takeovers(&sql).await;
    assert!(
        taken.iter().any(|(id, _, _)| *id == held),
        "{held} finished without a takeover: {taken:?}"
    );
    for (id, from, to) in &taken {
        assert_eq!(
            from, &ahead_owner,
            "{id} taken over by {to} from {from}, which was alive"
        );
    }
    for id in first.iter().chain(&second) {
        assert_eq!(stack.charges_for(*id).await.len(), 1, "{id}: charges");
    }
    println!(
        "{} operations, {} taken over from the killed executor {:.1} s after the kill; {:.1} s",
        first.len() + second.len(),
        taken.len(),
        taken_over_in.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

fn as_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The `timestamp` of the executor's first log line (JSON logs), as it wrote it.
async fn first_log_timestamp(executor: &Executor) -> String {
    eventually(
        Duration::from_secs(10),
        "the executor's first log line",
        || async {
            let logs = executor.service.logs();
            let line: serde_json::Value = serde_json::from_str(logs.lines().next()?).ok()?;
            line["timestamp"].as_str().map(str::to_owned)
        },
    )
    .await
}

async fn count(sql: &tokio_postgres::Client, query: &str) -> i64 {
    sql.query_one(query, &[]).await.unwrap().get(0)
}

async fn claims_by_owner(sql: &tokio_postgres::Client) -> BTreeMap<String, i64> {
    sql.query(
        "SELECT actor, count(*) FROM operation_events
         WHERE to_status = 'IN_PROGRESS' GROUP BY actor",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect()
}

/// Every takeover: the operation, whose lease it was (the claim before), who took it.
async fn takeovers(sql: &tokio_postgres::Client) -> Vec<(Uuid, String, String)> {
    sql.query(
        "SELECT t.operation_id,
                (SELECT p.actor FROM operation_events p
                 WHERE p.operation_id = t.operation_id AND p.to_status = 'IN_PROGRESS'
                   AND p.event_id < t.event_id
                 ORDER BY p.event_id DESC LIMIT 1),
                t.actor
         FROM operation_events t
         WHERE t.reason = 'lease expired; taken over'
         ORDER BY t.event_id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect()
}

/// Reads, every 50 ms, how long each owner's leases have left by the database's clock.
struct LeaseSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<BTreeMap<String, (f64, f64)>>,
}

impl LeaseSampler {
    async fn start(stack: &Stack) -> Self {
        let sql = stack.db.sql().await;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut by_owner: BTreeMap<String, (f64, f64)> = BTreeMap::new();
            while !stopped.load(Ordering::SeqCst) {
                let rows = sql
                    .query(
                        "SELECT lease_owner,
                                EXTRACT(EPOCH FROM min(lease_expires_at - now()))::float8,
                                EXTRACT(EPOCH FROM max(lease_expires_at - now()))::float8
                         FROM operations WHERE status = 'IN_PROGRESS' AND lease_owner IS NOT NULL
                         GROUP BY lease_owner",
                        &[],
                    )
                    .await
                    .expect("sample leases");
                for row in rows {
                    let owner: String = row.get(0);
                    let (low, high): (f64, f64) = (row.get(1), row.get(2));
                    let entry = by_owner.entry(owner).or_insert((low, high));
                    entry.0 = entry.0.min(low);
                    entry.1 = entry.1.max(high);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            by_owner
        });
        Self { stop, task }
    }

    /// Per owner: the least and the most time a lease had left when sampled.
    async fn stop(self) -> BTreeMap<String, (f64, f64)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("lease sampler")
    }
}
