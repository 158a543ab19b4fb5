//! Reconcilers in numbers and in crashes: two sweep 1,000 UNKNOWN operations with no
//! overlapping leases; one killed mid-sweep has its RECONCILING rows rescued.

use std::collections::HashSet;
use std::time::Duration;

use opgate_e2e::{eventually, Executor, Reconciler, Stack};
use opgate_store::OperationEvent;

/// Every lookup is a claim (to RECONCILING) followed by that same reconciler's
/// verdict under the same fencing token, before anyone else's claim: leases never
/// overlap.
fn assert_checks_never_overlap(events: &[OperationEvent]) {
    let reconciling: Vec<&OperationEvent> = events
        .iter()
        .skip_while(|e| e.to_status != "RECONCILING")
        .collect();
    for pair in reconciling.chunks(2) {
        let [claim, verdict] = pair else {
            panic!("a claim without a verdict: {events:?}")
        };
        assert_eq!(claim.to_status, "RECONCILING");
        assert_eq!(
            verdict.from_status.as_deref(),
            Some("RECONCILING"),
            "{events:?}"
        );
        assert_eq!(
            (&claim.actor, claim.fencing_token),
            (&verdict.actor, verdict.fencing_token),
            "{events:?}"
        );
    }
}

#[tokio::test]
async fn two_reconcilers_resolve_a_thousand_unknown_operations_one_check_at_a_time() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false", "--concurrency", "32"],
    )
    .await;
    let ids = stack.pay_many(1000, 64).await;
    eventually(
        Duration::from_secs(120),
        "1,000 operations to be UNKNOWN",
        || async {
            let counts = stack.db.store.count_by_status().await.ok()?;
            (counts.get("UNKNOWN").copied() == Some(1000)).then_some(())
        },
    )
    .await;
    drop(executor);

    let a =
        Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &["--batch-size", "50"])
            .await;
    let b =
        Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &["--batch-size", "50"])
            .await;
    stack
        .wait_all_succeeded(1000, Duration::from_secs(120))
        .await;

    let mut deciders = HashSet::new();
    for id in &ids {
        let events = stack.db.store.operation_events(*id).await.unwrap();
        assert_checks_never_overlap(&events);
        deciders.insert(events.last().unwrap().actor.clone());
    }
    assert!(
        deciders.contains(a.owner()) && deciders.contains(b.owner()),
        "{deciders:?}"
    );
    assert_eq!(stack.sim.ledger().await["count"], 1000);
}

#[tokio::test]
async fn a_reconciler_killed_mid_sweep_has_its_operations_rescued_after_the_lease() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let ids = stack.pay_many(5, 5).await;
    for id in &ids {
        stack
            .wait_for_status(*id, "UNKNOWN", Duration::from_secs(30))
            .await;
    }
    drop(executor);

    // A provider that accepts connections and never answers: lookups hang.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let doomed = Reconciler::start_reconciler(
        &stack.db.url,
        &silent_url,
        &[
            "--lease",
            "2s",
            "--connect-timeout",
            "500ms",
            "--response-timeout",
            "1s",
        ],
    )
    .await;
    eventually(Duration::from_secs(10), "all five RECONCILING", || async {
        let counts = stack.db.store.count_by_status().await.ok()?;
        (counts.get("RECONCILING").copied() == Some(5)).then_some(())
    })
    .await;
    doomed.service.kill9().await;

    let rescuer = Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &[]).await;
    stack.wait_all_succeeded(5, Duration::from_secs(30)).await;
    for id in &ids {
        let events = stack.db.store.operation_events(*id).await.unwrap();
        let rescue = events
            .iter()
            .find(|e| {
                e.reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with("lease expired; rescued"))
            })
            .expect("a rescue event");
        assert_eq!(rescue.actor, rescuer.owner());
        assert_eq!(rescue.from_status.as_deref(), Some("RECONCILING"));
    }
}
