//! Guardrail scenarios run the same on one PostgreSQL and on Citus
//! (tests/tests/refunds.rs, citus_guardrails.rs).

use std::time::Duration;

use futures_util::future::join_all;
use rust_decimal::Decimal;
use serde_json::json;
use uuid::Uuid;

use crate::Stack;

const SETTLE: Duration = Duration::from_secs(30);

/// A payment of 100.00 that succeeds (the stack needs an executor), then twenty
/// refunds of 30.00 at once: three are accepted, the rest refused with 422
/// `refund-exceeds-payment` and nothing written, and the provider gives back what the
/// database says.
pub async fn twenty_refunds_of_30_against_100(stack: &Stack) {
    let body = json!({"customer_id": "cus_refund", "invoice_id": "inv-race", "amount": "100.00"});
    let paid = stack.post("payment", "pay-race", body).await;
    assert_eq!(paid.status, 202, "{}", paid.body);
    let payment: Uuid = paid.operation_id().parse().unwrap();
    stack.wait_for_status(payment, "SUCCEEDED", SETTLE).await;

    let before = stack.db.counts().await;
    let keys: Vec<String> = (0..20).map(|i| format!("race-{i}")).collect();
    let replies = join_all(
        keys.iter()
            .map(|key| stack.refund(payment, Some("30.00"), key)),
    )
    .await;
    let accepted: Vec<Uuid> = replies
        .iter()
        .filter(|r| r.status == 202)
        .map(|r| r.operation_id().parse().unwrap())
        .collect();
    for refused in replies.iter().filter(|r| r.status != 202) {
        refused.assert_problem(422);
        let kind = refused.body["type"].as_str().unwrap();
        assert!(kind.ends_with("refund-exceeds-payment"), "{kind}");
    }
    assert_eq!(accepted.len(), 3, "30.00 fits three times into 100.00");
    assert_eq!(
        stack.db.counts().await.operations,
        before.operations + 3,
        "refused refunds wrote nothing"
    );
    let mut succeeded = Decimal::ZERO;
    for id in &accepted {
        let op = stack.wait_for_status(*id, "SUCCEEDED", SETTLE).await;
        succeeded += op.amount.unwrap();
    }
    let given_back: Decimal = stack
        .ledger_refunds()
        .await
        .iter()
        .map(|r| r["amount"].as_str().unwrap().parse::<Decimal>().unwrap())
        .sum();
    assert_eq!(
        given_back, succeeded,
        "the provider gave back what the database says"
    );
    assert_eq!(given_back, "90.00".parse::<Decimal>().unwrap());
}
