//! 24-hour spend budgets, decided by the database: however many payments arrive at
//! once, with intake's group commit on or off, exactly what fits is accepted; a FAILED
//! payment gives its amount back; refunds do not spend. Real intake, executor and
//! provider-sim on a real PostgreSQL.

use std::time::Duration;

use futures_util::future::join_all;
use opgate_e2e::api::{payment_body, post_operation, post_payment, Reply};
use opgate_e2e::{Executor, Intake, ProviderSim, TestDb};
use uuid::Uuid;

const BUDGETED: [&str; 6] = [
    "--allow",
    "payment",
    "--allow",
    "refund",
    "--daily-budget",
    "USD:5000.00",
];

async fn pay(
    client: &reqwest::Client,
    intake: &Intake,
    key: &str,
    customer: &str,
    idem: &str,
) -> Reply {
    let body = payment_body(customer, idem, "1000.00");
    post_payment(client, &intake.base_url, Some(key), Some(idem), &body).await
}

async fn forty_at_once(group_commit: &str) {
    let db = TestDb::create().await;
    let key = db.create_agent("spender", &BUDGETED);
    let intake = Intake::start_with(&db.url, &["--group-commit", group_commit]).await;
    let client = reqwest::Client::new();
    let keys: Vec<String> = (0..40).map(|i| format!("pay-{i}")).collect();
    let replies = join_all(keys.iter().map(|k| pay(&client, &intake, &key, "cus_b", k))).await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    assert_eq!(
        accepted, 5,
        "5 × 1,000.00 fit in 5,000.00 (group commit {group_commit})"
    );
    for refused in replies.iter().filter(|r| r.status != 202) {
        refused.assert_problem(403);
        assert!(refused.body["type"]
            .as_str()
            .unwrap()
            .ends_with("budget-exceeded"));
        let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!(
            retry_after > 23 * 3600,
            "headroom returns as the first payment ages out"
        );
    }
    assert_eq!(
        db.counts().await.operations,
        5,
        "refused payments wrote nothing"
    );
}

#[tokio::test]
async fn forty_concurrent_payments_spend_exactly_the_budget_with_group_commit() {
    forty_at_once("true").await;
}

#[tokio::test]
async fn forty_concurrent_payments_spend_exactly_the_budget_without_group_commit() {
    forty_at_once("false").await;
}

/// Intake batches budgeted registrations: two agents' payments race, every key sent
/// twice at once, so batches mix agents and repeat keys. Each agent still spends
/// exactly its budget, and both copies of a key get the same answer: the one
/// operation, or the refusal.
#[tokio::test]
async fn two_agents_racing_with_every_key_sent_twice_each_spend_exactly_their_budget() {
    let db = TestDb::create().await;
    let agents = [
        db.create_agent("spender-a", &BUDGETED),
        db.create_agent("spender-b", &BUDGETED),
    ];
    let intake = Intake::start_with(&db.url, &["--group-commit", "true"]).await;
    let client = reqwest::Client::new();
    let sends: Vec<(usize, String)> = (0..20)
        .flat_map(|i| [0, 1].map(|agent| (agent, format!("pay-{i}"))))
        .flat_map(|send| [send.clone(), send])
        .collect();
    let replies = join_all(
        sends
            .iter()
            .map(|(agent, idem)| pay(&client, &intake, &agents[*agent], "cus_b", idem)),
    )
    .await;
    for agent in 0..2 {
        let mut accepted = std::collections::HashSet::new();
        for i in 0..20 {
            let idem = format!("pay-{i}");
            let copies: Vec<&Reply> = sends
                .iter()
                .zip(&replies)
                .filter(|((a, k), _)| *a == agent && *k == idem)
                .map(|(_, reply)| reply)
                .collect();
            assert_eq!(copies.len(), 2);
            if copies[0].status == 403 {
                copies[1].assert_problem(403);
                continue;
            }
            let ids: Vec<&str> = copies
                .iter()
                .map(|reply| {
                    assert!(matches!(reply.status, 200 | 202), "{}", reply.body);
                    reply.operation_id()
                })
                .collect();
            assert_eq!(ids[0], ids[1], "agent {agent}, key {idem}: two operations");
            accepted.insert(ids[0].to_owned());
        }
        assert_eq!(
            accepted.len(),
            5,
            "agent {agent}: 5 × 1,000.00 fit in 5,000.00"
        );
    }
    assert_eq!(db.counts().await.operations, 10);
    // Decided together, as batches: a batch PostgreSQL refused is registered again
    // one by one, right but slower, which only this warning would show.
    let logs = intake.service.logs();
    assert!(
        !logs.contains("budgeted batch refused"),
        "a batch fell back to one by one:\n{logs}"
    );
}

