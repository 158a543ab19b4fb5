//! The reconciler resolves UNKNOWN outcomes from the provider's own records, and
//! escalates what cannot be known: real executor, reconciler and provider-sim.

use std::time::Duration;

use opgate_e2e::{eventually, Executor, Reconciler, Stack};
use opgate_store::OperationEvent;
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);
const FAST: [&str; 4] = ["--backoff-base", "20ms", "--backoff-max", "200ms"];

/// An operation the executor left UNKNOWN: the provider charged, the answer was lost.
async fn lost_answer(stack: &Stack, key: &str) -> Uuid {
    let id = stack.pay("cus_lost", key).await;
    stack.wait_for_status(id, "UNKNOWN", SETTLE).await;
    id
}

fn statuses(events: &[OperationEvent]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e.outcome == "applied")
        .map(|e| e.to_status.as_str())
        .collect()
}

#[tokio::test]
async fn a_dropped_answer_is_resolved_succeeded_with_the_ledgers_reference() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let id = lost_answer(&stack, "lost-1").await;
    let reconciler = Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &FAST).await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );
    let events = stack.db.store.operation_events(id).await.unwrap();
    assert_eq!(
        statuses(&events),
        [
            "PENDING",
            "IN_PROGRESS",
            "UNKNOWN",
            "RECONCILING",
            "SUCCEEDED"
        ]
    );
    assert_eq!(events.last().unwrap().actor, reconciler.owner());
}

#[tokio::test]
async fn a_pending_payment_is_rechecked_with_backoff_until_it_settles() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let will_succeed = stack.pay("pending_a", "pending-a").await;
    let will_fail = stack.pay("pending_b", "pending-b").await;
    let a = stack.wait_for_status(will_succeed, "UNKNOWN", SETTLE).await;
    let b = stack.wait_for_status(will_fail, "UNKNOWN", SETTLE).await;
    let _reconciler = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &["--backoff-base", "100ms", "--backoff-max", "1600ms"],
    )
    .await;

    // Let it find both still pending a few times: five checks, four gaps to measure.
    for (id, checks) in [(will_succeed, 5), (will_fail, 3)] {
        eventually(SETTLE, "inconclusive checks", || async {
            let events = stack.db.store.operation_events(id).await.ok()?;
            (events
                .iter()
                .filter(|e| e.to_status == "RECONCILING")
                .count()
                >= checks)
                .then_some(())
        })
        .await;
    }
    stack
        .sim
        .settle(
            a.provider_reference.as_deref().unwrap(),
            serde_json::json!({"status": "succeeded"}),
        )
        .await;
    stack
        .sim
        .settle(
            b.provider_reference.as_deref().unwrap(),
            serde_json::json!({"status": "failed", "failure_code": "insufficient_funds"}),
        )
        .await;

    let done = stack
        .wait_for_status(will_succeed, "SUCCEEDED", SETTLE)
        .await;
    assert_eq!(done.provider_reference, a.provider_reference);
    let failed = stack.wait_for_status(will_fail, "FAILED", SETTLE).await;
    assert!(failed.last_error.unwrap().contains("insufficient_funds"));
    assert_eq!(stack.charges_for(will_succeed).await.len(), 1);
    assert!(stack.charges_for(will_fail).await.is_empty());

    // The backoff is in the audit trail: checks spaced further and further apart.
    // After check n the next waits 100 ms·2ⁿ⁻¹ with jitter down to half of it, and
    // never less (the check is due only then), so each gap has a floor that doubles:
    // 50, 100, 200, 400 ms. A flat backoff stays near the first.
    let events = stack.db.store.operation_events(will_succeed).await.unwrap();
    let checks: Vec<_> = events
        .iter()
        .filter(|e| e.to_status == "RECONCILING")
        .map(|e| e.created_at)
        .collect();
    assert!(checks.len() >= 5, "{checks:?}");
    let gaps: Vec<i64> = checks
        .windows(2)
        .map(|w| (w[1] - w[0]).num_milliseconds())
        .collect();
    for (gap, floor) in gaps.iter().zip([50, 100, 200, 400]) {
        assert!(
            *gap >= floor,
            "gaps {gaps:?} do not grow: {gap} ms < {floor} ms"
        );
    }
    assert!(events
        .iter()
        .any(|e| e.reason.as_deref() == Some("provider reports the operation as pending")));
}

#[tokio::test]
async fn failing_lookups_escalate_to_manual_review_after_the_limit() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let id = lost_answer(&stack, "lost-lookup").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut args = vec!["--max-checks", "3"];
    args.extend_from_slice(&FAST);
    let _reconciler =
        Reconciler::start_reconciler(&stack.db.url, &format!("http://{closed}"), &args).await;
    let op = stack.wait_for_status(id, "MANUAL_REVIEW", SETTLE).await;
    assert!(op.last_error.unwrap().contains("lookup failed"));
    let events = stack.db.store.operation_events(id).await.unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.to_status == "RECONCILING")
            .count(),
        3
    );
    assert!(events
        .last()
        .unwrap()
        .reason
        .as_deref()
        .unwrap()
        .contains("3 checks"));
}

#[tokio::test]
async fn not_found_past_the_grace_period_needs_review_or_fails_when_authoritative() {
    // 5xx before committing, keyed retries off: UNKNOWN, and the provider never charged.
    let stack = Stack::start(&["error-before-commit=1.0"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let review = stack.pay("cus_none", "none-1").await;
    let failed = stack.pay("cus_none", "none-2").await;
    stack.wait_for_status(review, "UNKNOWN", SETTLE).await;
    stack.wait_for_status(failed, "UNKNOWN", SETTLE).await;
    stack.sim.set_faults(serde_json::json!({})).await;

    // A grace period longer than the test: not found keeps it UNKNOWN.
    let patient = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &[
            "--not-found-grace",
            "1h",
            "--backoff-base",
            "20ms",
            "--backoff-max",
            "50ms",
        ],
    )
    .await;
    eventually(SETTLE, "two not-found checks", || async {
        let events = stack.db.store.operation_events(review).await.ok()?;
        (events
            .iter()
            .filter(|e| e.to_status == "RECONCILING")
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    // Stopped between sweeps, the operation is back in UNKNOWN, not concluded.
    assert!(patient.service.terminate().await.success());
    assert_eq!(stack.operation(review).await.status.as_str(), "UNKNOWN");

    // Default: past the grace, an operator decides.
    let reviewer = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &["--not-found-grace", "0s"],
    )
    .await;
    let op = stack.wait_for_status(review, "MANUAL_REVIEW", SETTLE).await;
    assert!(op.last_error.unwrap().contains("no record"));
    stack.wait_for_status(failed, "MANUAL_REVIEW", SETTLE).await;
    drop(reviewer);

    // Authoritative lookups: after an operator sends it back, not found means FAILED.
    opgate_e2e::opgate(
        &stack.db.url,
        &[
            "operations",
            "retry-reconcile",
            &failed.to_string(),
            "--operator",
            "ana",
        ],
    )
    .success();
    let _authoritative = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &[
            "--not-found-grace",
            "0s",
            "--not-found-authoritative",
            "true",
        ],
    )
    .await;
    let op = stack.wait_for_status(failed, "FAILED", SETTLE).await;
    assert!(op.last_error.unwrap().contains("no record"));
    assert!(stack.charges_for(failed).await.is_empty());
}
