//! An agent's life after `create`: `opgate agents update` changes its kinds and limits
//! and a running intake applies them to its next request (a rate limit is checked on a
//! fresh intake, the running one re-reads it within 30 s); `opgate agents rotate` gives
//! it a new key, with the old one refused at once or at the end of a grace period; a
//! revoked agent's keys are all refused. Real opgate CLI, real intake, real PostgreSQL.

use std::time::Duration;

use opgate_e2e::api::{get_operation, payment_body, post_operation, post_payment, Reply};
use opgate_e2e::{eventually, opgate, Intake, TestDb};

async fn pay(intake: &Intake, key: &str, invoice: &str, amount: &str) -> Reply {
    let client = reqwest::Client::new();
    post_payment(
        &client,
        &intake.base_url,
        Some(key),
        Some(invoice),
        &payment_body("cus_life", invoice, amount),
    )
    .await
}

/// The status of reading the operation: 200 or 202 once authenticated, else 401.
async fn read(intake: &Intake, key: &str, operation_id: &str) -> u16 {
    let status = get_operation(&reqwest::Client::new(), &intake.base_url, key, operation_id)
        .await
        .status;
    if status == 202 {
        200
    } else {
        status
    }
}

fn update(db: &TestDb, agent: &str, args: &[&str]) -> String {
    let mut all = vec!["agents", "update", agent];
    all.extend_from_slice(args);
    let output = opgate(&db.url, &all).success();
    assert!(
        output.stdout.is_empty(),
        "update printed {:?}",
        output.stdout
    );
    output.stderr
}

fn rotate(db: &TestDb, agent: &str, args: &[&str]) -> String {
    let mut all = vec!["agents", "rotate", agent];
    all.extend_from_slice(args);
    let key = opgate(&db.url, &all).success().stdout.trim().to_owned();
    assert!(key.starts_with("opg_"), "unexpected key output {key:?}");
    key
}

#[tokio::test]
async fn an_update_applies_to_the_running_intakes_next_request() {
    let db = TestDb::create().await;
    let key = db.create_agent(
        "changing",
        &[
            "--allow",
            "payment",
            "--allow",
            "refund",
            "--max-amount",
            "USD:1000.00",
        ],
    );
    let intake = Intake::start(&db.url).await;
    assert_eq!(pay(&intake, &key, "before", "500.00").await.status, 202);

    // Payment no longer granted: refused at once, by the same intake.
    let stderr = update(&db, "changing", &["--allow", "refund"]);
    assert!(stderr.contains("allowed refund"), "{stderr}");
    assert!(!stderr.contains(&key), "update printed the key");
    pay(&intake, &key, "no-kind", "1.00")
        .await
        .assert_problem(403);

    // A lower maximum: the rest of the settings (the kinds just set) are kept.
    let stderr = update(
        &db,
        "changing",
        &["--allow", "payment", "--max-amount", "USD:10.00"],
    );
    assert!(stderr.contains("USD:10.00"), "{stderr}");
    pay(&intake, &key, "above-max", "50.00")
        .await
        .assert_problem(403);
    assert_eq!(pay(&intake, &key, "below-max", "5.00").await.status, 202);

    // An approval threshold: above it, the operation waits for an operator.
    update(&db, "changing", &["--approval-above", "USD:6.00"]);
    let waiting = pay(&intake, &key, "above-threshold", "8.00").await;
    assert_eq!(waiting.status, 202, "{}", waiting.body);
    assert_eq!(waiting.body["status"], "AWAITING_APPROVAL");
    let under = pay(&intake, &key, "under-threshold", "4.00").await;
    assert_eq!(under.body["status"], "PENDING", "{}", under.body);

    // A daily budget: 500 + 5 + 8 + 4 already spent today.
    let stderr = update(&db, "changing", &["--daily-budget", "USD:525.00"]);
    assert!(stderr.contains("USD:525.00/24h"), "{stderr}");
    let over = pay(&intake, &key, "over-budget", "9.00").await;
    over.assert_problem(403);
    assert!(over.body["type"]
        .as_str()
        .unwrap()
        .ends_with("budget-exceeded"));
    assert_eq!(pay(&intake, &key, "in-budget", "3.00").await.status, 202);

    // Clearing keeps nothing of that setting and nothing else changes.
    let stderr = update(
        &db,
        "changing",
        &[
            "--clear-daily-budgets",
            "--clear-approval-above",
            "--clear-max-amounts",
        ],
    );
    assert!(stderr.contains("limits -"), "{stderr}");
    let big = pay(&intake, &key, "unlimited", "900.00").await;
    assert_eq!(big.body["status"], "PENDING", "{}", big.body);
}

