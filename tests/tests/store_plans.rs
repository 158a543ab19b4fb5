//! The idempotency-key lookup must use the unique (idempotency_key, agent_id) index whatever
//! the statistics say: on a table never analyzed (a new deployment's first minute) the
//! planner once chose another agent_id-led index and cached that plan, and every request
//! read all of the agent's operations. Checked with the generic plan a prepared
//! statement ends up with, on a fresh database and after rows arrive unanalyzed.
//! The group commit's statement likewise: it must keep one plan at all, and that plan
//! must probe the same index, also when it was made right after an ANALYZE of a small
//! table (intake's connections refuse sequential scans for that). The executor's and the
//! reconciler's claims keep walking their indexes however the tables grew, and their
//! fenced transitions keep one plan too. The foreign-key checks of every inserted
//! outbox and audit row have only the primary key to use.

use std::time::Duration;

use opgate_e2e::db::{new_operation, payment_request, register_payment};
use opgate_e2e::TestDb;
use opgate_store::{PendingRegistration, PoolSettings, Store};

async fn key_lookup_plan(url: &str) -> String {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    generic_plan(
        &client,
        "SELECT operation_id FROM operations WHERE agent_id = $1 AND idempotency_key = $2",
        "'agent-plans', 'k-1'",
    )
    .await
}

/// The generic plan PostgreSQL keeps for `statement`, explained for `arguments` (SQL
/// literals).
async fn generic_plan(client: &tokio_postgres::Client, statement: &str, arguments: &str) -> String {
    client
        .batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE explained AS {statement}"
        ))
        .await
        .unwrap();
    let plan = client
        .simple_query(&format!("EXPLAIN EXECUTE explained({arguments})"))
        .await
        .unwrap()
        .iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    client
        .batch_execute("DEALLOCATE explained; RESET plan_cache_mode")
        .await
        .unwrap();
    plan
}

/// How often this connection planned the prepared `statement` generically, and how
/// often again for the values at hand.
async fn plans_of(client: &tokio_postgres::Client, statement: &str) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements
             WHERE statement = $1",
            &[&statement],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
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

/// The group commit's statement, run as intake runs it (one connection, batches of one
/// row), `times` times with fresh keys; then its generic plan and how often PostgreSQL
/// planned it again for the values at hand.
async fn run_batches_of_one(url: &str, agent: &str, times: usize) -> (i64, i64, String) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let statement = client.prepare(opgate_store::REGISTER_BATCH).await.unwrap();
    for i in 0..times {
        let payload = serde_json::json!({"amount": "1.00", "currency": "USD"});
        client
            .query(
                &statement,
                &[
                    &vec![uuid::Uuid::now_v7()],
                    &vec![agent],
                    &vec![format!("batch-{i}")],
                    &vec!["payment"],
                    &vec!["provider-sim"],
                    &vec!["0".repeat(64)],
                    &vec![payload],
                    &vec![None::<&str>],
                    &vec![Some(rust_decimal::Decimal::ONE)],
                    &vec![Some("USD")],
                    &vec![None::<&str>],
                    &vec![None::<i64>],
                ],
            )
            .await
            .unwrap();
    }
    let (generic, custom) = plans_of(&client, opgate_store::REGISTER_BATCH).await;
    let plan = generic_plan(
        &client,
        opgate_store::REGISTER_BATCH,
        &format!(
            "'{{{id}}}', '{{{agent}}}', '{{k-explained}}', '{{payment}}', '{{provider-sim}}',
             '{{0}}', ARRAY['{{}}'::jsonb], '{{NULL}}', '{{1.00}}', '{{USD}}', '{{NULL}}',
             '{{NULL}}'",
            id = uuid::Uuid::now_v7()
        ),
    )
    .await;
    (generic, custom, plan)
}

/// A batch of one costs about what the single registration does only if PostgreSQL
/// keeps one plan for the statement: planning it again for each batch cost more than
/// running it (0.5-0.6 ms against 0.4). And the plan it keeps must find a
/// key's existing operation through the unique index even though it was made while
/// `operations` was nearly empty, as on a new deployment.
#[tokio::test]
async fn the_group_commit_statement_is_planned_once_and_probes_the_key_index() {
    let db = TestDb::create().await;
    db.create_agent("agent-batches", &[]);
    let (generic, custom, plan) = run_batches_of_one(&db.url, "agent-batches", 12).await;
    assert!(
        generic >= 6,
        "generic plans {generic}, custom plans {custom}: planned again per batch"
    );
    for i in 0..300 {
        register_payment(&db.store, "agent-batches", &format!("more-{i}"), "1.00").await;
    }
    let (_, _, plan_filled) = run_batches_of_one(&db.url, "agent-batches", 1).await;
    for plan in [plan, plan_filled] {
        assert!(
            plan.contains("Index Scan using operations_agent_idempotency_key"),
            "{plan}"
        );
        assert!(!plan.contains("Seq Scan on operations"), "{plan}");
    }
}

