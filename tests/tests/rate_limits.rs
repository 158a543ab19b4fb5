//! Per-agent rate limits: one agent's burst is cut off with 429s (and the RateLimit
//! headers), while another agent's requests at the same moment all go through, and a
//! refused request writes nothing. Real intake, real PostgreSQL.

use futures_util::future::join_all;
use opgate_e2e::api::{payment_body, post_payment, Reply};
use opgate_e2e::{Intake, TestDb};

async fn burst(
    client: &reqwest::Client,
    intake: &Intake,
    key: &str,
    prefix: &str,
    n: usize,
) -> Vec<Reply> {
    let requests: Vec<(String, serde_json::Value)> = (0..n)
        .map(|i| {
            let idempotency_key = format!("{prefix}-{i}");
            let body = payment_body("cus_rate", &idempotency_key, "1.00");
            (idempotency_key, body)
        })
        .collect();
    join_all(requests.iter().map(|(idempotency_key, body)| {
        post_payment(
            client,
            &intake.base_url,
            Some(key),
            Some(idempotency_key),
            body,
        )
    }))
    .await
}

#[tokio::test]
async fn one_agents_burst_is_limited_while_another_agent_is_served() {
    let db = TestDb::create().await;
    let limited = db.create_agent(
        "limited",
        &["--rate-limit", "1/m", "--rate-limit-burst", "5"],
    );
    let free = db.create_agent("free", &[]);
    let listed = opgate_e2e::opgate(&db.url, &["agents", "list"])
        .success()
        .stdout;
    assert!(listed.contains("1/m burst 5"), "{listed}");
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();

    let (limited_replies, free_replies) = tokio::join!(
        burst(&client, &intake, &limited, "limited", 20),
        burst(&client, &intake, &free, "free", 20)
    );
    let accepted = limited_replies.iter().filter(|r| r.status == 202).count();
    assert_eq!(accepted, 5, "a burst of 5 at 1 a minute");
    for refused in limited_replies.iter().filter(|r| r.status != 202) {
        refused.assert_problem(429);
        assert!(refused.body["type"]
            .as_str()
            .unwrap()
            .ends_with("rate-limited"));
        let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        assert_eq!(
            refused.header("ratelimit-policy"),
            Some("\"agent\";q=1;w=60")
        );
        assert!(refused
            .header("ratelimit")
            .unwrap()
            .starts_with("\"agent\";r=0;t="));
    }
    assert!(
        free_replies.iter().all(|r| r.status == 202),
        "the other agent is not limited"
    );
    assert_eq!(
        db.counts().await.operations,
        25,
        "refused requests wrote nothing"
    );

    // Known now: the next burst is refused from memory, and still writes nothing.
    let again = burst(&client, &intake, &limited, "again", 10).await;
    assert!(again.iter().all(|r| r.status == 429));
    assert_eq!(db.counts().await.operations, 25);
}
