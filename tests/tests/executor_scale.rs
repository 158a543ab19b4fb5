//! Two executors drain 2,000 operations at once: every operation terminal, one charge
//! per operation, no key charged twice, the outbox empty; with one claim loop in one
//! executor and four in the other.

use std::collections::HashSet;
use std::time::Duration;

use opgate_e2e::{Executor, Stack};

#[tokio::test]
async fn two_executors_drain_two_thousand_operations_exactly_once() {
    let stack = Stack::start(&[]).await;
    let ids = stack.pay_many(2000, 64).await;
    // One runs a single claim loop, the other the default four, which then race each
    // other as well as the other executor.
    let a = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--concurrency", "32", "--claimers", "1"],
    )
    .await;
    let b = Executor::start(&stack.db.url, &stack.sim.base_url, &["--concurrency", "32"]).await;

    stack
        .wait_all_succeeded(ids.len() as i64, Duration::from_secs(120))
        .await;

    let ledger = stack.sim.ledger().await;
    let charges = ledger["charges"].as_array().unwrap();
    assert_eq!(charges.len(), ids.len());
    let keys: HashSet<&str> = charges
        .iter()
        .map(|c| c["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), ids.len(), "a key was charged twice");
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
