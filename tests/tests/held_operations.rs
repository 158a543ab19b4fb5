//! held_operations (V15) lists, by trigger, every operation that waits on an operator
//! or the reconciler, with the time it is due; the reconciler, approval expiry, the
//! operators' listing and the gauges read it instead of status indexes on operations.
//! Here every path that moves an operation in or out of those states runs through the
//! real store against a real PostgreSQL, and after each step the table must say exactly
//! what operations says, and the gauges what a count of operations says.

use std::time::Duration;

use opgate_domain::{IdempotencyKey, OperationStatus, Transition};
use opgate_e2e::db::{new_operation, payment_request, register_payment};
use opgate_e2e::TestDb;
use opgate_store::{FencedTransition, FencedWrite, OperationFilter, OperatorAction, Registration};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);
const AGENT: &str = "agent-held";

/// What held_operations must hold, worked out from operations, and what it holds.
async fn held_against_operations(db: &TestDb) -> (Vec<String>, Vec<String>) {
    let sql = db.sql().await;
    let rows = |query: &'static str| {
        let sql = &sql;
        async move {
            sql.query(query, &[])
                .await
                .unwrap()
                .iter()
                .map(|row| row.get::<_, String>(0))
                .collect::<Vec<_>>()
        }
    };
    let expected = rows(
        "SELECT operation_id || ' ' || status || ' ' || COALESCE(CASE status
             WHEN 'AWAITING_APPROVAL' THEN approval_expires_at
             WHEN 'UNKNOWN' THEN next_attempt_at
             WHEN 'RECONCILING' THEN lease_expires_at END::text, '-')
         FROM operations
         WHERE status IN ('AWAITING_APPROVAL', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW')
         ORDER BY 1",
    )
    .await;
    let held = rows(
        "SELECT operation_id || ' ' || status || ' ' || COALESCE(due_at::text, '-')
         FROM held_operations ORDER BY 1",
    )
    .await;
    (expected, held)
}

async fn assert_in_step(db: &TestDb, step: &str) {
    let (expected, held) = held_against_operations(db).await;
    assert_eq!(held, expected, "after {step}");
    let counts = db.store.pipeline_counts().await.unwrap();
    let mut by_status = db.store.count_by_status().await.unwrap();
    by_status.retain(|status, _| {
        [
            "PENDING",
            "IN_PROGRESS",
            "UNKNOWN",
            "RECONCILING",
            "MANUAL_REVIEW",
        ]
        .contains(&status.as_str())
    });
    assert_eq!(counts.unsettled_by_status, by_status, "gauges after {step}");
}

async fn register_awaiting(db: &TestDb, key: &str, wait: Duration) -> Uuid {
    let request = payment_request(key, "900.00");
    let key = IdempotencyKey::parse(key).unwrap();
    let mut new = new_operation(AGENT, &key, &request);
    new.awaiting_approval_for = Some(wait);
    match db.store.register_operation(&new).await.unwrap() {
        Registration::Created(record) => {
            assert_eq!(record.status, OperationStatus::AwaitingApproval);
            record.operation_id
        }
        other => panic!("expected a new operation, got {other:?}"),
    }
}

fn to(
    lease: opgate_store::Lease,
    from: OperationStatus,
    status: OperationStatus,
) -> FencedTransition {
    FencedTransition {
        lease,
        from,
        transition: Transition::to(status, "held test"),
    }
}

