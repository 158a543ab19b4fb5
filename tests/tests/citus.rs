//! opgate on Citus (issue 14, docs/scale-out.md): `opgate migrate --citus` against a
//! real coordinator with its workers, when `OPGATE_TEST_CITUS_URL` names one
//! (`make test-citus`); skipped with the reason printed otherwise. The refusal on a
//! database without Citus runs everywhere.

use std::collections::BTreeMap;

use opgate_e2e::citus::CitusDb;
use opgate_e2e::db::empty_database;
use opgate_e2e::opgate;

/// How each table opgate placed is placed: (method, distribution column, co-location).
async fn placement(client: &tokio_postgres::Client) -> BTreeMap<String, (String, String, i32)> {
    client
        .query(
            "SELECT logicalrelid::regclass::text, partmethod::text,
                    COALESCE(column_to_column_name(logicalrelid, partkey), ''), colocationid
             FROM pg_dist_partition",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2), row.get(3))))
        .collect()
}

#[tokio::test]
async fn migrate_citus_distributes_every_per_operation_table_by_agent_once() {
    let Some(db) =
        CitusDb::create("migrate_citus_distributes_every_per_operation_table_by_agent_once").await
    else {
        return;
    };
    let first = opgate(&db.url, &["migrate", "--citus", "--shard-count", "8"]).success();
    assert!(
        first
            .stderr
            .contains("placed agents, operators, operations"),
        "{}",
        first.stderr
    );

    let client = db.client().await;
    let placed = placement(&client).await;
    for reference in ["agents", "operators"] {
        assert_eq!(
            placed[reference].0, "n",
            "{reference} is a reference table: {placed:?}"
        );
    }
    let anchor = &placed["operations"];
    for table in [
        "operations",
        "outbox",
        "outbox_s0",
        "outbox_s3",
        "operation_events",
        "agent_spend",
    ] {
        let (method, column, colocation) = &placed[table];
        assert_eq!(
            (method.as_str(), column.as_str(), colocation),
            ("h", "agent_id", &anchor.2),
            "{table} is distributed by agent_id, co-located with operations"
        );
    }
    let workers_with_shards: i64 = client
        .query_one(
            "SELECT count(DISTINCT p.nodeport) FROM pg_dist_shard s
             JOIN pg_dist_shard_placement p USING (shardid)
             WHERE s.logicalrelid = 'operations'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        workers_with_shards >= 2,
        "operations' shards are on {workers_with_shards} node(s)"
    );
    let shards: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'operations'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(shards, 8, "--shard-count");

    // The foreign keys came back, now between co-located tables.
    let foreign_keys: Vec<String> = client
        .query(
            "SELECT conname::text FROM pg_constraint
             WHERE contype = 'f' AND conparentid = 0 AND connamespace = 'public'::regnamespace
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        foreign_keys,
        [
            "agent_spend_agent_id_fkey",
            "operation_events_operation_fkey",
            "operations_agent_id_fkey",
            "outbox_operation_fkey"
        ]
    );

    let again = opgate(&db.url, &["migrate", "--citus"]).success();
    assert!(
        again.stderr.contains("migrations applied: 0")
            && again.stderr.contains("every table already in place"),
        "{}",
        again.stderr
    );
    assert_eq!(
        placement(&client).await,
        placed,
        "the second run changed nothing"
    );
}

#[tokio::test]
async fn migrate_citus_on_a_database_without_citus_says_so_and_writes_nothing() {
    let url = empty_database().await;
    let refused = opgate(&url, &["migrate", "--citus"]);
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("no citus extension"),
        "{}",
        refused.stderr
    );
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "no migration ran");
}
