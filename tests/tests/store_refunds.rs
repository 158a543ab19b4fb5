//! The store's refund registration on a real database, called as intake calls it:
//! the reservation on the payment, and its release when a refund fails (by the
//! database's trigger, whichever path fails it).

use std::time::Duration;

use opgate_domain::{
    Currency, IdempotencyKey, OperationStatus, PaymentRequest, RefundRequest, Transition,
    OPGATE_HTTP_PROVIDER,
};
use opgate_e2e::TestDb;
use opgate_store::{
    FencedTransition, FencedWrite, NewOperation, NewRefund, RefundRegistration, Registration,
};
use rust_decimal::Decimal;
use uuid::Uuid;

const AGENT: &str = "agent-refunds";

async fn succeeded_payment(db: &TestDb, amount: &str) -> Uuid {
    let request = PaymentRequest::parse("cus_1", "inv_1", amount, None)
        .unwrap()
        .to_operation_request();
    let key = IdempotencyKey::parse("payment-1").unwrap();
    let new = NewOperation {
        operation_id: Uuid::new_v4(),
        agent_id: AGENT,
        idempotency_key: &key,
        request: &request,
        provider: OPGATE_HTTP_PROVIDER,
        awaiting_approval_for: None,
        trace_context: None,
    };
    let Registration::Created(payment) = db.store.register_operation(&new).await.unwrap() else {
        panic!("payment not created");
    };
    settle_claimed(db, OperationStatus::Succeeded).await;
    payment.operation_id
}

/// Claims every due operation and moves each to `to` under its fencing token.
async fn settle_claimed(db: &TestDb, to: OperationStatus) {
    let claimed = db
        .store
        .claim_due_operations("executor-test", Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert!(!claimed.is_empty());
    for op in claimed {
        let write = db
            .store
            .transition_with_fence(
                "executor-test",
                FencedTransition {
                    lease: op.lease(),
                    from: OperationStatus::InProgress,
                    transition: Transition::to(to, "test")
                        .with_reference(Some(format!("ref_{}", op.operation_id))),
                },
            )
            .await
            .unwrap();
        assert_eq!(write, FencedWrite::Applied);
    }
}

async fn refund(db: &TestDb, payment: Uuid, amount: Option<&str>, key: &str) -> RefundRegistration {
    refund_on(&db.store, payment, amount, key).await.unwrap()
}

async fn refund_on(
    store: &opgate_store::Store,
    payment: Uuid,
    amount: Option<&str>,
    key: &str,
) -> Result<RefundRegistration, opgate_store::StoreError> {
    let request = RefundRequest::parse(payment, amount, None, Currency::USD)
        .unwrap()
        .to_operation_request();
    let key = IdempotencyKey::parse(key).unwrap();
    store
        .register_refund(&NewRefund {
            operation_id: Uuid::new_v4(),
            agent_id: AGENT,
            idempotency_key: &key,
            request: &request,
            payment_operation_id: payment,
            trace_context: None,
        })
        .await
}

fn created(registration: RefundRegistration) -> opgate_store::OperationRecord {
    match registration {
        RefundRegistration::Registered(Registration::Created(record)) => record,
        other => panic!("expected a new refund, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_refund_gives_its_amount_back_to_the_payment() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--allow", "payment", "--allow", "refund"]);
    let payment = succeeded_payment(&db, "80.00").await;

    let full = created(refund(&db, payment, None, "refund-all").await);
    assert_eq!(full.amount, Some("80.00".parse().unwrap()));
    assert_eq!(
        full.provider, OPGATE_HTTP_PROVIDER,
        "the payment's provider"
    );
    assert_eq!(
        refund(&db, payment, Some("0.01"), "one-cent").await,
        RefundRegistration::ExceedsPayment {
            refundable: Decimal::ZERO
        }
    );
    // The provider refuses it: the refund FAILS and its 80.00 is refundable again.
    settle_claimed(&db, OperationStatus::Failed).await;
    let again = created(refund(&db, payment, Some("80"), "refund-again").await);
    assert_eq!(again.amount, Some("80.00".parse().unwrap()));
    // Replays answer the refund they name, whatever the payment has left now.
    assert!(matches!(
        refund(&db, payment, None, "refund-all").await,
        RefundRegistration::Registered(Registration::Replayed(record)) if record.operation_id == full.operation_id
    ));
    assert_eq!(
        refund(&db, payment, Some("1"), "refund-all").await,
        RefundRegistration::Registered(Registration::KeyReused)
    );
}

#[tokio::test]
async fn a_payment_that_has_not_succeeded_cannot_be_refunded() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--allow", "payment", "--allow", "refund"]);
    let request = PaymentRequest::parse("cus_1", "inv_1", "10", None)
        .unwrap()
        .to_operation_request();
    let key = IdempotencyKey::parse("pending").unwrap();
    let Registration::Created(pending) = db
        .store
        .register_operation(&NewOperation {
            operation_id: Uuid::new_v4(),
            agent_id: AGENT,
            idempotency_key: &key,
            request: &request,
            provider: OPGATE_HTTP_PROVIDER,
            awaiting_approval_for: None,
            trace_context: None,
        })
        .await
        .unwrap()
    else {
        panic!("payment not created");
    };
    assert_eq!(
        refund(&db, pending.operation_id, None, "r").await,
        RefundRegistration::PaymentNotRefundable(OperationStatus::Pending)
    );
    assert_eq!(
        refund(&db, Uuid::new_v4(), None, "r").await,
        RefundRegistration::PaymentNotFound
    );
    assert_eq!(db.counts().await.operations, 1);
}

/// On one node the refund's writes go with the COMMIT in one round trip. If that
/// statement fails, the error is its own, nothing is written or reserved, and the
/// connection goes on to the next refund outside any transaction.
#[tokio::test]
async fn a_refund_whose_statement_fails_writes_and_reserves_nothing() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--allow", "payment", "--allow", "refund"]);
    let payment = succeeded_payment(&db, "80.00").await;
    let one_connection = opgate_store::PoolSettings {
        max_connections: 1,
        ..Default::default()
    };
    let store = opgate_store::Store::connect(&db.url, &one_connection).unwrap();
    let refunded = || async {
        let row = db
            .sql()
            .await
            .query_one(
                "SELECT refunded_amount FROM operations WHERE operation_id = $1",
                &[&payment],
            )
            .await
            .unwrap();
        row.get::<_, Decimal>(0)
    };
    let before = db.counts().await;
    let sql = db.sql().await;
    sql.batch_execute(
        "ALTER TABLE operation_events ADD CONSTRAINT refused_in_test CHECK (reason <> 'registered') NOT VALID",
    )
    .await
    .unwrap();
    let failed = refund_on(&store, payment, Some("30.00"), "refund-once")
        .await
        .unwrap_err();
    assert!(failed.to_string().contains("23514"), "{failed}");
    assert_eq!(db.counts().await, before, "the failed refund wrote");
    assert_eq!(refunded().await, Decimal::ZERO);

    sql.batch_execute("ALTER TABLE operation_events DROP CONSTRAINT refused_in_test")
        .await
        .unwrap();
    let again = refund_on(&store, payment, Some("30.00"), "refund-once").await;
    let record = match again.unwrap() {
        RefundRegistration::Registered(Registration::Created(record)) => record,
        other => panic!("on the same connection, after the failure: {other:?}"),
    };
    assert_eq!(record.amount, Some("30.00".parse().unwrap()));
    assert_eq!(refunded().await, "30.00".parse::<Decimal>().unwrap());
    assert_eq!(db.counts().await.outbox, before.outbox + 1);
}
