//! The fault matrix's "lookup 404 for an operation the provider did commit": the
//! provider charged, the answer was lost, and its lookups lag its writes (they answer
//! 404 for a while after the charge, as eventually consistent provider APIs do).
//! Within `--not-found-grace` a 404 is no answer: the operation stays UNKNOWN, however
//! many checks the lag takes, and resolves SUCCEEDED once the lookup finds the charge.

use std::time::Duration;

use opgate_e2e::api::get_operation;
use opgate_e2e::{eventually, Executor, Reconciler, Stack};
use opgate_store::OperationEvent;

const SETTLE: Duration = Duration::from_secs(30);
const LAG_MS: i64 = 3000;
/// Fewer than the lag takes at this backoff: a 404 within the grace must not count.
const MAX_CHECKS: usize = 3;

/// The reconciler's "not found yet" verdicts: back to UNKNOWN, to be checked again.
fn not_found_verdicts(events: &[OperationEvent]) -> usize {
    events
        .iter()
        .filter(|e| {
            e.outcome == "applied"
                && e.to_status == "UNKNOWN"
                && e.reason.as_deref() == Some("provider has no record of the operation yet")
        })
        .count()
}

#[tokio::test]
async fn a_lookup_that_lags_the_charge_keeps_the_operation_unknown_then_resolves_it() {
    let stack = Stack::start(&["drop-after-commit=1.0", &format!("lookup-lag-ms={LAG_MS}")]).await;
    // The default grace (5 min) and a backoff short enough for many checks in the lag.
    let max_checks = MAX_CHECKS.to_string();
    let reconciler = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &[
            "--backoff-base",
            "20ms",
            "--backoff-max",
            "200ms",
            "--max-checks",
            &max_checks,
        ],
    )
    .await;
    // Keyed retries off: the lost answer leaves the operation UNKNOWN at once.
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let id = stack.pay("cus_lagging", "lagging-1").await;

    // The provider has charged, its lookup still says 404, and the operation stays
    // UNKNOWN past the check limit.
    let events = eventually(
        SETTLE,
        "more not-found checks than --max-checks, or a conclusion",
        || async {
            let events = stack.db.store.operation_events(id).await.ok()?;
            let concluded = events.iter().any(|e| {
                e.outcome == "applied"
                    && e.from_status.as_deref() == Some("RECONCILING")
                    && e.to_status != "UNKNOWN"
            });
            (concluded || not_found_verdicts(&events) > MAX_CHECKS).then_some(events)
        },
    )
    .await;
    assert!(
        !events
            .iter()
            .any(|e| ["SUCCEEDED", "FAILED", "MANUAL_REVIEW"].contains(&e.to_status.as_str())),
        "concluded while the lookup still said 404: {events:?}"
    );
    assert_eq!(
        stack.charges_for(id).await.len(),
        1,
        "charged before any lookup"
    );
    // What the agent sees meanwhile: not concluded (or, on a machine slow enough for
    // the lag to have passed since, the charge found).
    let seen = get_operation(
        &stack.client,
        &stack.intake.base_url,
        &stack.key,
        &id.to_string(),
    )
    .await;
    let status = seen.body["status"].as_str().unwrap();
    assert!(
        (seen.status == 202 && ["UNKNOWN", "RECONCILING"].contains(&status))
            || (seen.status == 200 && status == "SUCCEEDED"),
        "{} {}",
        seen.status,
        seen.body
    );
    let op_status = |events: &[OperationEvent]| {
        events
            .iter()
            .filter(|e| e.outcome == "applied")
            .map(|e| e.to_status.clone())
            .collect::<Vec<_>>()
    };

    // Once the lag has passed the lookup finds the charge.
    let op = stack
        .wait_until_not(
            id,
            &["PENDING", "IN_PROGRESS", "UNKNOWN", "RECONCILING"],
            SETTLE,
        )
        .await;
    let events = stack.db.store.operation_events(id).await.unwrap();
    assert_eq!(
        op.status.as_str(),
        "SUCCEEDED",
        "{:?}: {:?}",
        op.last_error,
        op_status(&events)
    );
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1, "charged once: {charges:?}");
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );

    // The whole trail: executed, lost, checked and found not yet (more often than the
    // check limit allows for other inconclusive answers), then found.
    let trail = op_status(&events);
    let checks = not_found_verdicts(&events);
    assert!(checks > MAX_CHECKS, "{trail:?}");
    let mut expected = vec!["PENDING", "IN_PROGRESS", "UNKNOWN"];
    for _ in 0..checks {
        expected.extend(["RECONCILING", "UNKNOWN"]);
    }
    expected.extend(["RECONCILING", "SUCCEEDED"]);
    assert_eq!(trail, expected);
    let resolved = events.last().unwrap();
    assert_eq!(resolved.actor, reconciler.owner());
    assert_eq!(
        resolved.reason.as_deref(),
        Some("provider lookup: operation succeeded")
    );

    // Each 404 was the lag (provider-sim names the fault on its request log line), and
    // the lookup that found the charge came no sooner than the lag allows after it
    // (provider-sim's clock for the charge, the database's for the verdict: one host).
    let lagged = stack
        .sim
        .service
        .logs()
        .lines()
        .filter(|line| {
            line.contains("\"message\":\"request\"")
                && line.contains("lookup-lag-ms")
                && line.contains(charges[0]["payment_id"].as_str().unwrap())
        })
        .count();
    assert!(
        lagged >= checks,
        "{lagged} lagged lookups for {checks} 404s"
    );
    let charged_at = charges[0]["charged_at"].as_str().unwrap();
    let waited: i64 = stack
        .db
        .sql()
        .await
        .query_one(
            "SELECT (extract(epoch FROM created_at - $1::text::timestamptz) * 1000)::int8
             FROM operation_events WHERE event_id = $2",
            &[&charged_at, &resolved.event_id],
        )
        .await
        .unwrap()
        .get(0);
    // provider-sim's time is truncated to the millisecond.
    assert!(
        waited >= LAG_MS - 1,
        "resolved {waited} ms after the charge, inside a {LAG_MS} ms lookup lag"
    );
}
