//! What the executor makes of each provider answer, end to end: real intake, executor
//! and provider-sim processes on a real PostgreSQL.

use std::time::Duration;

use opgate_e2e::api::{payment_body, post_payment};
use opgate_e2e::{Executor, Stack};

const SETTLE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_payment_succeeds_once_with_the_ledgers_reference() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let id = stack.pay("cus_happy", "happy-1").await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );
    assert_eq!(op.attempts, 1);
    let trail: Vec<String> = stack
        .db
        .store
        .operation_events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to_status.clone())
        .collect();
    assert_eq!(trail, ["PENDING", "IN_PROGRESS", "SUCCEEDED"]);
    assert_eq!(
        stack.db.counts().await.outbox,
        0,
        "the outbox event was not removed"
    );
}

#[tokio::test]
async fn prefer_wait_answers_with_the_terminal_state() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let reply = stack
        .client
        .post(stack.intake.url("/agent/operations/payment"))
        .bearer_auth(&stack.key)
        .header("Idempotency-Key", "wait-1")
        .header("Prefer", "wait=5")
        .json(&payment_body("cus_wait", "inv_wait", "12.00"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["preference-applied"], "wait=5");
    let body: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(body["status"], "SUCCEEDED");
    assert!(body["provider_reference"]
        .as_str()
        .unwrap()
        .starts_with("pay_"));
}

#[tokio::test]
async fn a_decline_fails_with_the_providers_code() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let id = stack.pay("decline_card", "declined-1").await;
    let op = stack.wait_for_status(id, "FAILED", SETTLE).await;
    assert!(op.last_error.unwrap().contains("card_declined"));
    assert!(stack.charges_for(id).await.is_empty());
}

#[tokio::test]
async fn an_unreachable_provider_is_retried_then_failed_as_never_reached() {
    let stack = Stack::start(&[]).await;
    // A port that was free a moment ago: connections are refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{closed}");
    let _executor = Executor::start(
        &stack.db.url,
        &url,
        &["--max-attempts", "3", "--retry-base", "20ms"],
    )
    .await;
    let id = stack.pay("cus_nowhere", "unreachable-1").await;
    let op = stack.wait_for_status(id, "FAILED", SETTLE).await;
    assert!(op
        .last_error
        .unwrap()
        .contains("never reached the provider"));
    assert_eq!(op.attempts, 3);
    let trail: Vec<String> = stack
        .db
        .store
        .operation_events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to_status.clone())
        .collect();
    assert_eq!(
        trail,
        [
            "PENDING",
            "IN_PROGRESS",
            "PENDING",
            "IN_PROGRESS",
            "PENDING",
            "IN_PROGRESS",
            "FAILED"
        ]
    );
}

#[tokio::test]
async fn provider_errors_then_health_succeed_with_one_charge() {
    let stack = Stack::start(&["error-before-commit=1.0/2"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--retry-base", "20ms"],
    )
    .await;
    let id = stack.pay("cus_flaky", "flaky-1").await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    assert_eq!(stack.charges_for(id).await.len(), 1);
    assert_eq!(
        stack.requests_for(id).await,
        3,
        "two refused requests and one that charged"
    );
    assert_eq!(op.attempts, 3);
}

#[tokio::test]
async fn a_dropped_response_without_keyed_retries_is_unknown_not_failed() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let id = stack.pay("cus_lost", "lost-1").await;
    let op = stack.wait_for_status(id, "UNKNOWN", SETTLE).await;
    let error = op.last_error.unwrap_or_default();
    assert!(
        error.starts_with("request failed after connecting"),
        "a dropped answer recorded as {error:?}"
    );
    assert_eq!(
        stack.charges_for(id).await.len(),
        1,
        "the provider did charge, once"
    );
    assert_eq!(stack.requests_for(id).await, 1, "nothing was re-sent");
}

#[tokio::test]
async fn a_dropped_response_with_keyed_retries_succeeds_with_one_charge() {
    let stack = Stack::start(&["drop-after-commit=1.0/1"]).await;
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--retry-base", "20ms"],
    )
    .await;
    let id = stack.pay("cus_lost", "lost-2").await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1);
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );
    assert_eq!(
        stack.requests_for(id).await,
        2,
        "re-sent once, with the same key"
    );
}

#[tokio::test]
async fn a_pending_payment_is_left_unknown_for_the_reconciler() {
    let stack = Stack::start(&[]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let reply = post_payment(
        &stack.client,
        &stack.intake.base_url,
        Some(&stack.key),
        Some("pend-1"),
        &payment_body("pending_cus", "i", "3"),
    )
    .await;
    let id = reply.operation_id().parse().unwrap();
    let op = stack.wait_for_status(id, "UNKNOWN", SETTLE).await;
    assert!(op.provider_reference.unwrap().starts_with("pay_"));
}