#[tokio::test]
async fn an_updated_rate_limit_holds_on_a_fresh_intake_and_can_be_removed() {
    let db = TestDb::create().await;
    let key = db.create_agent("throttled", &[]);
    let stderr = update(
        &db,
        "throttled",
        &["--rate-limit", "1/m", "--rate-limit-burst", "2"],
    );
    assert!(stderr.contains("1/m burst 2"), "{stderr}");
    let listed = opgate(&db.url, &["agents", "list"]).success().stdout;
    assert!(listed.contains("1/m burst 2"), "{listed}");

    let intake = Intake::start(&db.url).await;
    for i in 0..2 {
        assert_eq!(
            pay(&intake, &key, &format!("r{i}"), "1.00").await.status,
            202
        );
    }
    pay(&intake, &key, "r2", "1.00").await.assert_problem(429);
    drop(intake);

    update(&db, "throttled", &["--no-rate-limit"]);
    let intake = Intake::start(&db.url).await;
    for i in 0..5 {
        let reply = pay(&intake, &key, &format!("free{i}"), "1.00").await;
        assert_eq!(reply.status, 202, "{}", reply.body);
    }
}

#[tokio::test]
async fn updating_an_unknown_or_revoked_agent_or_with_a_bad_setting_fails_in_one_line() {
    let db = TestDb::create().await;
    db.create_agent("gone", &[]);
    opgate(&db.url, &["agents", "revoke", "gone"]).success();
    for agent in ["ghost", "gone"] {
        let failed = opgate(&db.url, &["agents", "update", agent, "--allow", "payment"]);
        assert!(!failed.status.success());
        assert_eq!(failed.stderr.trim().lines().count(), 1, "{}", failed.stderr);
        assert!(
            failed.stderr.contains("no active agent"),
            "{}",
            failed.stderr
        );
    }

    db.create_agent("kept", &["--max-amount", "USD:10.00"]);
    for bad in [
        &["--allow", "teleport"][..],
        &["--max-amount", "USD:ten"],
        &["--rate-limit", "5/h"],
        &["--max-amount", "USD:1.00", "--clear-max-amounts"],
        &[],
    ] {
        let mut args = vec!["agents", "update", "kept"];
        args.extend_from_slice(bad);
        let failed = opgate(&db.url, &args);
        assert!(!failed.status.success(), "{bad:?} was accepted");
    }
    let listed = opgate(&db.url, &["agents", "list"]).success().stdout;
    let row = listed.lines().find(|l| l.starts_with("kept")).unwrap();
    assert!(
        row.contains("payment") && row.contains("USD:10.00"),
        "{row}"
    );
}

#[tokio::test]
async fn a_rotation_without_grace_refuses_the_old_key_at_once() {
    let db = TestDb::create().await;
    let old = db.create_agent("rotating", &[]);
    let intake = Intake::start(&db.url).await;
    let reply = pay(&intake, &old, "before", "1.00").await;
    assert_eq!(reply.status, 202);
    let id = reply.operation_id().to_owned();

    let new = rotate(&db, "rotating", &[]);
    assert_ne!(new, old);
    pay(&intake, &old, "old-key", "1.00")
        .await
        .assert_problem(401);
    assert_eq!(read(&intake, &old, &id).await, 401);
    assert_eq!(pay(&intake, &new, "new-key", "1.00").await.status, 202);
    assert_eq!(read(&intake, &new, &id).await, 200);
    // The same agent: a replay with the new key answers the old key's operation.
    let replay = pay(&intake, &new, "before", "1.00").await;
    assert_eq!(replay.operation_id(), id);

    let listed = opgate(&db.url, &["agents", "list"]).success().stdout;
    let new_key_id = new.split('_').nth(1).unwrap();
    assert!(listed.contains(new_key_id), "{listed}");
    assert!(!listed.contains(new.rsplit('_').next().unwrap()));
}

