//! Human approval above a threshold, end to end: an operation above the agent's
//! threshold waits as AWAITING_APPROVAL and nothing reaches the provider until an
//! operator approves it (then exactly one charge); rejected or expired, it fails with no
//! provider request at all. Real intake, executor, reconciler and provider-sim.

use std::time::Duration;

use opgate_e2e::api::get_operation;
use opgate_e2e::{opgate, Executor, Reconciler, Stack, TestDb};
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(20);
const AGENT: [&str; 6] = [
    "--allow",
    "payment",
    "--allow",
    "refund",
    "--approval-above",
    "USD:500.00",
];

async fn stack(intake_args: &[&str]) -> (Stack, String) {
    let stack = Stack::start_custom(TestDb::create().await, &[], &AGENT, intake_args, &[]).await;
    let operator = opgate(&stack.db.url, &["operators", "create", "ana"])
        .success()
        .stdout
        .trim()
        .to_owned();
    (stack, operator)
}

async fn big_payment(stack: &Stack, key: &str) -> Uuid {
    let reply = stack
        .post(
            "payment",
            key,
            serde_json::json!({"customer_id": "cus_big", "invoice_id": key, "amount": "600.00"}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.body["status"], "AWAITING_APPROVAL");
    assert_eq!(reply.body["next"]["action"], "wait_for_approval");
    assert!(reply.body["next"]["poll_url"].is_string());
    reply.operation_id().parse().unwrap()
}

async fn decide(stack: &Stack, operator: &str, id: Uuid, decision: &str, reason: &str) -> u16 {
    stack
        .client
        .post(
            stack
                .intake
                .url(&format!("/admin/operations/{id}/{decision}")),
        )
        .bearer_auth(operator)
        .json(&serde_json::json!({ "reason": reason }))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn nothing_is_sent_before_approval_and_exactly_one_charge_after() {
    let (stack, operator) = stack(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let big = big_payment(&stack, "big-1").await;
    // A small payment goes straight through: the executor is running meanwhile.
    let small = stack.pay("cus_small", "small-1").await;
    stack.wait_for_status(small, "SUCCEEDED", SETTLE).await;
    assert_eq!(
        stack.operation(big).await.status.as_str(),
        "AWAITING_APPROVAL"
    );
    assert_eq!(
        stack.requests_for(big).await,
        0,
        "nothing sent before approval"
    );

    assert_eq!(
        decide(
            &stack,
            &operator,
            big,
            "approve",
            "customer confirmed by phone"
        )
        .await,
        200
    );
    let op = stack.wait_for_status(big, "SUCCEEDED", SETTLE).await;
    assert_eq!(stack.charges_for(big).await.len(), 1);
    assert_eq!(stack.requests_for(big).await, 1);
    assert!(op.provider_reference.is_some());
    let events = stack.db.store.operation_events(big).await.unwrap();
    assert!(events
        .iter()
        .any(|e| e.actor == "operator:ana" && e.to_status == "PENDING"));
}

#[tokio::test]
async fn a_rejected_operation_fails_without_any_provider_request() {
    let (stack, operator) = stack(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let big = big_payment(&stack, "big-2").await;
    assert_eq!(
        decide(
            &stack,
            &operator,
            big,
            "reject",
            "not ordered by the customer"
        )
        .await,
        200
    );
    let op = stack.wait_for_status(big, "FAILED", SETTLE).await;
    assert!(op.last_error.unwrap().contains("rejected by operator"));
    let read = get_operation(
        &stack.client,
        &stack.intake.base_url,
        &stack.key,
        &big.to_string(),
    )
    .await;
    assert_eq!(read.body["next"]["action"], "new_key_required");
    assert_eq!(stack.requests_for(big).await, 0);
    assert_eq!(
        decide(&stack, &operator, big, "approve", "too late").await,
        409
    );
}

#[tokio::test]
async fn an_approval_nobody_gives_expires_and_fails() {
    let (stack, _operator) = stack(&["--approval-timeout", "1s"]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let _reconciler = Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &[]).await;
    let big = big_payment(&stack, "big-3").await;
    let op = stack.wait_for_status(big, "FAILED", SETTLE).await;
    assert_eq!(op.last_error.as_deref(), Some("approval expired"));
    assert_eq!(stack.requests_for(big).await, 0);
    let events = stack.db.store.operation_events(big).await.unwrap();
    assert_eq!(
        events.last().unwrap().from_status.as_deref(),
        Some("AWAITING_APPROVAL")
    );
}
