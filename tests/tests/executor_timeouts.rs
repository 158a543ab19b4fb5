//! The seed's own scenario at the executor: the payment succeeds, but the HTTP answer
//! comes later than the executor's `--response-timeout`. Provider-sim charges, then
//! holds its answer (`delay-answer-ms`), so every call times out after it has charged.
//! A timeout proves nothing: the operation is UNKNOWN, never FAILED, and the reconciler
//! finds the one charge.

use std::time::Duration;

use opgate_e2e::metrics::metric;
use opgate_e2e::{Executor, Reconciler, Stack};

const SETTLE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_provider_slower_than_the_response_timeout_is_unknown_then_reconciled_with_one_charge() {
    // Answers held 1.5 s after the charge, against a 250 ms timeout: every call times
    // out, whatever the load on the machine.
    let stack = Stack::start(&["delay-answer-ms=1500"]).await;
    let executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &[
            "--response-timeout",
            "250ms",
            "--max-attempts",
            "3",
            "--retry-base",
            "20ms",
        ],
    )
    .await;
    let id = stack.pay("cus_slow", "slow-1").await;

    let op = stack
        .wait_until_not(id, &["PENDING", "IN_PROGRESS"], SETTLE)
        .await;
    assert_eq!(
        op.status.as_str(),
        "UNKNOWN",
        "a timeout after the provider charged was written as {}: {:?}",
        op.status,
        op.last_error
    );
    assert_eq!(
        op.last_error.as_deref(),
        Some("no complete answer within 250 ms")
    );
    // Re-sent under the same key while attempts lasted, in the one claim: never
    // requeued as if it had not been sent.
    assert_eq!(stack.requests_for(id).await, 3);
    assert_eq!(op.attempts, 3);
    assert_eq!(stack.trail(id).await, ["PENDING", "IN_PROGRESS", "UNKNOWN"]);
    assert_eq!(stack.charges_for(id).await.len(), 1, "charged once");

    // The timeouts metric counts the three timeouts, and nothing else counts them.
    let metrics = executor.metrics_url();
    assert_eq!(
        metric(metrics, "opgate_provider_timeouts_total", None).await,
        3.0
    );
    assert_eq!(
        metric(metrics, "opgate_provider_uncertain_total", None).await,
        0.0
    );
    assert_eq!(
        metric(
            metrics,
            "opgate_execution_duration_seconds_count",
            Some(("outcome", "timeout"))
        )
        .await,
        3.0
    );

    // The reconciler asks (lookups are answered at once) and finds the charge.
    let _reconciler = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &["--backoff-base", "20ms", "--backoff-max", "200ms"],
    )
    .await;
    let op = stack
        .wait_until_not(id, &["UNKNOWN", "RECONCILING"], SETTLE)
        .await;
    assert_eq!(op.status.as_str(), "SUCCEEDED", "{:?}", op.last_error);
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );
}
