//! The idempotency-key lookup must use the (agent_id, idempotency_key) index whatever
//! the statistics say: on a table never analyzed (a new deployment's first minute) the
//! planner once chose another agent_id-led index and cached that plan, and every request
//! read all of the agent's operations. Checked with the generic plan a prepared
//! statement ends up with, on a fresh database and after rows arrive unanalyzed.

use opgate_e2e::db::register_payment;
use opgate_e2e::TestDb;

async fn key_lookup_plan(url: &str) -> String {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "SET plan_cache_mode = force_generic_plan;
             PREPARE lookup(text, text) AS
               SELECT operation_id FROM operations WHERE agent_id = $1 AND idempotency_key = $2",
        )
        .await
        .unwrap();
    let rows = client
        .simple_query("EXPLAIN EXECUTE lookup('agent-plans', 'k-1')")
        .await
        .unwrap();
    rows.iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_key_lookup_uses_the_unique_index_before_any_statistics() {
    let db = TestDb::create().await;
    db.create_agent("agent-plans", &[]);
    let fresh = key_lookup_plan(&db.url).await;
    assert!(
        fresh.contains("operations_agent_idempotency_key"),
        "on a fresh table: {fresh}"
    );
    for i in 0..200 {
        register_payment(&db.store, "agent-plans", &format!("k-{i}"), "1.00").await;
    }
    let filled = key_lookup_plan(&db.url).await;
    assert!(
        filled.contains("operations_agent_idempotency_key"),
        "with unanalyzed rows: {filled}"
    );
}
