//! Refund limits and spend budgets on Citus behave as on one PostgreSQL: the same
//! concurrent requests, the same answers, the same rows (tests/tests/refunds.rs and
//! budgets.rs), through a coordinator with two workers (`make test-citus`).

use std::time::Duration;

use futures_util::future::join_all;
use opgate_e2e::citus::CitusDb;
use opgate_e2e::{Executor, Stack};
use serde_json::json;
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);

/// The refund race of tests/tests/refunds.rs, through the coordinator.
#[tokio::test]
async fn concurrent_refunds_never_exceed_the_payment() {
    let Some((cluster, db)) =
        CitusDb::migrated("concurrent_refunds_never_exceed_the_payment", 8).await
    else {
        return;
    };
    let stack = Stack::start_on(db, &[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    opgate_e2e::guardrails::twenty_refunds_of_30_against_100(&stack).await;
    drop(stack);
    cluster.drop_everywhere().await;
}

/// A budget of 5,000.00 for 24 hours: one payment the provider will decline, then
/// forty payments of 1,000.00 at once, of which exactly four are accepted and the rest
/// refused with 403 `budget-exceeded`, nothing written; once the decline has FAILED its
/// 1,000.00 is free again, so one more payment fits, and no more.
#[tokio::test]
async fn concurrent_payments_spend_exactly_the_budget() {
    let Some((cluster, db)) =
        CitusDb::migrated("concurrent_payments_spend_exactly_the_budget", 8).await
    else {
        return;
    };
    let agent = ["--allow", "payment", "--daily-budget", "USD:5000.00"];
    let stack = Stack::start_custom(db, &[], &agent, &[], &[]).await;
    let pay = |key: String, customer: &'static str| {
        let body = json!({"customer_id": customer, "invoice_id": key, "amount": "1000.00"});
        let stack = &stack;
        async move { stack.post("payment", &key, body).await }
    };
    let declined = pay("declined".into(), "decline_me").await;
    assert_eq!(declined.status, 202, "{}", declined.body);
    let declined: Uuid = declined.operation_id().parse().unwrap();

    let replies = join_all((0..40).map(|i| pay(format!("pay-{i}"), "cus_budget"))).await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    assert_eq!(accepted, 4, "4 × 1,000.00 fit beside the first");
    for refused in replies.iter().filter(|r| r.status != 202) {
        refused.assert_problem(403);
        assert!(refused.body["type"]
            .as_str()
            .unwrap()
            .ends_with("budget-exceeded"));
    }
    assert_eq!(
        stack.db.counts().await.operations,
        5,
        "refused payments wrote nothing"
    );

    // Only now is anything executed.
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    stack.wait_for_status(declined, "FAILED", SETTLE).await;
    let after_failure = pay("after-failure".into(), "cus_budget").await;
    assert_eq!(
        after_failure.status, 202,
        "the FAILED payment's 1,000.00 came back: {}",
        after_failure.body
    );
    pay("over".into(), "cus_budget").await.assert_problem(403);
    drop(stack);
    cluster.drop_everywhere().await;
}
