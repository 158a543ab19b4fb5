//! Exactly one operation per (agent, Idempotency-Key), however often agents retry and
//! however many requests race.

use std::collections::HashSet;

use futures_util::future::join_all;
use opgate_e2e::api::{get_operation, payment_body, post_payment};
use opgate_e2e::{Intake, TestDb};

/// Many distinct keys at once, with group commit: each request gets its own new
/// operation, and some repeats inside the same burst are answered as replays.
#[tokio::test]
async fn a_burst_of_new_and_repeated_keys_gets_one_answer_each() {
    let db = TestDb::create().await;
    let key = db.create_agent("burst", &[]);
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    // 300 requests over 100 keys, each key three times, interleaved.
    let replies = join_all((0..300).map(|i| {
        let body = payment_body("cus_burst", &format!("inv-{}", i % 100), "3.00");
        let (client, base, key) = (client.clone(), intake.base_url.clone(), key.clone());
        async move {
            post_payment(
                &client,
                &base,
                Some(&key),
                Some(&format!("burst-{}", i % 100)),
                &body,
            )
            .await
        }
    }))
    .await;
    assert!(
        replies.iter().all(|r| r.status == 202),
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let fresh = replies
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(fresh, 100, "one new operation per key");
    for k in 0..100 {
        let ids: HashSet<&str> = replies
            .iter()
            .skip(k)
            .step_by(100)
            .map(|r| r.operation_id())
            .collect();
        assert_eq!(ids.len(), 1, "key burst-{k} named several operations");
    }
    let counts = db.counts().await;
    assert_eq!(
        (counts.operations, counts.outbox, counts.operation_events),
        (100, 100, 100)
    );
}

#[tokio::test]
async fn a_replay_returns_the_same_operation_and_enqueues_nothing() {
    let db = TestDb::create().await;
    let key = db.create_agent("agent-a", &[]);
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    let body = payment_body("cus_1", "inv_1", "250");

    let first = post_payment(&client, &intake.base_url, Some(&key), Some("pay-1"), &body).await;
    assert_eq!(first.status, 202);
    let after_first = db.counts().await;
    for _ in 0..3 {
        let replay =
            post_payment(&client, &intake.base_url, Some(&key), Some("pay-1"), &body).await;
        assert_eq!(replay.status, 202, "{}", replay.body);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.operation_id(), first.operation_id());
        assert_eq!(replay.header("location"), first.header("location"));
    }
    assert_eq!(db.counts().await, after_first, "a replay wrote something");
    assert_eq!((after_first.operations, after_first.outbox), (1, 1));
}

#[tokio::test]
async fn two_hundred_concurrent_identical_requests_make_one_operation() {
    identical_race(&[]).await;
}

#[tokio::test]
async fn two_hundred_concurrent_identical_requests_make_one_operation_without_group_commit() {
    identical_race(&["--group-commit", "false"]).await;
}

async fn identical_race(intake_args: &[&str]) {
    let db = TestDb::create().await;
    let key = db.create_agent("racer", &[]);
    let intake = Intake::start_with(&db.url, intake_args).await;
    let client = reqwest::Client::new();
    let body = payment_body("cus_race", "inv_race", "99.99");

    let replies = join_all((0..200).map(|_| {
        post_payment(
            &client,
            &intake.base_url,
            Some(&key),
            Some("the-one-key"),
            &body,
        )
    }))
    .await;

    let ids: HashSet<&str> = replies.iter().map(|r| r.operation_id()).collect();
    assert_eq!(ids.len(), 1, "responses named {} operations", ids.len());
    assert!(replies.iter().all(|r| r.status == 202));
    let fresh = replies
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(fresh, 1, "exactly one response announces a new operation");
    let counts = db.counts().await;
    assert_eq!(
        (counts.operations, counts.outbox, counts.operation_events),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn racing_two_different_payloads_on_one_key_lets_one_win() {
    payload_race(&[]).await;
}

#[tokio::test]
async fn racing_two_different_payloads_on_one_key_lets_one_win_without_group_commit() {
    payload_race(&["--group-commit", "false"]).await;
}

async fn payload_race(intake_args: &[&str]) {
    let db = TestDb::create().await;
    let key = db.create_agent("racer", &[]);
    let intake = Intake::start_with(&db.url, intake_args).await;
    let client = reqwest::Client::new();
    let bodies = [
        payment_body("cus", "inv", "10.00"),
        payment_body("cus", "inv", "20.00"),
    ];

    let replies = join_all((0..200).map(|i| {
        post_payment(
            &client,
            &intake.base_url,
            Some(&key),
            Some("contested"),
            &bodies[i % 2],
        )
    }))
    .await;

    let winners: Vec<_> = replies.iter().filter(|r| r.status == 202).collect();
    let losers: Vec<_> = replies.iter().filter(|r| r.status == 422).collect();
    assert_eq!(
        winners.len() + losers.len(),
        200,
        "only 202 and 422 (key reused) are expected"
    );
    assert_eq!(
        winners.len(),
        100,
        "every request with the winning payload gets the operation"
    );
    let ids: HashSet<&str> = winners.iter().map(|r| r.operation_id()).collect();
    assert_eq!(ids.len(), 1);
    for loser in &losers {
        loser.assert_problem(422);
        assert_eq!(
            loser.body["type"],
            "urn:opgate:problem:idempotency-key-reused"
        );
    }
    let counts = db.counts().await;
    assert_eq!(
        (counts.operations, counts.outbox, counts.operation_events),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn keys_are_scoped_per_agent_and_operations_are_private() {
    let db = TestDb::create().await;
    let alice = db.create_agent("alice", &[]);
    let bob = db.create_agent("bob", &[]);
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    let base = &intake.base_url;

    let a = post_payment(
        &client,
        base,
        Some(&alice),
        Some("shared-key"),
        &payment_body("c", "i", "1"),
    )
    .await;
    // Bob uses the same key with a different payload: no conflict, his own operation.
    let b = post_payment(
        &client,
        base,
        Some(&bob),
        Some("shared-key"),
        &payment_body("c", "i", "2"),
    )
    .await;
    assert_eq!((a.status, b.status), (202, 202));
    assert_eq!(b.header("idempotent-replayed"), None);
    assert_ne!(a.operation_id(), b.operation_id());
    assert_eq!(db.counts().await.operations, 2);
    // Each agent's key names that agent's own request.
    for (reply, agent, amount) in [(&a, "alice", "1.00"), (&b, "bob", "2.00")] {
        let id = reply.operation_id().parse().unwrap();
        let stored = db.store.find_operation(id).await.unwrap().unwrap();
        assert_eq!(
            (
                stored.agent_id.as_str(),
                stored.amount.map(|a| a.to_string())
            ),
            (agent, Some(amount.to_owned()))
        );
    }

    // Bob cannot see Alice's operation, and the answer is the same as for no operation.
    get_operation(&client, base, &bob, a.operation_id())
        .await
        .assert_problem(404);
    let mine = get_operation(&client, base, &alice, a.operation_id()).await;
    assert_eq!(mine.status, 202, "{}", mine.body);
    assert_eq!(mine.body["operation_id"], a.operation_id());
    assert_eq!(mine.body["operation_type"], "payment");
    assert_eq!(mine.body["status"], "PENDING");
    assert_eq!(mine.body["created_at"], a.body["created_at"]);
}