#[tokio::test]
async fn held_operations_follows_every_path_in_and_out_of_waiting() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--allow", "payment"]);
    for i in 0..4 {
        register_payment(&db.store, AGENT, &format!("pay-{i}"), "10.00").await;
    }
    let approved = register_awaiting(&db, "wait-approved", Duration::from_secs(3600)).await;
    let waiting = register_awaiting(&db, "wait-on", Duration::from_secs(3600)).await;
    let expiring = register_awaiting(&db, "wait-expiring", Duration::from_millis(1)).await;
    assert_in_step(&db, "registration").await;

    let action = db
        .store
        .approve_operation(approved, "dana", None)
        .await
        .unwrap();
    assert!(matches!(action, OperatorAction::Applied(_)), "{action:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let expired = db.store.expire_approvals("approvals", 10).await.unwrap();
    assert_eq!(
        expired,
        [expiring],
        "only the approval past its time expires"
    );
    assert_in_step(&db, "an approval and an expiry").await;

    let claimed = db
        .store
        .claim_due_operations("executor-held", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5, "four payments and the approved one");
    assert_in_step(&db, "the executor's claim").await;
    assert!(db
        .store
        .heartbeat(&claimed[0].lease(), LEASE)
        .await
        .unwrap());
    assert_in_step(&db, "a heartbeat").await;

    let outcomes: Vec<FencedTransition> = claimed
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let status = if i < 2 {
                OperationStatus::Succeeded
            } else {
                OperationStatus::Unknown
            };
            to(op.lease(), OperationStatus::InProgress, status)
        })
        .collect();
    let writes = db
        .store
        .transition_batch_with_fence("executor-held", &outcomes)
        .await
        .unwrap();
    assert!(
        writes.iter().all(|w| *w == FencedWrite::Applied),
        "{writes:?}"
    );
    assert_in_step(&db, "completions, three of them UNKNOWN").await;

    // Due now, by hand, as an operator might: the trigger follows that too.
    db.sql()
        .await
        .execute(
            "UPDATE operations SET next_attempt_at = now() - interval '1 second'
             WHERE status = 'UNKNOWN'",
            &[],
        )
        .await
        .unwrap();
    assert_in_step(&db, "a hand-written UPDATE of next_attempt_at").await;
    let reconciling = db
        .store
        .claim_due_reconciliations("reconciler-held", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(reconciling.len(), 3, "the three UNKNOWN payments");
    assert_in_step(&db, "the reconciler's claim").await;

    let rec = OperationStatus::Reconciling;
    let writes = db
        .store
        .transition_batch_with_fence(
            "reconciler-held",
            &[
                to(reconciling[0].lease(), rec, OperationStatus::ManualReview),
                to(reconciling[1].lease(), rec, OperationStatus::Succeeded),
            ],
        )
        .await
        .unwrap();
    assert_eq!(writes, [FencedWrite::Applied, FencedWrite::Applied]);
    assert_in_step(&db, "review and success from RECONCILING").await;

    let in_review = db
        .store
        .list_operations(&OperationFilter {
            status: Some(OperationStatus::ManualReview),
            agent_id: None,
            limit: 10,
        })
        .await
        .unwrap();
    let ids: Vec<Uuid> = in_review.iter().map(|op| op.operation_id).collect();
    assert_eq!(
        ids,
        [reconciling[0].operation_id],
        "operators' review queue"
    );
    let awaiting = db
        .store
        .list_operations(&OperationFilter {
            status: Some(OperationStatus::AwaitingApproval),
            agent_id: Some(AGENT.to_owned()),
            limit: 10,
        })
        .await
        .unwrap();
    let ids: Vec<Uuid> = awaiting.iter().map(|op| op.operation_id).collect();
    assert_eq!(ids, [waiting], "the approval still waiting");

    let action = db
        .store
        .resolve_manual_review(
            reconciling[0].operation_id,
            OperationStatus::Unknown,
            None,
            "check again",
            "operator:dana",
        )
        .await
        .unwrap();
    assert!(matches!(action, OperatorAction::Applied(_)), "{action:?}");
    assert_in_step(&db, "a review sent back to the reconciler").await;
    let action = db
        .store
        .reject_operation(waiting, "dana", "not this one")
        .await
        .unwrap();
    assert!(matches!(action, OperatorAction::Applied(_)), "{action:?}");
    assert_in_step(&db, "a rejection").await;

    // One RECONCILING (its reconciler "died") and one UNKNOWN due now are left.
    let (_, held) = held_against_operations(&db).await;
    assert_eq!(held.len(), 2, "{held:?}");
}
