//! Refunds end to end: real intake, executor, reconciler and provider-sim on a real
//! PostgreSQL. The sum of a payment's refunds that have not failed never exceeds what
//! was paid, whatever the concurrency; the database decides, and the provider's ledger
//! agrees with it.

use std::time::Duration;

use opgate_e2e::api::post_operation;
use opgate_e2e::{Executor, Reconciler, Stack};
use rust_decimal::Decimal;
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);

/// A SUCCEEDED payment of `amount` USD.
async fn paid(stack: &Stack, amount: &str, key: &str) -> Uuid {
    let reply = stack
        .post(
            "payment",
            key,
            serde_json::json!({"customer_id": "cus_refund", "invoice_id": key, "amount": amount}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let id = reply.operation_id().parse().unwrap();
    stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    id
}

fn accepted(reply: &opgate_e2e::api::Reply) -> Uuid {
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.body["operation_type"], "refund");
    reply.operation_id().parse().unwrap()
}

fn total(refunds: &[serde_json::Value]) -> Decimal {
    refunds
        .iter()
        .map(|r| r["amount"].as_str().unwrap().parse::<Decimal>().unwrap())
        .sum()
}

#[tokio::test]
async fn partial_refunds_then_the_remainder_then_nothing_more() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let payment = paid(&stack, "100.00", "pay-1").await;
    let payment_reference = stack.operation(payment).await.provider_reference.unwrap();

    let first = accepted(&stack.refund(payment, Some("30"), "refund-1").await);
    let second = accepted(&stack.refund(payment, Some("20.00"), "refund-2").await);
    let rest = accepted(&stack.refund(payment, None, "refund-3").await);
    for id in [first, second, rest] {
        let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
        assert!(op.provider_reference.unwrap().starts_with("re_"));
    }
    assert_eq!(
        stack.operation(rest).await.amount,
        Some("50.00".parse().unwrap()),
        "no amount means what remained"
    );

    let refunds = stack.ledger_refunds().await;
    assert_eq!(refunds.len(), 3);
    assert_eq!(total(&refunds), "100.00".parse::<Decimal>().unwrap());
    for refund in &refunds {
        assert_eq!(refund["payment_id"], payment_reference.as_str());
    }
    // A retry of one of them is the same refund, not a fourth.
    let replay = stack.refund(payment, Some("30.00"), "refund-1").await;
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.operation_id(), first.to_string());

    let before = stack.db.counts().await;
    let more = stack.refund(payment, Some("0.01"), "refund-4").await;
    more.assert_problem(422);
    assert!(more.body["type"]
        .as_str()
        .unwrap()
        .ends_with("refund-exceeds-payment"));
    assert_eq!(
        stack.db.counts().await,
        before,
        "a refused refund writes nothing"
    );
    assert_eq!(stack.ledger_refunds().await.len(), 3);
}

#[tokio::test]
async fn twenty_concurrent_refunds_of_30_against_100_accept_exactly_three() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    opgate_e2e::guardrails::twenty_refunds_of_30_against_100(&stack).await;
}

#[tokio::test]
async fn only_the_agents_own_succeeded_payments_can_be_refunded() {
    let stack = Stack::start(&[]).await;
    let other_key = stack
        .db
        .create_agent("other", &["--allow", "payment", "--allow", "refund"]);
    let payer_only = stack.db.create_agent("payer-only", &[]);
    let before = stack.db.counts().await;

    // Not yet executed: PENDING is not refundable.
    let pending = stack.pay("cus_wait", "pay-pending").await;
    let reply = stack.refund(pending, Some("1.00"), "early").await;
    reply.assert_problem(409);
    assert!(reply.body["type"]
        .as_str()
        .unwrap()
        .ends_with("payment-not-refundable"));
    assert!(reply.body["detail"].as_str().unwrap().contains("PENDING"));

    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let declined = stack.pay("decline_card", "pay-declined").await;
    stack.wait_for_status(declined, "FAILED", SETTLE).await;
    let reply = stack.refund(declined, None, "of-failed").await;
    reply.assert_problem(409);
    assert!(reply.body["detail"].as_str().unwrap().contains("FAILED"));

    let mine = paid(&stack, "10.00", "pay-mine").await;
    let body = serde_json::json!({"payment_operation_id": mine});
    let theirs = post_operation(
        &stack.client,
        &stack.intake.base_url,
        "refund",
        &other_key,
        "steal",
        &body,
    )
    .await;
    theirs.assert_problem(404);
    let unknown = stack.refund(Uuid::new_v4(), None, "unknown").await;
    unknown.assert_problem(404);
    let refused = post_operation(
        &stack.client,
        &stack.intake.base_url,
        "refund",
        &payer_only,
        "not-granted",
        &body,
    )
    .await;
    refused.assert_problem(403);
    let no_such_kind = stack.post("chargeback", "k", body.clone()).await;
    no_such_kind.assert_problem(404);
    assert!(no_such_kind.body["type"]
        .as_str()
        .unwrap()
        .ends_with("unknown-kind"));
    let too_precise = stack.refund(mine, Some("1.001"), "precise").await;
    too_precise.assert_problem(422);
    let counts = stack.db.counts().await;
    assert_eq!(
        counts.operations,
        before.operations + 3,
        "only the three payments were written"
    );
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_reconciled_into_one_refund() {
    let stack = Stack::start(&[]).await;
    let executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let payment = paid(&stack, "40.00", "pay-lost").await;
    stack
        .sim
        .set_faults(serde_json::json!({"drop_after_commit": {"probability": 1.0, "times": 1}}))
        .await;
    let refund = accepted(&stack.refund(payment, Some("15.00"), "refund-lost").await);
    stack.wait_for_status(refund, "UNKNOWN", SETTLE).await;
    drop(executor);
    let _reconciler = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &["--backoff-base", "20ms", "--backoff-max", "200ms"],
    )
    .await;
    let op = stack.wait_for_status(refund, "SUCCEEDED", SETTLE).await;
    // Ledger-wide: under its key, or under a key that names no operation.
    let refunds = stack.ledger_refunds().await;
    let mine = opgate_e2e::stack::ledger_wide(&stack.db, refund, &refunds, |_| false).await;
    assert_eq!(
        mine.len(),
        1,
        "exactly one refund at the provider: {mine:?}"
    );
    assert_eq!(
        op.provider_reference.as_deref(),
        mine[0]["refund_id"].as_str()
    );
    assert_eq!(stack.requests_for(refund).await, 1, "never re-sent");
}
