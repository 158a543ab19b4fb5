//! The store's multi-row writes, called as the services call them, on a real database:
//! a completion batch applies each row whose fencing token is still current and
//! refuses (and audits) each one whose token has moved on, independently of the rest.

use std::time::Duration;

use opgate_domain::{OperationStatus, Transition};
use opgate_e2e::db::register_payment;
use opgate_e2e::TestDb;
use opgate_store::{FencedTransition, FencedWrite, Lease};
use uuid::Uuid;

async fn register(db: &TestDb, agent: &str, key: &str) -> Uuid {
    register_payment(&db.store, agent, key, "10.00").await
}

fn succeeded(lease: Lease) -> FencedTransition {
    let operation_id = lease.operation_id;
    FencedTransition {
        lease,
        from: OperationStatus::InProgress,
        transition: Transition::to(
            OperationStatus::Succeeded,
            "provider confirmed the operation",
        )
        .with_reference(Some(format!("pay_{operation_id}"))),
    }
}

#[tokio::test]
async fn a_completion_batch_applies_current_tokens_and_refuses_stale_ones_one_by_one() {
    let db = TestDb::create().await;
    db.create_agent("agent-batch", &[]);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(register(&db, "agent-batch", &format!("key-{i}")).await);
    }
    let claimed = db
        .store
        .claim_due_operations("executor-test", Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let lease_of = |id: Uuid| {
        claimed
            .iter()
            .find(|c| c.operation_id == id)
            .unwrap()
            .lease()
    };
    // The middle one carries a token that is no longer current (as if another
    // executor had taken the lease over since).
    let batch = vec![
        succeeded(lease_of(ids[0])),
        succeeded(Lease {
            fencing_token: lease_of(ids[1]).fencing_token - 1,
            ..lease_of(ids[1])
        }),
        succeeded(lease_of(ids[2])),
    ];
    let writes = db
        .store
        .transition_batch_with_fence("executor-test", &batch)
        .await
        .unwrap();
    assert_eq!(
        writes,
        vec![
            FencedWrite::Applied,
            FencedWrite::RejectedStale,
            FencedWrite::Applied
        ]
    );

    for (id, expected) in [
        (ids[0], OperationStatus::Succeeded),
        (ids[1], OperationStatus::InProgress),
        (ids[2], OperationStatus::Succeeded),
    ] {
        let record = db.store.find_operation(id).await.unwrap().unwrap();
        assert_eq!(record.status, expected, "{id}");
        let events = db.store.operation_events(id).await.unwrap();
        let last = events.last().unwrap();
        if expected == OperationStatus::Succeeded {
            assert_eq!(record.provider_reference, Some(format!("pay_{id}")));
            assert_eq!(
                (last.to_status.as_str(), last.outcome.as_str()),
                ("SUCCEEDED", "applied")
            );
            assert_eq!(last.fencing_token, Some(lease_of(id).fencing_token));
        } else {
            assert_eq!(record.provider_reference, None);
            assert_eq!(last.outcome, "rejected_stale", "{events:?}");
        }
    }
    // Only the stale one keeps its outbox event (its real owner still has to finish).
    assert_eq!(db.counts().await.outbox, 1);

    // The same batch again, as after a commit whose reply was lost: the two this worker
    // applied are recognised as its own (not stale writes); the stale one is refused.
    let again = db
        .store
        .transition_batch_with_fence("executor-test", &batch)
        .await
        .unwrap();
    assert_eq!(
        again,
        vec![
            FencedWrite::Applied,
            FencedWrite::RejectedStale,
            FencedWrite::Applied
        ]
    );
    for id in [ids[0], ids[2]] {
        let events = db.store.operation_events(id).await.unwrap();
        assert!(
            events.iter().all(|e| e.outcome == "applied"),
            "no stale write recorded for a retried write of its own: {events:?}"
        );
    }
}