/// The fenced transition (every executor completion, every reconciler verdict), run as
/// the executor runs it: one connection refusing sequential scans, one transition per
/// statement, on a table that holds rows and was analyzed. A custom plan that could
/// count the transitions always looked cheaper than the generic one, and PostgreSQL
/// planned the statement again on every execution (0.5-0.6 ms of the executor's
/// completion, each time). The plan it keeps finds each operation by its key.
#[tokio::test]
async fn the_fenced_transition_is_planned_once_and_finds_operations_by_key() {
    let db = TestDb::create().await;
    db.create_agent("agent-transitions", &[]);
    let client = service_connection_after(&db, "agent-transitions", 500).await;
    let statement = client.prepare(opgate_store::TRANSITION).await.unwrap();
    for _ in 0..12 {
        // No operation has this id: nothing is written, but the statement is planned.
        client
            .query(
                &statement,
                &[
                    &vec![uuid::Uuid::now_v7()],
                    &vec![1_i64],
                    &vec!["IN_PROGRESS"],
                    &vec!["SUCCEEDED"],
                    &vec![Some("pay_1")],
                    &vec![None::<&str>],
                    &vec!["provider answered"],
                    &vec![0.0_f64],
                    &"executor:plans",
                    &vec!["agent-transitions"],
                ],
            )
            .await
            .unwrap();
    }
    let (generic, custom) = plans_of(&client, opgate_store::TRANSITION).await;
    assert!(
        generic >= 6,
        "generic plans {generic}, custom plans {custom}: planned again per transition"
    );
    let plan = generic_plan(
        &client,
        opgate_store::TRANSITION,
        &format!(
            "'{{{id}}}', '{{1}}', '{{IN_PROGRESS}}', '{{SUCCEEDED}}', '{{pay_1}}', '{{NULL}}',
             '{{r}}', '{{0}}', 'executor:plans', '{{agent-transitions}}'",
            id = uuid::Uuid::now_v7()
        ),
    )
    .await;
    assert!(plan.contains("Index Scan using operations_pkey"), "{plan}");
    assert!(!plan.contains("Seq Scan on operations"), "{plan}");
}

/// The read that authenticates an agent's request, as intake runs it on one connection:
/// with an Idempotency-Key (a registration it may answer as a replay) and without one
/// (a `GET` of an operation, a listing, an MCP read). With the key NULL the combined
/// statement's custom plan folded the operation's lookup away and always looked
/// cheaper than the generic plan, so every poll of an operation was planned again
/// (0.11 ms of planning against 0.016 ms of executing); a read now has its own
/// statement. Both keep one plan.
#[tokio::test]
async fn the_agent_reads_are_planned_once() {
    let db = TestDb::create().await;
    let key = db.create_agent("agent-reads", &[]);
    let key_id = key.split('_').nth(1).unwrap().to_owned();
    let client = service_connection_after(&db, "agent-reads", 300).await;
    let read = client.prepare(opgate_store::AGENT_FOR_READ).await.unwrap();
    let with_key = client
        .prepare(opgate_store::AGENT_WITH_EXISTING_OPERATION)
        .await
        .unwrap();
    for i in 0..12 {
        let agent = client.query_one(&read, &[&key_id]).await.unwrap();
        assert_eq!(agent.get::<_, String>("agent_agent_id"), "agent-reads");
        let replay = client
            .query_one(&with_key, &[&key_id, &format!("agent-reads-{i}")])
            .await
            .unwrap();
        assert!(replay
            .get::<_, Option<uuid::Uuid>>("operation_id")
            .is_some());
    }
    for statement in [
        opgate_store::AGENT_FOR_READ,
        opgate_store::AGENT_WITH_EXISTING_OPERATION,
    ] {
        let (generic, custom) = plans_of(&client, statement).await;
        assert!(
            generic >= 6,
            "generic plans {generic}, custom plans {custom}: planned again per request\n{statement}"
        );
    }
}

