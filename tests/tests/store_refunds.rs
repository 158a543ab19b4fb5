//! The store's refund registration on a real database, called as intake calls it:
//! the reservation on the payment, and its release when a refund fails (by the
//! database's trigger, whichever path fails it).

use std::time::Duration;

use opgate_domain::{
    IdempotencyKey, OperationStatus, PaymentRequest, RefundRequestError, Transition,
    OPGATE_HTTP_PROVIDER,
};
use opgate_e2e::TestDb;
use opgate_store::{
    AgentCheck, FencedTransition, FencedWrite, NewOperation, NewRefund, RefundRegistration,
    Registration,
};
use rust_decimal::Decimal;
use uuid::Uuid;

const AGENT: &str = "agent-refunds";

async fn succeeded_payment(db: &TestDb, amount: &str) -> Uuid {
    succeeded_payment_in(db, amount, None, "payment-1").await
}

async fn succeeded_payment_in(
    db: &TestDb,
    amount: &str,
    currency: Option<&str>,
    key: &str,
) -> Uuid {
    let request = PaymentRequest::parse("cus_1", "inv_1", amount, currency)
        .unwrap()
        .to_operation_request();
    let key = IdempotencyKey::parse(key).unwrap();
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
    refund_checked(store, payment, amount, key, None).await
}

/// A refund as intake registers it for an agent it remembered (`check`) or read.
async fn refund_checked(
    store: &opgate_store::Store,
    payment: Uuid,
    amount: Option<&str>,
    key: &str,
    check: Option<&AgentCheck>,
) -> Result<RefundRegistration, opgate_store::StoreError> {
    let key = IdempotencyKey::parse(key).unwrap();
    store
        .register_refund(&NewRefund {
            operation_id: Uuid::new_v4(),
            agent_id: AGENT,
            idempotency_key: &key,
            payment_operation_id: payment,
            amount,
            reason: None,
            trace_context: None,
            agent_check: check,
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

/// The refund's amount is read in its payment's currency, once the payment is locked:
/// what does not fit the currency's minor unit is refused with nothing written, and a
/// retry under the same key in the same currency is the same request.
#[tokio::test]
async fn a_refund_is_read_in_its_payments_currency() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--allow", "payment", "--allow", "refund"]);
    let yen = succeeded_payment_in(&db, "1000", Some("JPY"), "payment-yen").await;
    let before = db.counts().await;
    assert!(matches!(
        refund(&db, yen, Some("10.50"), "half-a-yen").await,
        RefundRegistration::Invalid(RefundRequestError::Money(_))
    ));
    assert_eq!(db.counts().await, before, "an invalid refund wrote");

    let record = created(refund(&db, yen, Some("500"), "yen-refund").await);
    assert_eq!(record.currency.as_deref(), Some("JPY"));
    assert_eq!(record.amount, Some(Decimal::from(500)));
    assert!(matches!(
        refund(&db, yen, Some("500"), "yen-refund").await,
        RefundRegistration::Registered(Registration::Replayed(replayed)) if replayed.operation_id == record.operation_id
    ));
}

/// A refund for an agent intake remembered is written, and answered from the payment,
/// only while the agent's row is the version intake read and accepts the key id.
/// Otherwise nothing is written or reserved and nothing about the payment is said.
#[tokio::test]
async fn a_checked_refund_is_written_only_while_the_agents_row_is_as_read() {
    let db = TestDb::create().await;
    let key = db.create_agent(AGENT, &["--allow", "payment", "--allow", "refund"]);
    let payment = succeeded_payment(&db, "80.00").await;
    let AgentCheck {
        key_id,
        row_version: read,
    } = db.agent_check(&key).await;
    let check = |key_id: &str, row_version: i64| AgentCheck {
        key_id: key_id.to_owned(),
        row_version,
    };
    let store = &db.store;
    let before = db.counts().await;
    for (stale, what) in [
        (check(&key_id, read - 1), "another version"),
        (check("someone-else", read), "another key id"),
    ] {
        for payment in [payment, Uuid::new_v4()] {
            assert_eq!(
                refund_checked(store, payment, Some("30"), "checked", Some(&stale))
                    .await
                    .unwrap(),
                RefundRegistration::Unconfirmed,
                "{what}"
            );
        }
    }
    assert_eq!(db.counts().await, before, "an unconfirmed refund wrote");

    let current = check(&key_id, read);
    assert_eq!(
        refund_checked(store, Uuid::new_v4(), None, "nowhere", Some(&current))
            .await
            .unwrap(),
        RefundRegistration::PaymentNotFound
    );
    let record = created(
        refund_checked(store, payment, Some("30"), "checked", Some(&current))
            .await
            .unwrap(),
    );
    assert_eq!(record.amount, Some("30.00".parse().unwrap()));

    opgate_e2e::opgate(&db.url, &["agents", "revoke", AGENT]).success();
    let revoked = db
        .sql()
        .await
        .query_one(
            "SELECT xmin::text::bigint FROM agents WHERE agent_id = $1",
            &[&AGENT],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(
        refund_checked(
            store,
            payment,
            Some("30"),
            "checked",
            Some(&check(&key_id, revoked))
        )
        .await
        .unwrap(),
        RefundRegistration::Unconfirmed,
        "a revoked agent, even at the row's version"
    );
}