/// An agent intake remembers is not read again for its next payment, but the budget
/// that payment is judged against is the one in force: lowered meanwhile, the lower
/// one refuses it.
#[tokio::test]
async fn a_budget_lowered_meanwhile_refuses_the_next_payment_of_a_remembered_agent() {
    let db = TestDb::create().await;
    let key = db.create_agent("spender", &BUDGETED);
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    for i in 0..2 {
        let reply = pay(&client, &intake, &key, "cus_ok", &format!("before-{i}")).await;
        assert_eq!(reply.status, 202, "{}", reply.body);
    }
    opgate_e2e::opgate(
        &db.url,
        &[
            "agents",
            "update",
            "spender",
            "--daily-budget",
            "USD:2500.00",
        ],
    )
    .success();
    let refused = pay(&client, &intake, &key, "cus_ok", "after").await;
    refused.assert_problem(403);
    assert!(refused.body["type"]
        .as_str()
        .unwrap()
        .ends_with("budget-exceeded"));
    assert_eq!(db.counts().await.operations, 2);
}

#[tokio::test]
async fn a_failed_payment_frees_its_headroom_and_refunds_do_not_spend() {
    let db = TestDb::create().await;
    let key = db.create_agent("spender", &BUDGETED);
    let sim = ProviderSim::start(&[]).await;
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..4 {
        let reply = pay(&client, &intake, &key, "cus_ok", &format!("ok-{i}")).await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        ids.push(reply.operation_id().parse::<Uuid>().unwrap());
    }
    let declined = pay(&client, &intake, &key, "decline_me", "declined").await;
    assert_eq!(declined.status, 202);
    pay(&client, &intake, &key, "cus_ok", "sixth")
        .await
        .assert_problem(403);
    // Only now is anything executed, so the decline cannot have failed before "sixth".
    let _executor = Executor::start(&db.url, &sim.base_url, &[]).await;

    let declined: Uuid = declined.operation_id().parse().unwrap();
    opgate_e2e::eventually(Duration::from_secs(20), "the decline to fail", || async {
        let op = db.store.find_operation(declined).await.ok()??;
        (op.status.as_str() == "FAILED").then_some(())
    })
    .await;
    let sixth = pay(&client, &intake, &key, "cus_ok", "sixth-again").await;
    assert_eq!(
        sixth.status, 202,
        "the FAILED payment's 1,000.00 came back: {}",
        sixth.body
    );
    pay(&client, &intake, &key, "cus_ok", "seventh")
        .await
        .assert_problem(403);

    opgate_e2e::eventually(
        Duration::from_secs(20),
        "the first payment to succeed",
        || async {
            let op = db.store.find_operation(ids[0]).await.ok()??;
            (op.status.as_str() == "SUCCEEDED").then_some(())
        },
    )
    .await;
    let refund = post_operation(
        &client,
        &intake.base_url,
        "refund",
        &key,
        "refund-1",
        &serde_json::json!({"payment_operation_id": ids[0]}),
    )
    .await;
    assert_eq!(
        refund.status, 202,
        "a refund spends no budget: {}",
        refund.body
    );
}

/// A budgeted batch waits on its agent's lock while another budgeted batch (here, an
/// operator's transaction) holds it. On the same HTTP worker, another agent's plain
/// payment is not held up behind it: the budgeted batcher has a connection of its own
/// beside the committer's.
#[tokio::test]
async fn a_budgeted_batch_waiting_on_its_agents_lock_holds_up_no_plain_payment() {
    let db = TestDb::create().await;
    let spender = db.create_agent("spender", &BUDGETED);
    let other = db.create_agent("other", &[]);
    let intake = Intake::start_with(&db.url, &["--workers", "1", "--db-timeout", "2s"]).await;
    let client = reqwest::Client::new();

    let mut holder = db.sql().await;
    let lock = holder.transaction().await.unwrap();
    lock.execute(
        "SELECT 1 FROM agents WHERE agent_id = 'spender' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let waiting = {
        let (client, url) = (client.clone(), intake.base_url.clone());
        tokio::spawn(async move {
            let body = payment_body("cus_b", "waits", "10.00");
            post_payment(&client, &url, Some(&spender), Some("waits"), &body).await
        })
    };
    let sql = db.sql().await;
    opgate_e2e::wait::eventually(
        Duration::from_secs(10),
        "the budgeted batch to wait on the lock",
        || async {
            let row = sql
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap();
            (row.get::<_, i64>(0) > 0).then_some(())
        },
    )
    .await;

    let plain = tokio::time::timeout(
        Duration::from_secs(10),
        pay(&client, &intake, &other, "cus_p", "does-not-wait"),
    )
    .await
    .expect("the plain payment was answered");
    assert_eq!(plain.status, 202, "{}", plain.body);
    assert!(
        !waiting.is_finished(),
        "the budgeted payment waits on the lock"
    );

    lock.rollback().await.unwrap();
    let waited = waiting.await.unwrap();
    assert_eq!(waited.status, 202, "{}", waited.body);
}
