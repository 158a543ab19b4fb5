//! Operators work the manual-review queue through the CLI and the admin API; every
//! decision is audited, a second decision is refused, and agent and operator keys
//! cannot stand in for each other.

use std::time::Duration;

use opgate_e2e::api::{payment_body, post_payment};
use opgate_e2e::{opgate, Executor, Reconciler, Stack};
use serde_json::json;
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);

/// Two operations in MANUAL_REVIEW: charged by the provider, answer lost, and the
/// reconciler could not look them up (it was pointed at a closed port).
async fn review_queue(stack: &Stack) -> (Uuid, Uuid) {
    let _executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
    )
    .await;
    let a = stack.pay("cus_review", "review-a").await;
    let b = stack.pay("cus_review", "review-b").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let _reconciler = Reconciler::start_reconciler(
        &stack.db.url,
        &format!("http://{closed}"),
        &["--max-checks", "1"],
    )
    .await;
    stack.wait_for_status(a, "MANUAL_REVIEW", SETTLE).await;
    stack.wait_for_status(b, "MANUAL_REVIEW", SETTLE).await;
    (a, b)
}

#[tokio::test]
async fn operators_resolve_reviews_through_the_cli_and_the_admin_api() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let (by_cli, by_api) = review_queue(&stack).await;
    let reference = stack.charges_for(by_cli).await[0]["payment_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The queue, as an operator sees it.
    let listing = opgate(
        &stack.db.url,
        &["operations", "list", "--status", "MANUAL_REVIEW"],
    )
    .success()
    .stdout;
    assert!(
        listing.contains(&by_cli.to_string()) && listing.contains(&by_api.to_string()),
        "{listing}"
    );
    let json_lines = opgate(
        &stack.db.url,
        &["operations", "list", "--status", "manual_review", "--json"],
    )
    .success()
    .stdout;
    assert_eq!(json_lines.lines().count(), 2);

    // CLI: resolve with the ledger's reference; a second resolve is refused.
    let id = by_cli.to_string();
    opgate(
        &stack.db.url,
        &[
            "operations",
            "resolve",
            &id,
            "--status",
            "SUCCEEDED",
            "--provider-reference",
            &reference,
            "--reason",
            "charge found in the provider dashboard",
            "--operator",
            "ana",
        ],
    )
    .success();
    let again = opgate(
        &stack.db.url,
        &[
            "operations",
            "resolve",
            &id,
            "--status",
            "FAILED",
            "--reason",
            "oops",
            "--operator",
            "bob",
        ],
    );
    assert!(!again.status.success());
    assert!(
        again.stderr.contains("SUCCEEDED, not MANUAL_REVIEW"),
        "{}",
        again.stderr
    );
    let op = stack.operation(by_cli).await;
    assert_eq!(
        (op.status.as_str(), op.provider_reference.as_deref()),
        ("SUCCEEDED", Some(reference.as_str()))
    );
    let shown = opgate(&stack.db.url, &["operations", "show", &id])
        .success()
        .stdout;
    assert!(
        shown.contains("operator:ana") && shown.contains("charge found in the provider dashboard"),
        "{shown}"
    );

    // Admin API: an operator key resolves; the second resolve gets 409.
    let operator_key = opgate(&stack.db.url, &["operators", "create", "carol"])
        .success()
        .stdout
        .trim()
        .to_owned();
    assert!(operator_key.starts_with("opo_"));
    let resolve = |body: serde_json::Value| {
        stack
            .client
            .post(
                stack
                    .intake
                    .url(&format!("/admin/operations/{by_api}/resolve")),
            )
            .bearer_auth(&operator_key)
            .json(&body)
            .send()
    };
    let first = resolve(json!({"status": "FAILED", "reason": "refunded by the provider"}))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let second = resolve(json!({"status": "SUCCEEDED", "reason": "changed my mind"}))
        .await
        .unwrap();
    assert_eq!(second.status(), 409);
    assert_eq!(second.headers()["content-type"], "application/problem+json");
    let invalid = resolve(json!({"status": "MAYBE", "reason": "?"}))
        .await
        .unwrap();
    assert_eq!(invalid.status(), 422);

    let detail: serde_json::Value = stack
        .client
        .get(stack.intake.url(&format!("/admin/operations/{by_api}")))
        .bearer_auth(&operator_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["status"], "FAILED");
    let last = detail["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["from_status"].as_str(), last["to_status"].as_str()),
        (Some("MANUAL_REVIEW"), Some("FAILED"))
    );
    assert_eq!(last["actor"], "operator:carol");
    assert_eq!(last["reason"], "refunded by the provider");

    // The agent sees the operator's decision.
    let agent_view: serde_json::Value = stack
        .client
        .get(stack.intake.url(&format!("/agent/operations/{by_api}")))
        .bearer_auth(&stack.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(agent_view["status"], "FAILED");
}

#[tokio::test]
async fn unsettled_operations_tell_agents_to_wait_not_to_pay_again() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let (id, _) = review_queue(&stack).await;
    let reply = stack
        .client
        .get(stack.intake.url(&format!("/agent/operations/{id}")))
        .bearer_auth(&stack.key)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 202);
    assert_eq!(reply.headers()["retry-after"], "300");
    let body: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(body["status"], "MANUAL_REVIEW");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("Do not submit a new request for it"));
}

#[tokio::test]
async fn agent_keys_cannot_reach_admin_and_operator_keys_cannot_pay() {
    let stack = Stack::start(&[]).await;
    let operator_key = opgate(&stack.db.url, &["operators", "create", "dave"])
        .success()
        .stdout
        .trim()
        .to_owned();
    let admin = |key: Option<String>| {
        let mut request = stack.client.get(stack.intake.url("/admin/operations"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    assert_eq!(admin(None).await.unwrap().status(), 401);
    assert_eq!(admin(Some(stack.key.clone())).await.unwrap().status(), 403);
    assert_eq!(
        admin(Some("opo_0123456789abcdef_".to_string() + &"0".repeat(64)))
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        admin(Some(operator_key.clone())).await.unwrap().status(),
        200
    );

    let before = stack.db.counts().await;
    let reply = post_payment(
        &stack.client,
        &stack.intake.base_url,
        Some(&operator_key),
        Some("op-pay"),
        &payment_body("c", "i", "1"),
    )
    .await;
    reply.assert_problem(403);
    assert_eq!(stack.db.counts().await, before);
}
