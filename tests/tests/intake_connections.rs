//! intake holds no more database connections than its flags say: `--db-connections`
//! for reads and unbatched writes, plus `--group-commit-committers` and one for its
//! budgeted batches for each HTTP worker (each worker commits its own registrations),
//! plus the one that listens for settlements. Real intake under concurrent load, real PostgreSQL.

use futures_util::future::join_all;
use opgate_e2e::api::{get_operation, payment_body, post_payment};
use opgate_e2e::{Intake, TestDb};

const WORKERS: usize = 2;
const READ_CONNECTIONS: usize = 2;
const COMMITTERS: usize = 2;
const REQUESTS: usize = 48;

#[tokio::test]
async fn under_concurrent_load_intake_stays_within_its_connections() {
    let db = TestDb::create().await;
    let key = db.create_agent("agent", &["--allow", "payment"]);
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}application_name=intake-under-test", db.url);
    let intake = Intake::start_with(
        &url,
        &[
            "--workers",
            &WORKERS.to_string(),
            "--db-connections",
            &READ_CONNECTIONS.to_string(),
            "--group-commit-committers",
            &COMMITTERS.to_string(),
        ],
    )
    .await;
    let client = reqwest::Client::new();

    let post = |i: usize| {
        let (client, base, key) = (&client, &intake.base_url, &key);
        async move {
            let body = payment_body("cus_1", &format!("inv_{i}"), "1.00");
            post_payment(client, base, Some(key), Some(&format!("k{i}")), &body).await
        }
    };
    let created = join_all((0..REQUESTS).map(post)).await;
    let mut ids = Vec::new();
    for reply in &created {
        assert_eq!(reply.status, 202, "{}", reply.body);
        ids.push(reply.body["operation_id"].as_str().unwrap().to_owned());
    }
    let replayed = join_all((0..REQUESTS).map(post)).await;
    for (reply, id) in replayed.iter().zip(&ids) {
        assert_eq!(reply.status, 202, "{}", reply.body);
        assert_eq!(reply.headers["idempotent-replayed"], "true");
        assert_eq!(reply.body["operation_id"], id.as_str());
    }
    let read = join_all(
        ids.iter()
            .map(|id| get_operation(&client, &intake.base_url, &key, id)),
    )
    .await;
    for (reply, id) in read.iter().zip(&ids) {
        assert_eq!(reply.body["operation_id"], id.as_str(), "{}", reply.body);
        assert_eq!(reply.body["status"], "PENDING");
    }

    let sql = db.sql().await;
    let operations: i64 = sql
        .query_one("SELECT count(*) FROM operations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(operations, REQUESTS as i64);
    // The pools keep what they opened, so this is the most intake held at once.
    let held: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'intake-under-test'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let bound = READ_CONNECTIONS + WORKERS * (COMMITTERS + 1) + 1;
    assert!(
        (1..=bound as i64).contains(&held),
        "intake holds {held} connections; its flags allow {bound}"
    );
}