#[tokio::test]
async fn during_the_grace_both_keys_work_then_only_the_new_one() {
    let db = TestDb::create().await;
    let old = db.create_agent("graceful", &[]);
    let intake = Intake::start(&db.url).await;
    let reply = pay(&intake, &old, "before", "1.00").await;
    let id = reply.operation_id().to_owned();

    let new = rotate(&db, "graceful", &["--grace", "2s"]);
    assert_eq!(pay(&intake, &old, "old-in-grace", "1.00").await.status, 202);
    assert_eq!(pay(&intake, &new, "new-in-grace", "1.00").await.status, 202);
    assert_eq!(read(&intake, &old, &id).await, 200);

    eventually(Duration::from_secs(15), "the old key to expire", || async {
        (read(&intake, &old, &id).await == 401).then_some(())
    })
    .await;
    pay(&intake, &old, "old-after-grace", "1.00")
        .await
        .assert_problem(401);
    assert_eq!(read(&intake, &new, &id).await, 200);
    assert_eq!(pay(&intake, &new, "new-after", "1.00").await.status, 202);

    // A fresh intake (no cached limiter state) agrees.
    let fresh = Intake::start(&db.url).await;
    assert_eq!(read(&fresh, &old, &id).await, 401);
    assert_eq!(read(&fresh, &new, &id).await, 200);
}

#[tokio::test]
async fn a_revoked_agent_is_refused_with_its_new_and_its_previous_key() {
    let db = TestDb::create().await;
    let old = db.create_agent("revoked-rotating", &["--rate-limit", "100/s"]);
    let intake = Intake::start(&db.url).await;
    let id = pay(&intake, &old, "before", "1.00")
        .await
        .operation_id()
        .to_owned();
    let new = rotate(&db, "revoked-rotating", &["--grace", "10m"]);
    assert_eq!(read(&intake, &old, &id).await, 200);
    assert_eq!(read(&intake, &new, &id).await, 200);

    opgate(&db.url, &["agents", "revoke", "revoked-rotating"]).success();
    for key in [&old, &new] {
        assert_eq!(read(&intake, key, &id).await, 401);
        pay(&intake, key, "after-revoke", "1.00")
            .await
            .assert_problem(401);
    }
    let again = opgate(&db.url, &["agents", "rotate", "revoked-rotating"]);
    assert!(!again.status.success());
    assert!(again.stdout.is_empty(), "a failed rotation printed a key");
    assert_eq!(again.stderr.trim().lines().count(), 1, "{}", again.stderr);
}

/// A refund's transaction reads its payment. Sent at once after a revocation, while the
/// intake still remembers the agent, the same transaction finds the agent's row changed
/// before it answers anything, and the refund is judged on a fresh read: 401, not the
/// 404 or 409 its payment's state would answer.
#[tokio::test]
async fn a_refund_sent_right_after_a_revocation_learns_nothing_of_its_payment() {
    let db = TestDb::create().await;
    let key = db.create_agent(
        "revoked-refunder",
        &["--allow", "payment", "--allow", "refund"],
    );
    let intake = Intake::start(&db.url).await;
    let paid = pay(&intake, &key, "paid", "5.00").await;
    assert_eq!(paid.status, 202, "{}", paid.body);
    let pending = paid.operation_id().to_owned();

    opgate(&db.url, &["agents", "revoke", "revoked-refunder"]).success();
    let client = reqwest::Client::new();
    // The unknown payment first: the fresh read that refuses it also forgets the agent.
    for payment in ["01900000-0000-7000-8000-000000000000", pending.as_str()] {
        let body = serde_json::json!({"payment_operation_id": payment, "amount": "1.00"});
        let key_name = format!("refund-{payment}");
        post_operation(&client, &intake.base_url, "refund", &key, &key_name, &body)
            .await
            .assert_problem(401);
    }
}