/// A connection as the services make theirs (sequential scans refused), once `agent`
/// has `payments` operations stored and the tables were analyzed: the state in which a
/// custom plan can look cheaper than the generic one.
async fn service_connection_after(
    db: &TestDb,
    agent: &str,
    payments: usize,
) -> tokio_postgres::Client {
    for i in 0..payments {
        register_payment(&db.store, agent, &format!("{agent}-{i}"), "1.00").await;
    }
    let client = db.sql().await;
    client
        .batch_execute("ANALYZE; SET enable_seqscan = off")
        .await
        .unwrap();
    client
}

/// Every outbox and audit row inserted makes a foreign-key check on operations
/// (`operation_id = $1 AND agent_id = $2`), planned once per connection. While the
/// unique (agent_id, idempotency_key) index led with agent_id, it served that check as
/// cheaply as the primary key on a nearly empty table, and a connection could keep the
/// plan that walked the agent's operations: in `make bench`-like runs on a new database
/// about half of the budgeted runs fell to 400-800 registrations a second within twelve
/// seconds (4,500-6,000 in the others), the key index read 23 million entries for 40,000
/// checks
/// (auto_explain, pg_stat_user_indexes). So no index of operations that such a check
/// can use may lead with agent_id but the primary key; a partial index can't serve it.
#[tokio::test]
async fn no_index_but_the_primary_key_serves_a_lookup_by_operation_and_agent() {
    let db = TestDb::create().await;
    let rows = db
        .sql()
        .await
        .query(
            "SELECT i.indexrelid::regclass::text, a.attname::text, i.indpred IS NOT NULL
             FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
             WHERE i.indrelid = 'operations'::regclass AND NOT i.indisprimary",
            &[],
        )
        .await
        .unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let (index, leading, partial): (String, String, bool) =
            (row.get(0), row.get(1), row.get(2));
        assert!(
            partial || leading != "agent_id",
            "{index} leads with {leading}: a foreign-key check could keep a plan through it"
        );
    }
}

/// One batch of one registration through `store` (intake's group commit).
async fn register_one(store: &Store, agent: &str, key: &str) {
    let request = payment_request(key, "1.00");
    let key = opgate_domain::IdempotencyKey::parse(key).unwrap();
    let pending = PendingRegistration::from_new(&new_operation(agent, &key, &request));
    store.register_batch(&[pending]).await.unwrap();
}

