//! The database stops under a running intake: requests get 503 with Retry-After and
//! nothing half-written; once it is back, requests succeed without restarting intake.

use opgate_e2e::api::{payment_body, post_payment};
use opgate_e2e::{Intake, PgCluster, TestDb};

#[tokio::test]
async fn intake_answers_503_while_the_database_is_down_and_recovers_by_itself() {
    let cluster = PgCluster::start();
    let db = TestDb::create_on(&cluster.admin_url()).await;
    let key = db.create_agent("agent", &[]);
    let intake = Intake::start_with(&db.url, &["--db-timeout-secs", "1"]).await;
    let client = reqwest::Client::new();
    let base = &intake.base_url;

    let before = post_payment(
        &client,
        base,
        Some(&key),
        Some("before"),
        &payment_body("c", "i", "1"),
    )
    .await;
    assert_eq!(before.status, 202);

    cluster.stop_server();
    for attempt in ["during-1", "during-2"] {
        let reply = post_payment(
            &client,
            base,
            Some(&key),
            Some(attempt),
            &payment_body("c", "i", "2"),
        )
        .await;
        reply.assert_problem(503);
        assert!(
            reply.header("retry-after").is_some(),
            "503 without Retry-After"
        );
    }
    let ready = client.get(intake.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(
        client
            .get(intake.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    cluster.start_server();
    let after = post_payment(
        &client,
        base,
        Some(&key),
        Some("during-1"),
        &payment_body("c", "i", "2"),
    )
    .await;
    assert_eq!(after.status, 202, "{}", after.body);
    assert_eq!(
        after.header("idempotent-replayed"),
        None,
        "the refused request left a row behind"
    );
    let counts = db.counts().await;
    assert_eq!(
        (counts.operations, counts.outbox, counts.operation_events),
        (2, 2, 2)
    );
    assert_eq!(
        client
            .get(intake.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
