//! opgate on Citus (issue 14, docs/scale-out.md): `opgate migrate --citus` against a
//! real coordinator with its workers, when `OPGATE_TEST_CITUS_URL` names one
//! (`make test-citus`); skipped with the reason printed otherwise. The refusal on a
//! database without Citus runs everywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use opgate_e2e::agent_load::{
    assert_all_succeed, assert_charged_once_each, send_payment, stored_ids,
};
use opgate_e2e::citus::{agents_on_every_worker, prepared_transactions, CitusDb};
use opgate_e2e::db::empty_database;
use opgate_e2e::{eventually, opgate, Executor, Intake, ProviderSim};

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
        "held_operations",
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
            "held_operations_operation_fkey",
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
    drop(client);
    db.drop_everywhere().await;
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

/// Agents that retry naively (the same key until they get an answer), a provider that
/// drops a quarter of its answers after committing and fails a tenth after committing,
/// an executor killed with -9 mid-drain, a second executor and a reconciler, all
/// through the coordinator: every payment ends SUCCEEDED and is charged once, and the
/// operations are spread over both workers.
#[tokio::test]
async fn payments_through_the_coordinator_are_charged_exactly_once() {
    let Some((cluster, db)) = CitusDb::migrated(
        "payments_through_the_coordinator_are_charged_exactly_once",
        8,
    )
    .await
    else {
        return;
    };
    let sim = ProviderSim::start(&["drop-after-commit=0.25", "error-after-commit=0.1"]).await;
    let intake = Intake::start(&db.url).await;
    let executor_args = ["--lease", "2s", "--retry-base", "20ms"];
    let doomed = Executor::start(&db.url, &sim.base_url, &executor_args).await;
    let _reconciler = Executor::start_reconciler(&db.url, &sim.base_url, &[]).await;

    const AGENTS_PER_WORKER: usize = 3;
    const PAYMENTS_PER_AGENT: usize = 25;
    let sql = db.sql().await;
    let keys: Vec<String> = agents_on_every_worker(&sql, AGENTS_PER_WORKER)
        .await
        .iter()
        .map(|agent| db.create_agent(agent, &["--allow", "payment"]))
        .collect();
    let http = reqwest::Client::new();
    let agents = keys.iter().enumerate().map(|(n, key)| {
        let (http, base, key) = (http.clone(), intake.base_url.clone(), key.clone());
        async move {
            for i in 0..PAYMENTS_PER_AGENT {
                let idempotency_key = format!("citus-{n}-{i}");
                // Naive: the same request again until something answers 2xx.
                let mut tries = 0;
                while send_payment(&http, &base, &key, "cus_citus", &idempotency_key)
                    .await
                    .operation_id
                    .is_none()
                {
                    tries += 1;
                    assert!(tries < 50, "{idempotency_key} was never accepted");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    let sending = tokio::spawn(futures_util::future::join_all(agents));
    eventually(
        Duration::from_secs(60),
        "the first executor to finish some payments",
        || async {
            let done: i64 = sql
                .query_one(
                    "SELECT count(*) FROM operations WHERE status = 'SUCCEEDED'",
                    &[],
                )
                .await
                .ok()?
                .get(0);
            (done >= 20).then_some(())
        },
    )
    .await;
    doomed.service.kill9().await;
    let _survivor = Executor::start(&db.url, &sim.base_url, &executor_args).await;
    sending.await.unwrap();

    let total = (keys.len() * PAYMENTS_PER_AGENT) as i64;
    assert_all_succeed(&sql, total).await;
    assert_charged_once_each(&sim.ledger().await, &stored_ids(&sql).await);

    let nodes: i64 = sql
        .query_one(
            "SELECT count(DISTINCT p.nodeport)
             FROM (SELECT DISTINCT get_shard_id_for_distribution_column('operations', agent_id) AS shardid
                   FROM operations) s
             JOIN pg_dist_shard_placement p USING (shardid)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(nodes >= 2, "the operations are on {nodes} node(s)");
    drop(sql);
    cluster.drop_everywhere().await;
}

/// The reconciler's claim on Citus: every answer lost after the provider committed, no
/// keyed retries, so every payment is UNKNOWN until the reconciler finds it, agent by
/// agent, on both workers.
#[tokio::test]
async fn the_reconciler_resolves_unknown_payments_on_every_worker() {
    let Some((cluster, db)) = CitusDb::migrated(
        "the_reconciler_resolves_unknown_payments_on_every_worker",
        8,
    )
    .await
    else {
        return;
    };
    let sim = ProviderSim::start(&["drop-after-commit=1.0"]).await;
    let intake = Intake::start(&db.url).await;
    let _executor = Executor::start(&db.url, &sim.base_url, &["--keyed-retries", "false"]).await;
    let _reconciler = Executor::start_reconciler(&db.url, &sim.base_url, &[]).await;
    let sql = db.sql().await;
    let http = reqwest::Client::new();
    for (n, agent) in agents_on_every_worker(&sql, 2).await.iter().enumerate() {
        let key = db.create_agent(agent, &["--allow", "payment"]);
        for i in 0..5 {
            let answer = send_payment(
                &http,
                &intake.base_url,
                &key,
                "cus_lost",
                &format!("lost-{n}-{i}"),
            )
            .await;
            assert!(answer.operation_id.is_some(), "status {}", answer.status);
        }
    }
    assert_all_succeed(&sql, 20).await;
    assert_charged_once_each(&sim.ledger().await, &stored_ids(&sql).await);
    let reconciled: i64 = sql
        .query_one(
            "SELECT count(DISTINCT operation_id) FROM operation_events
             WHERE from_status = 'RECONCILING' AND to_status = 'SUCCEEDED'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        reconciled, 20,
        "every payment was resolved by the reconciler"
    );
    drop(sql);
    cluster.drop_everywhere().await;
}

/// Registrations from agents on both workers at once, through an intake with group
/// commit on (its default): each commits on its agent's node, so the coordinator
/// prepares no two-phase transaction. A replay answers the first operation, a reused
/// key with another request is refused, both without writing, as on one PostgreSQL.
/// Needs a coordinator started with `citus.recover_2pc_interval = -1`, so that
/// nothing clears the record of prepared transactions while the test reads it.
#[tokio::test]
async fn registrations_commit_on_one_node_and_replays_answer_as_on_postgres() {
    let Some((cluster, db)) = CitusDb::migrated(
        "registrations_commit_on_one_node_and_replays_answer_as_on_postgres",
        8,
    )
    .await
    else {
        return;
    };
    let sql = db.sql().await;
    let intake = Intake::start(&db.url).await;
    let agents = agents_on_every_worker(&sql, 2).await;
    // (Creating an agent writes a reference table, on every node: two phases.)
    let keys: Vec<String> = agents
        .iter()
        .map(|agent| db.create_agent(agent, &["--allow", "payment"]))
        .collect();
    let before = prepared_transactions(&sql).await;
    let http = reqwest::Client::new();
    let sends = keys.iter().enumerate().flat_map(|(n, key)| {
        (0..10).map({
            let (http, base) = (http.clone(), intake.base_url.clone());
            move |i| {
                let (http, base, key) = (http.clone(), base.clone(), key.clone());
                async move {
                    send_payment(&http, &base, &key, "cus_2pc", &format!("one-node-{n}-{i}")).await
                }
            }
        })
    });
    let answers = futures_util::future::join_all(sends).await;
    assert!(
        answers.iter().all(|a| a.status == 201 || a.status == 202),
        "statuses: {:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    let after = prepared_transactions(&sql).await;
    assert_eq!(
        after, before,
        "registrations prepared two-phase transactions"
    );

    let replay = send_payment(&http, &intake.base_url, &keys[0], "cus_2pc", "one-node-0-0").await;
    assert!(replay.replayed, "status {}", replay.status);
    assert_eq!(replay.operation_id, answers[0].operation_id);
    let reused = http
        .post(format!("{}/agent/operations/payment", intake.base_url))
        .bearer_auth(&keys[0])
        .header("Idempotency-Key", "one-node-0-0")
        .json(&opgate_e2e::api::payment_body(
            "cus_2pc",
            "another-invoice",
            "99.00",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(reused.status(), 422);
    let stored: i64 = sql
        .query_one("SELECT count(*) FROM operations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        stored, 40,
        "one operation per key, nothing for the replay or the reuse"
    );
    drop(sql);
    cluster.drop_everywhere().await;
}
