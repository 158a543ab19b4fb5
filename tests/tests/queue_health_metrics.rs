//! The queue-health metrics on the real binaries' `/metrics`: a session left idle in a
//! REPEATABLE READ transaction shows as the oldest transaction's age and an xmin age
//! (and stops showing once it commits), every claim is timed, and the outbox's dead
//! tuples are exported. docs/operations.md says what to do when they alert.

use std::time::{Duration, Instant};

use opgate_e2e::metrics::metric;
use opgate_e2e::{eventually, Executor, Reconciler, Stack};

const SETTLE: Duration = Duration::from_secs(30);
/// How long the forgotten session stays idle before the gauges are read.
const HOLD: Duration = Duration::from_secs(2);

/// The value of the one unlabelled sample `name` on the page at `url`, if it is there
/// (`metric` reads an absent gauge as 0; this test must tell the two apart).
async fn sample(url: &str, name: &str) -> Option<f64> {
    let text = reqwest::get(url).await.ok()?.text().await.ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_forgotten_snapshot_claims_and_dead_tuples_show_on_metrics() {
    let stack = Stack::start(&[]).await;
    let gauges = ["--gauge-interval", "100ms"];
    let executor = Executor::start(&stack.db.url, &stack.sim.base_url, &gauges).await;
    let reconciler =
        Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &gauges).await;

    // A forgotten session: a snapshot taken, then idle.
    let forgotten = stack.db.sql().await;
    let before_begin = Instant::now();
    forgotten
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM agents LIMIT 1;")
        .await
        .expect("open the held snapshot");

    // Work behind it (it consumes transaction ids, so the held xmin ages), drained.
    stack.pay_many(5, 5).await;
    stack.wait_all_succeeded(5, SETTLE).await;
    tokio::time::sleep(HOLD.saturating_sub(before_begin.elapsed())).await;

    let url = executor.metrics_url();
    let age = eventually(SETTLE, "the held transaction on the gauges", || async {
        let age = sample(url, "opgate_oldest_transaction_age_seconds").await?;
        let xmin_age = sample(url, "opgate_oldest_xmin_age").await?;
        (age >= HOLD.as_secs_f64() && xmin_age > 0.0).then_some(age)
    })
    .await;
    assert!(
        age <= before_begin.elapsed().as_secs_f64(),
        "age {age}s is older than the held session"
    );
    // It keeps growing while the session stays idle.
    eventually(SETTLE, "the transaction age to grow", || async {
        let later = sample(url, "opgate_oldest_transaction_age_seconds").await?;
        (later >= age + 0.5).then_some(())
    })
    .await;
    // The reconciler reads the same gauges the same way.
    let seen = sample(
        reconciler.metrics_url(),
        "opgate_oldest_transaction_age_seconds",
    )
    .await;
    assert!(
        seen.is_some_and(|seen| seen >= HOLD.as_secs_f64()),
        "reconciler's oldest transaction age: {seen:?}"
    );

    // Each claim was timed, the empty ones of the drained outbox included.
    let claims = metric(
        url,
        "opgate_claim_duration_seconds_count",
        Some(("worker", "executor")),
    )
    .await;
    assert!(claims >= 1.0, "claims timed: {claims}");
    // The reconciler's sweeps claim too (nothing is UNKNOWN: empty claims, timed).
    let sweeps = metric(
        reconciler.metrics_url(),
        "opgate_claim_duration_seconds_count",
        Some(("worker", "reconciler")),
    )
    .await;
    assert!(sweeps >= 1.0, "reconciler claims timed: {sweeps}");
    let dead = sample(url, "opgate_outbox_dead_tuples").await;
    assert!(
        dead.is_some_and(|dead| dead >= 0.0),
        "opgate_outbox_dead_tuples: {dead:?}"
    );

    // Once the session commits, nothing that old holds the horizon any more.
    forgotten.batch_execute("COMMIT").await.expect("commit");
    eventually(SETTLE, "the transaction age to fall", || async {
        let age = sample(url, "opgate_oldest_transaction_age_seconds").await?;
        (age < HOLD.as_secs_f64()).then_some(())
    })
    .await;
}
