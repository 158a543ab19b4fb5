//! Two executors drain many operations at once: every operation terminal, done once at
//! the provider, no key done twice, the outbox empty; with one claim loop in one
//! executor and four in the other. Run for each kind (`Kind`): 2,000 payments, and 300
//! refunds and 300 declared orders.

use std::collections::HashSet;
use std::time::Duration;

use opgate_e2e::Kind;
use serde_json::json;

async fn two_executors_drain_operations_exactly_once(kind: Kind, count: usize) {
    let stack = kind.start().await;
    let ids = stack.register_many(count, 64, json!({})).await;
    // One runs a single claim loop, the other the default four, which then race each
    // other as well as the other executor.
    let a = stack
        .executor(&["--concurrency", "32", "--claimers", "1"])
        .await;
    let b = stack.executor(&["--concurrency", "32"]).await;

    stack
        .wait_all_succeeded(&ids, Duration::from_secs(120))
        .await;

    let effects = kind.effects_in(&stack.sim.ledger().await);
    assert_eq!(effects.len(), ids.len(), "{}s != operations", kind.name());
    let keys: HashSet<&str> = effects
        .iter()
        .map(|e| e["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), ids.len(), "a key was done twice");
    let expected: HashSet<String> = ids.iter().map(|id| format!("opgate-{id}")).collect();
    assert!(keys.iter().all(|k| expected.contains(*k)));
    assert_eq!(stack.db.counts().await.outbox, 0);
    // Both took part (claims are shared through SKIP LOCKED, not partitioned), and
    // each operation was claimed exactly once: no overlapping leases.
    let mut owners = HashSet::new();
    for id in &ids {
        let events = stack.db.store.operation_events(*id).await.unwrap();
        assert_eq!(
            events
                .iter()
                .filter(|e| e.to_status == "IN_PROGRESS")
                .count(),
            1,
            "{events:?}"
        );
        owners.extend(
            events
                .into_iter()
                .filter(|e| e.to_status == "SUCCEEDED")
                .map(|e| e.actor),
        );
    }
    assert!(
        owners.contains(a.owner()) && owners.contains(b.owner()),
        "{owners:?}"
    );
}

#[tokio::test]
async fn two_executors_drain_two_thousand_operations_exactly_once_payment() {
    two_executors_drain_operations_exactly_once(Kind::Payment, 2000).await;
}

#[tokio::test]
async fn two_executors_drain_three_hundred_operations_exactly_once_refund() {
    two_executors_drain_operations_exactly_once(Kind::Refund, 300).await;
}

#[tokio::test]
async fn two_executors_drain_three_hundred_operations_exactly_once_order() {
    two_executors_drain_operations_exactly_once(Kind::Order, 300).await;
}
