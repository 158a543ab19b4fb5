//! The fault matrix's "provider 429 with Retry-After": the provider rate limits calls,
//! and the executor waits at least as long as it asked before sending the same key
//! again, without counting the refused call as an attempt. Every operation still ends
//! SUCCEEDED with one charge. The waits are measured from the provider's own record of
//! when it said 429 and when it charged, and from the audit trail, never from the
//! test's clock.

use std::time::Duration;

use opgate_e2e::{eventually, Executor, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);
/// The `Retry-After` provider-sim sends.
const RETRY_AFTER_MS: i64 = 2000;
/// provider-sim's times are truncated to the millisecond, so a difference between two
/// of them may read up to 1 ms short of the real one.
const TRUNCATION_MS: i64 = 1;

/// When provider-sim answered 429 to each create under the operation's key.
fn throttled_at(ledger: &Value, id: Uuid) -> Vec<String> {
    ledger["throttled_by_key"][format!("opgate-{id}")]
        .as_array()
        .map(|times| {
            times
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Milliseconds from `earlier` to `later`, RFC 3339 times, read by PostgreSQL.
async fn millis_between(stack: &Stack, earlier: &str, later: &str) -> i64 {
    stack
        .db
        .sql()
        .await
        .query_one(
            "SELECT (extract(epoch FROM $2::text::timestamptz - $1::text::timestamptz)
                     * 1000)::int8",
            &[&earlier, &later],
        )
        .await
        .unwrap()
        .get(0)
}

/// `(attempts, retry_count)` as stored.
async fn counters(stack: &Stack, id: Uuid) -> (i32, i32) {
    let row = stack
        .db
        .sql()
        .await
        .query_one(
            "SELECT attempts, retry_count FROM operations WHERE operation_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Every operation's first call is refused with 429 and `Retry-After: 2`. With
/// `--max-attempts 1` a refusal counted as an attempt (or read as an uncertain
/// answer, as before) would leave nothing to send it again with: here each is sent
/// again, under the same key, no sooner than the provider asked, and charged once.
#[tokio::test]
async fn a_429_is_waited_out_for_its_retry_after_and_never_counted_as_an_attempt() {
    const COUNT: usize = 4;
    let stack = Stack::start(&[
        &format!("throttle=1.0/{COUNT}"),
        &format!("throttle-retry-after-s={}", RETRY_AFTER_MS / 1000),
    ])
    .await;
    let keys: Vec<String> = (0..COUNT).map(|i| format!("throttled-{i}")).collect();
    let ids: Vec<Uuid> =
        futures_util::future::join_all(keys.iter().map(|key| stack.pay("cus_throttled", key)))
            .await;
    // Registered before any executor runs: the first call of each is one of the
    // provider's four 429s, since no retry can come before two seconds have passed.
    let executor =
        Executor::start(&stack.db.url, &stack.sim.base_url, &["--max-attempts", "1"]).await;

    for &id in &ids {
        let op = stack
            .wait_until_not(id, &["PENDING", "IN_PROGRESS"], SETTLE)
            .await;
        assert_eq!(
            op.status.as_str(),
            "SUCCEEDED",
            "{id}: {:?} after {:?}",
            op.last_error,
            stack.trail(id).await
        );
    }
    let ledger = stack.sim.ledger().await;
    assert_eq!(
        ledger["charges"].as_array().unwrap().len(),
        COUNT,
        "one charge per operation, nothing lost: {ledger}"
    );
    for &id in &ids {
        let charges = stack.charges_for(id).await;
        assert_eq!(charges.len(), 1, "{id} charged {charges:?}");
        let throttles = throttled_at(&ledger, id);
        assert_eq!(throttles.len(), 1, "{id}: one 429 each: {ledger}");
        assert_eq!(
            stack.requests_for(id).await,
            2,
            "the refused call, then the same key once more"
        );

        // The provider's clock: its charge came at least Retry-After after its 429.
        let charged = charges[0]["charged_at"].as_str().unwrap();
        let waited = millis_between(&stack, &throttles[0], charged).await;
        assert!(
            waited >= RETRY_AFTER_MS - TRUNCATION_MS,
            "{id} sent again {waited} ms after a 429 asking for {RETRY_AFTER_MS} ms"
        );

        // The database's clock: requeued with the wait, claimed again no sooner.
        let events = stack.db.store.operation_events(id).await.unwrap();
        let applied: Vec<_> = events.iter().filter(|e| e.outcome == "applied").collect();
        let trail: Vec<&str> = applied.iter().map(|e| e.to_status.as_str()).collect();
        assert_eq!(
            trail,
            [
                "PENDING",
                "IN_PROGRESS",
                "PENDING",
                "IN_PROGRESS",
                "SUCCEEDED"
            ],
            "{id}: never FAILED or UNKNOWN because of the 429"
        );
        let requeue = applied[2];
        assert!(
            requeue
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("rate limited") && r.contains("not counted")),
            "{requeue:?}"
        );
        assert_eq!(requeue.actor, executor.owner());
        let reclaimed = applied[3];
        let gap = (reclaimed.created_at - requeue.created_at).num_milliseconds();
        assert!(
            gap >= RETRY_AFTER_MS,
            "{id} claimed again {gap} ms after the requeue"
        );

        let op = stack.operation(id).await;
        assert_eq!(op.last_error, None);
        assert_eq!(
            counters(&stack, id).await,
            (1, 0),
            "{id}: the throttled call is not an attempt and not a requeue for backoff"
        );
    }
    // The executor logged ids and timings, never the key or the payload.
    let logs = executor.service.logs();
    assert!(
        logs.contains("rate limited"),
        "nothing logged about the 429s"
    );
    for id in &ids {
        assert!(
            !logs.contains(&format!("opgate-{id}")),
            "a provider key logged"
        );
    }
    assert!(!logs.contains("cus_throttled"), "the payload logged");
}

/// A 429 on the retry after an answer that was lost (the provider charged, then said
/// 500): the operation is not requeued, since a new claim would forget that the first
/// call may have reached the provider. It waits out the Retry-After in its claim and
/// sends the same key again; the replay is answered with the charge, and the 429 is
/// counted as nothing (`--max-attempts 2`: before, it was the uncertain last attempt
/// and the operation ended UNKNOWN).
#[tokio::test]
async fn a_429_after_an_uncertain_call_is_waited_out_in_the_claim_and_charged_once() {
    let stack = Stack::start(&["error-after-commit=1.0/1"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        // The retry after the 500 comes 0.75 to 1.5 s later: time to arm the 429.
        &["--max-attempts", "2", "--retry-base", "1500ms"],
    )
    .await;
    let id = stack.pay("cus_throttled", "throttled-retry").await;
    eventually(SETTLE, "the first call to be charged", || async {
        (stack.charges_for(id).await.len() == 1).then_some(())
    })
    .await;
    stack
        .sim
        .set_faults(json!({
            "throttle": {"probability": 1.0, "times": 1},
            "throttle_retry_after_s": RETRY_AFTER_MS / 1000,
        }))
        .await;

    let op = stack
        .wait_until_not(id, &["PENDING", "IN_PROGRESS"], SETTLE)
        .await;
    assert_eq!(op.status.as_str(), "SUCCEEDED", "{:?}", op.last_error);
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1, "charged twice: {charges:?}");
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );
    let ledger = stack.sim.ledger().await;
    let throttles = throttled_at(&ledger, id);
    assert_eq!(throttles.len(), 1, "the retry was not throttled: {ledger}");
    assert_eq!(stack.requests_for(id).await, 3, "500, 429, then the replay");
    assert_eq!(
        stack.trail(id).await,
        ["PENDING", "IN_PROGRESS", "SUCCEEDED"],
        "kept in its claim, not requeued"
    );
    // The replay that succeeded came at least Retry-After after the 429 (the provider's
    // clock for the 429, the database's for the write that followed the replay).
    let events = stack.db.store.operation_events(id).await.unwrap();
    let succeeded = events.iter().find(|e| e.to_status == "SUCCEEDED").unwrap();
    let succeeded_at = succeeded.created_at.to_rfc3339();
    let waited = millis_between(&stack, &throttles[0], &succeeded_at).await;
    assert!(
        waited >= RETRY_AFTER_MS - TRUNCATION_MS,
        "sent again {waited} ms after a 429 asking for {RETRY_AFTER_MS} ms"
    );
    assert_eq!(
        counters(&stack, id).await,
        (2, 0),
        "two calls counted (the lost answer and the replay), the 429 not"
    );
}
