//! A fenced write whose commit succeeded but whose reply was lost: the worker writes
//! again (as the executor does while the database seems unavailable), and the store
//! recognises its own transition as applied. The audit trail shows one applied
//! transition and no stale write; a write from an older lease is still refused. The
//! statement timeout: a statement stuck behind another session's lock fails after the
//! timeout as "database unavailable", and the next one succeeds once the lock is gone.

use std::time::Duration;

use opgate_domain::{IdempotencyKey, OperationStatus, PaymentRequest, Transition};
use opgate_e2e::db::register_payment;
use opgate_e2e::TestDb;
use opgate_store::{
    FencedTransition, FencedWrite, NewOperation, PoolSettings, Registration, Store,
};
use uuid::Uuid;

async fn register(store: &Store, agent: &str, key: &str) -> Uuid {
    register_payment(store, agent, key, "10.00").await
}

#[tokio::test]
async fn a_retried_write_whose_first_commit_was_applied_is_not_a_stale_write() {
    let db = TestDb::create().await;
    db.create_agent("agent-lost-reply", &[]);
    let id = register(&db.store, "agent-lost-reply", "lost-reply-1").await;
    let claimed = db
        .store
        .claim_due_operations("executor-a", Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert_eq!(claimed[0].operation_id, id);
    let write = FencedTransition {
        lease: claimed[0].lease(),
        from: OperationStatus::InProgress,
        transition: Transition::to(OperationStatus::Succeeded, "provider confirmed")
            .with_reference(Some("pay_lost_reply".into())),
    };
    let first = db
        .store
        .transition_with_fence("executor-a", write.clone())
        .await
        .unwrap();
    // The reply to that commit is lost; the worker writes the same transition again.
    let again = db
        .store
        .transition_with_fence("executor-a", write.clone())
        .await
        .unwrap();
    assert_eq!((first, again), (FencedWrite::Applied, FencedWrite::Applied));

    // Someone else's write with the same token, or this worker's under an older lease,
    // is still a stale write.
    let mut older = write.clone();
    older.lease.fencing_token -= 1;
    assert_eq!(
        db.store
            .transition_with_fence("executor-a", older)
            .await
            .unwrap(),
        FencedWrite::RejectedStale
    );
    let events = db.store.operation_events(id).await.unwrap();
    let to_succeeded: Vec<_> = events
        .iter()
        .filter(|e| e.to_status == "SUCCEEDED")
        .map(|e| e.outcome.as_str())
        .collect();
    assert_eq!(
        to_succeeded,
        ["applied", "rejected_stale"],
        "one applied transition, then only the older lease's refusal: {events:?}"
    );
}

#[tokio::test]
async fn a_statement_stuck_behind_a_lock_fails_after_the_timeout_and_the_next_succeeds() {
    let db = TestDb::create().await;
    db.create_agent("agent-locked", &[]);
    let store = Store::connect(
        &db.url,
        &PoolSettings {
            statement_timeout: Some(Duration::from_millis(300)),
            ..PoolSettings::default()
        },
    )
    .unwrap();
    // Another session takes the operations table and sits on it: a forgotten psql.
    let (holder, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    holder
        .batch_execute("BEGIN; LOCK TABLE operations IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();

    let request = PaymentRequest::parse("cus_1", "inv_locked", "10.00", None)
        .unwrap()
        .to_operation_request();
    let key = IdempotencyKey::parse("locked-1").unwrap();
    let new = NewOperation {
        operation_id: Uuid::new_v4(),
        agent_id: "agent-locked",
        idempotency_key: &key,
        request: &request,
        provider: opgate_domain::OPGATE_HTTP_PROVIDER,
        awaiting_approval_for: None,
        trace_context: None,
    };
    let stuck = tokio::time::timeout(Duration::from_secs(10), store.register_operation(&new))
        .await
        .expect("the statement timeout ends the wait, not the test's");
    let error = stuck.expect_err("nothing can be written behind the lock");
    assert!(error.is_unavailable(), "answered as unavailable: {error}");

    holder.batch_execute("ROLLBACK").await.unwrap();
    // The same pool, the same request: it goes through now.
    assert!(matches!(
        store.register_operation(&new).await.unwrap(),
        Registration::Created(_)
    ));
}