/// The sequential and index scans so far of `table` (and its partitions), once the
/// cumulative statistics show at least `inserted` rows inserted and `scans` scans of
/// either kind. A backend reports its counts when it goes idle, at most once a second
/// (else ten seconds later): so each store answers one more statement after a
/// second's pause.
async fn scans_of(
    table: &str,
    sql: &tokio_postgres::Client,
    stores: &[&Store],
    inserted: i64,
    scans: i64,
) -> (i64, i64) {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for store in stores {
        store.ping().await.unwrap();
    }
    for _ in 0..150 {
        let row = sql
            .query_one(
                "SELECT pg_stat_clear_snapshot()::text, sum(seq_scan)::bigint,
                        sum(coalesce(idx_scan, 0))::bigint, sum(n_tup_ins)::bigint
                 FROM pg_stat_user_tables WHERE relname = $1 OR relname LIKE $1 || '\\_s%'",
                &[&table],
            )
            .await
            .unwrap();
        let (counted, rows): ((i64, i64), i64) = ((row.get(1), row.get(2)), row.get(3));
        if rows >= inserted && counted.0 + counted.1 >= scans {
            return counted;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the statistics never showed {inserted} inserts and {scans} scans");
}

/// A store as intake and the executor connect (`avoid_sequential_scans`), on one
/// connection so that every statement shares its plans.
fn one_connection_refusing_sequential_scans(url: &str) -> Store {
    let settings = PoolSettings {
        max_connections: 1,
        avoid_sequential_scans: true,
        ..PoolSettings::default()
    };
    Store::connect(url, &settings).unwrap()
}

/// A new deployment: `operations` is analyzed while it holds a handful of rows, intake's
/// connection settles on its generic plan then, and the table grows before the next
/// ANALYZE. Each registration still finds its key through the index, not by scanning
/// the table it no longer fits.
#[tokio::test]
async fn intake_keeps_probing_the_key_index_after_an_analyze_of_a_small_table() {
    let db = TestDb::create().await;
    db.create_agent("agent-small", &[]);
    let sql = db.sql().await;
    for i in 0..5 {
        register_payment(&db.store, "agent-small", &format!("first-{i}"), "1.00").await;
    }
    sql.batch_execute("ANALYZE operations").await.unwrap();
    let intake = one_connection_refusing_sequential_scans(&db.url);
    for i in 0..8 {
        register_one(&intake, "agent-small", &format!("settle-{i}")).await;
    }
    for i in 0..500 {
        register_payment(&db.store, "agent-small", &format!("grown-{i}"), "1.00").await;
    }
    let before = scans_of("operations", &sql, &[&db.store, &intake], 5 + 8 + 500, 0).await;
    // Ten replays (the key's lookup) and ten new operations (the lookup, and the
    // foreign-key checks of their outbox and audit rows).
    for i in 0..10 {
        register_one(&intake, "agent-small", &format!("grown-{i}")).await;
        register_one(&intake, "agent-small", &format!("new-{i}")).await;
    }
    let after = scans_of(
        "operations",
        &sql,
        &[&intake],
        5 + 8 + 500 + 10,
        before.0 + before.1 + 40,
    )
    .await;
    assert_eq!(
        after.0, before.0,
        "sequential scans of operations: {before:?} -> {after:?}"
    );
}

/// The executor's claim likewise: its plan made while the outbox was empty and
/// analyzed still walks the due index once thousands of events are queued, instead of
/// reading and sorting the whole outbox on every claim.
#[tokio::test]
async fn the_executor_claims_through_the_due_index_after_an_analyze_of_an_empty_outbox() {
    let db = TestDb::create().await;
    db.create_agent("agent-claims", &[]);
    let sql = db.sql().await;
    sql.batch_execute("ANALYZE outbox").await.unwrap();
    let executor = one_connection_refusing_sequential_scans(&db.url);
    let lease = Duration::from_secs(30);
    for _ in 0..8 {
        let claimed = executor
            .claim_due_operations("plans", lease, 4)
            .await
            .unwrap();
        assert!(claimed.is_empty());
    }
    for i in 0..500 {
        register_payment(&db.store, "agent-claims", &format!("queued-{i}"), "1.00").await;
    }
    let before = scans_of("outbox", &sql, &[&db.store, &executor], 500, 0).await;
    let mut claimed = 0;
    for _ in 0..10 {
        claimed += executor
            .claim_due_operations("plans", lease, 4)
            .await
            .unwrap()
            .len();
    }
    assert_eq!(claimed, 40);
    let after = scans_of("outbox", &sql, &[&executor], 500, before.0 + before.1 + 10).await;
    assert_eq!(
        after.0, before.0,
        "sequential scans of the outbox: {before:?} -> {after:?}"
    );
}

/// The reconciler's claim likewise, through held_operations (V15): its plan made while
/// that table was empty and analyzed still walks the due index once hundreds of
/// operations are UNKNOWN (a provider's outage), and finds each operation by its key.
#[tokio::test]
async fn the_reconciler_claims_through_the_held_index_after_an_analyze_of_an_empty_table() {
    let db = TestDb::create().await;
    db.create_agent("agent-held-plans", &[]);
    let sql = db.sql().await;
    sql.batch_execute("ANALYZE held_operations; ANALYZE operations")
        .await
        .unwrap();
    let reconciler = one_connection_refusing_sequential_scans(&db.url);
    let lease = Duration::from_secs(30);
    for _ in 0..8 {
        let claimed = reconciler
            .claim_due_reconciliations("plans", lease, 4)
            .await
            .unwrap();
        assert!(claimed.is_empty());
    }
    for i in 0..300 {
        register_payment(&db.store, "agent-held-plans", &format!("lost-{i}"), "1.00").await;
    }
    // As the executor leaves them when the provider's answers are lost.
    sql.batch_execute(
        "DELETE FROM outbox;
         UPDATE operations SET status = 'UNKNOWN', next_attempt_at = now() - interval '1 second'",
    )
    .await
    .unwrap();
    let before_held = scans_of("held_operations", &sql, &[&db.store, &reconciler], 300, 0).await;
    let before_ops = scans_of("operations", &sql, &[&reconciler], 300, 0).await;
    let mut claimed = 0;
    for _ in 0..10 {
        claimed += reconciler
            .claim_due_reconciliations("plans", lease, 4)
            .await
            .unwrap()
            .len();
    }
    assert_eq!(claimed, 40);
    let after_held = scans_of(
        "held_operations",
        &sql,
        &[&reconciler],
        300,
        before_held.0 + before_held.1 + 10,
    )
    .await;
    let after_ops = scans_of("operations", &sql, &[&reconciler], 300, 0).await;
    assert_eq!(
        (after_held.0, after_ops.0),
        (before_held.0, before_ops.0),
        "sequential scans of held_operations {before_held:?} -> {after_held:?}, \
         of operations {before_ops:?} -> {after_ops:?}"
    );
}
