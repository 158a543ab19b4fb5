//! The store's statements by their behaviour, called as the services call them on a
//! real database, with no timing involved: a claim skips what another claim holds
//! without waiting for it (SKIP LOCKED), and a key already taken is answered as a
//! replay or refused as reused by every registration path.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use opgate_domain::{IdempotencyKey, OperationRequest, PaymentRequest};
use opgate_e2e::TestDb;
use opgate_store::{
    AgentCheck, BatchAnswer, BudgetedRegistration, NewOperation, PendingBudgeted,
    PendingRegistration, Registration, StoreError, TableCounts,
};
use rust_decimal::Decimal;
use uuid::Uuid;

const AGENT: &str = "agent-store";

fn payment(key: &str, amount: &str) -> OperationRequest {
    PaymentRequest::parse("cus_1", &format!("inv_{key}"), amount, None)
        .unwrap()
        .to_operation_request()
}

fn new_operation<'a>(key: &'a IdempotencyKey, request: &'a OperationRequest) -> NewOperation<'a> {
    NewOperation {
        operation_id: Uuid::new_v4(),
        agent_id: AGENT,
        idempotency_key: key,
        request,
        provider: opgate_domain::OPGATE_HTTP_PROVIDER,
        awaiting_approval_for: None,
        trace_context: None,
    }
}

async fn register(db: &TestDb, key: &str) -> Uuid {
    let request = payment(key, "10.00");
    let key = IdempotencyKey::parse(key).unwrap();
    match db
        .store
        .register_operation(&new_operation(&key, &request))
        .await
        .unwrap()
    {
        Registration::Created(record) => record.operation_id,
        other => panic!("expected a new operation, got {other:?}"),
    }
}

/// The executor's claim statement (as `make bench` runs it: the same SQL, returning the
/// claimed ids as one array) for `owner`, `batch` events at most.
fn claim_statement(owner: u32, batch: u32) -> String {
    let script = opgate_store::bench_sql::claim_and_complete(batch);
    let claim = script.lines().next().unwrap();
    claim
        .trim_end_matches("\\gset")
        .replace(":client_id", &owner.to_string())
}

/// Runs `claim` and fails the moment any session of the test database waits for a
/// lock: a claim must skip what another holds, never queue behind it.
async fn without_waiting<T>(db: &TestDb, what: &str, claim: impl Future<Output = T>) -> T {
    let watcher = db.sql().await;
    let waiting = async {
        loop {
            let waits: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if waits > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        claimed = claim => claimed,
        _ = waiting => panic!("{what} waited for a row another claim holds"),
    }
}

#[tokio::test]
async fn claimers_skip_the_rows_another_claim_holds_and_neither_waits() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &[]);
    let a = register(&db, "key-a").await;
    let b = register(&db, "key-b").await;

    // The first claimer: the claim statement in a transaction left open, so it holds
    // the row it claimed (the first due: a) as any claim does until it commits.
    let first = db.sql().await;
    first.batch_execute("BEGIN").await.unwrap();
    let held = without_waiting(&db, "the first claim", async {
        first.query_one(&claim_statement(1, 1), &[]).await.unwrap()
    })
    .await;
    let held: Vec<Uuid> = held.get("ids");
    assert_eq!(held, [a]);

    // The second claimer takes what is left, without waiting for the first.
    let lease = Duration::from_secs(30);
    let second = without_waiting(
        &db,
        "the second claim",
        db.store.claim_due_operations("claimer-2", lease, 10),
    )
    .await
    .unwrap();
    let second: Vec<Uuid> = second.iter().map(|c| c.operation_id).collect();
    assert_eq!(second, [b]);
    // And a third finds nothing it may take, at once.
    let third = without_waiting(
        &db,
        "the third claim",
        db.store.claim_due_operations("claimer-3", lease, 10),
    )
    .await
    .unwrap();
    assert!(third.is_empty(), "{third:?}");

    first.batch_execute("COMMIT").await.unwrap();
    let claimed: HashSet<Uuid> = held.into_iter().chain(second).collect();
    assert_eq!(claimed, HashSet::from([a, b]), "each claimed once");
    for (id, owner) in [(a, "pgbench-1"), (b, "claimer-2")] {
        let row = db
            .sql()
            .await
            .query_one(
                "SELECT status, lease_owner FROM operations WHERE operation_id = $1",
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!(
            (row.get::<_, String>(0), row.get::<_, String>(1)),
            ("IN_PROGRESS".to_owned(), owner.to_owned())
        );
    }
}

/// Registers the key once, then checks that `again` (another registration of the same
/// key) answers a replay of the same request and refuses a different one, writing
/// nothing either way. Intake answers replays from its own read first, so without
/// calling the store directly these answers are reached only when requests race.
async fn replay_or_reuse<F, Fut>(again: F)
where
    F: Fn(TestDb, &'static str) -> Fut,
    Fut: Future<Output = (TestDb, Registration)>,
{
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--daily-budget", "USD:1000.00"]);
    let first = register(&db, "taken").await;
    let before: TableCounts = db.counts().await;

    let (db, same) = again(db, "10.00").await;
    match same {
        Registration::Replayed(record) => {
            assert_eq!(record.operation_id, first);
            assert_eq!(record.amount, Some(Decimal::new(1000, 2)));
        }
        other => panic!("the same request again: expected a replay, got {other:?}"),
    }
    let (db, different) = again(db, "20.00").await;
    assert_eq!(different, Registration::KeyReused);
    assert_eq!(
        db.counts().await,
        before,
        "a replay or a reuse wrote something"
    );
    let stored = db.store.find_operation(first).await.unwrap().unwrap();
    assert_eq!(stored.amount, Some(Decimal::new(1000, 2)));
}

#[tokio::test]
async fn a_taken_key_is_a_replay_or_reused_for_a_single_registration() {
    replay_or_reuse(|db, amount| async move {
        let request = payment("taken", amount);
        let key = IdempotencyKey::parse("taken").unwrap();
        let answer = db
            .store
            .register_operation(&new_operation(&key, &request))
            .await
            .unwrap();
        (db, answer)
    })
    .await;
}

#[tokio::test]
async fn a_taken_key_is_a_replay_or_reused_in_a_group_commit_batch() {
    replay_or_reuse(|db, amount| async move {
        let request = payment("taken", amount);
        let key = IdempotencyKey::parse("taken").unwrap();
        let pending = PendingRegistration::from_new(&new_operation(&key, &request));
        let mut answers = db.store.register_batch(&[pending]).await.unwrap();
        match answers.remove(0) {
            BatchAnswer::Registered(answer) => (db, answer),
            BatchAnswer::Unconfirmed => panic!("a registration without a check was unconfirmed"),
        }
    })
    .await;
}

#[tokio::test]
async fn a_taken_key_is_a_replay_or_reused_for_a_budgeted_registration() {
    replay_or_reuse(|db, amount| async move {
        let request = payment("taken", amount);
        let key = IdempotencyKey::parse("taken").unwrap();
        let answer = db
            .store
            .register_within_budget(&new_operation(&key, &request), Decimal::new(100_000, 2))
            .await
            .unwrap();
        match answer {
            BudgetedRegistration::Registered(registration) => (db, registration),
            other => panic!("within the budget: {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn a_claim_from_a_cursor_starts_there_and_a_full_claim_finds_what_came_due_before_it() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &[]);
    let lease = Duration::from_secs(30);
    let mut ids = Vec::new();
    for key in ["cursor-a", "cursor-b", "cursor-c", "cursor-d"] {
        ids.push(register(&db, key).await);
    }
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    let claimed = |ops: &[opgate_store::ClaimedOperation]| -> Vec<Uuid> {
        ops.iter().map(|op| op.operation_id).collect()
    };

    let first = db
        .store
        .claim_due_operations("claimer", lease, 1)
        .await
        .unwrap();
    assert_eq!(claimed(&first), [a]);
    let second = db
        .store
        .claim_due_operations_from("claimer", lease, 1, first[0].position)
        .await
        .unwrap();
    assert_eq!(claimed(&second), [b]);
    assert!(
        second[0].position > first[0].position,
        "positions follow the claim order"
    );
    // a's lease ends at once: a is due again, before the cursor.
    db.sql()
        .await
        .execute(
            "UPDATE outbox SET claimed_until = now() - interval '1 second' WHERE operation_id = $1",
            &[&a],
        )
        .await
        .unwrap();

    let third = db
        .store
        .claim_due_operations_from("claimer", lease, 1, second[0].position)
        .await
        .unwrap();
    assert_eq!(claimed(&third), [c], "a claim from the cursor starts there");
    let full = db
        .store
        .claim_due_operations("claimer", lease, 10)
        .await
        .unwrap();
    assert_eq!(
        claimed(&full).into_iter().collect::<HashSet<_>>(),
        HashSet::from([a, d]),
        "a full claim finds a again, and d"
    );
}

/// The budgeted registration is sent as one pipeline (BEGIN, the agent's lock, the
/// statement, COMMIT). A statement that fails inside it is the error reported (not the
/// "transaction aborted" of the requests after it), nothing of it is written, and its
/// connection goes on to the next registration outside any transaction.
#[tokio::test]
async fn a_budgeted_registration_that_fails_writes_nothing_and_its_connection_goes_on() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--daily-budget", "USD:1000.00"]);
    let one_connection = opgate_store::PoolSettings {
        max_connections: 1,
        ..Default::default()
    };
    let store = opgate_store::Store::connect(&db.url, &one_connection).unwrap();
    let budget = Decimal::new(100_000, 2);
    let spent = || async {
        let row = db
            .sql()
            .await
            .query_one("SELECT COALESCE(sum(amount), 0) FROM agent_spend", &[])
            .await
            .unwrap();
        row.get::<_, Decimal>(0)
    };
    let before = db.counts().await;
    let sql = db.sql().await;
    sql.batch_execute("ALTER TABLE agent_spend ADD CONSTRAINT refused_in_test CHECK (amount < 5)")
        .await
        .unwrap();
    let request = payment("pipelined", "10.00");
    let key = IdempotencyKey::parse("pipelined").unwrap();
    let failed = store
        .register_within_budget(&new_operation(&key, &request), budget)
        .await
        .unwrap_err();
    assert!(failed.to_string().contains("23514"), "{failed}");
    assert_eq!(db.counts().await, before, "the failed registration wrote");
    assert_eq!(spent().await, Decimal::ZERO);

    sql.batch_execute("ALTER TABLE agent_spend DROP CONSTRAINT refused_in_test")
        .await
        .unwrap();
    // Above the approval threshold: registered, counted, waiting, with nothing enqueued.
    let mut awaiting = new_operation(&key, &request);
    awaiting.awaiting_approval_for = Some(Duration::from_secs(3600));
    let record = match store
        .register_within_budget(&awaiting, budget)
        .await
        .unwrap()
    {
        BudgetedRegistration::Registered(Registration::Created(record)) => record,
        other => panic!("on the same connection, after the failure: {other:?}"),
    };
    assert_eq!(record.status.as_str(), "AWAITING_APPROVAL");
    assert_eq!(spent().await, Decimal::new(1000, 2));
    let after = db.counts().await;
    assert_eq!(after.outbox, before.outbox, "enqueued before its approval");
    let row = sql
        .query_one(
            "SELECT o.counted_in_budget, o.approval_expires_at > now() + interval '59 minutes',
                    e.reason
             FROM operations o JOIN operation_events e USING (operation_id)
             WHERE o.operation_id = $1",
            &[&record.operation_id],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "not counted: it would not give back");
    assert!(
        row.get::<_, bool>(1),
        "its approval expires within the hour"
    );
    assert_eq!(row.get::<_, String>(2), "registered; awaiting approval");
}

/// The batch registers an agent intake remembers (authenticated without reading its
/// row) only while the row is the version intake read and accepts the key id: after a
/// policy change, a rotation without grace and a revocation, each registration is
/// unconfirmed with nothing written, even one checked against the row as it is now.
/// A confirmed replay is answered by the statement itself.
#[tokio::test]
async fn a_checked_registration_is_written_only_while_the_agents_row_is_as_read() {
    let db = TestDb::create().await;
    let key = db.create_agent(AGENT, &[]);
    let key_id = |key: &str| key.split('_').nth(1).unwrap().to_owned();
    let sql = db.sql().await;
    let row_version = || async {
        let row = sql
            .query_one(
                "SELECT xmin::text::bigint FROM agents WHERE agent_id = $1",
                &[&AGENT],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let checked = |name: &str, amount: &str, key: &str, row_version: i64| {
        let idempotency_key = IdempotencyKey::parse(name).unwrap();
        let request = payment(name, amount);
        PendingRegistration::from_new(&new_operation(&idempotency_key, &request)).checked_against(
            AgentCheck {
                key_id: key_id(key),
                row_version,
            },
        )
    };

    let read = db
        .store
        .find_agent_request_context(&key_id(&key), None)
        .await
        .unwrap()
        .unwrap()
        .row_version
        .unwrap();
    assert_eq!(read, row_version().await);
    let answers = db
        .store
        .register_batch(&[
            checked("checked-new", "10.00", &key, read),
            checked("checked-stale", "10.00", &key, read - 1),
        ])
        .await
        .unwrap();
    let created = match &answers[0] {
        BatchAnswer::Registered(Registration::Created(record)) => record.operation_id,
        other => panic!("the version read: expected a new operation, got {other:?}"),
    };
    assert!(
        matches!(answers[1], BatchAnswer::Unconfirmed),
        "another version: {:?}",
        answers[1]
    );
    let before = db.counts().await;
    let again = db
        .store
        .register_batch(&[
            checked("checked-new", "10.00", &key, read),
            checked("checked-new", "20.00", &key, read),
        ])
        .await
        .unwrap();
    assert!(
        matches!(&again[0], BatchAnswer::Registered(Registration::Replayed(r)) if r.operation_id == created),
        "{:?}",
        again[0]
    );
    assert!(
        matches!(again[1], BatchAnswer::Registered(Registration::KeyReused)),
        "{:?}",
        again[1]
    );

    let unconfirmed = |pending: PendingRegistration, after: &'static str| {
        let store = db.store.clone();
        async move {
            let answers = store.register_batch(&[pending]).await.unwrap();
            assert!(
                matches!(answers[0], BatchAnswer::Unconfirmed),
                "{after}: {:?}",
                answers[0]
            );
        }
    };
    opgate_e2e::opgate(
        &db.url,
        &["agents", "update", AGENT, "--max-amount", "USD:50.00"],
    )
    .success();
    unconfirmed(checked("after", "10.00", &key, read), "a policy change").await;

    let rotated = opgate_e2e::opgate(&db.url, &["agents", "rotate", AGENT]).success();
    let new_key = rotated.stdout.trim().to_owned();
    let now = row_version().await;
    unconfirmed(checked("after", "10.00", &key, now), "the old key, rotated").await;
    assert_eq!(
        db.counts().await,
        before,
        "a replay or an unconfirmed registration wrote"
    );
    assert_eq!(
        answered(
            db.store
                .register_batch(&[checked("new-key", "1.00", &new_key, now)])
                .await
        ),
        "created",
        "the new key, on the row as it is now"
    );

    let before = db.counts().await;
    opgate_e2e::opgate(&db.url, &["agents", "revoke", AGENT]).success();
    let now = row_version().await;
    unconfirmed(checked("after", "10.00", &new_key, now), "a revocation").await;
    assert_eq!(
        db.counts().await,
        before,
        "an unconfirmed registration wrote"
    );
}

fn answered(answers: Result<Vec<BatchAnswer>, opgate_store::StoreError>) -> &'static str {
    match answers.unwrap().remove(0) {
        BatchAnswer::Registered(Registration::Created(_)) => "created",
        BatchAnswer::Registered(_) => "taken",
        BatchAnswer::Unconfirmed => "unconfirmed",
    }
}

/// The spending of each agent in `agent_spend`, by agent.
async fn spent_by_agent(db: &TestDb) -> Vec<(String, Decimal)> {
    let rows = db
        .sql()
        .await
        .query(
            "SELECT agent_id, sum(amount) FROM agent_spend GROUP BY agent_id ORDER BY agent_id",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

fn budgeted(
    agent: &'static str,
    key: &IdempotencyKey,
    request: &OperationRequest,
) -> PendingBudgeted {
    let new = NewOperation {
        agent_id: agent,
        ..new_operation(key, request)
    };
    PendingBudgeted::from_new(&new, Decimal::new(100_000, 2))
}

fn created(answer: &Result<BudgetedRegistration, StoreError>) -> Uuid {
    match answer {
        Ok(BudgetedRegistration::Registered(Registration::Created(record))) => record.operation_id,
        other => panic!("expected a new operation, got {other:?}"),
    }
}

/// A budgeted batch is one transaction in which each registration sees the ones before
/// it: what fits is accepted in order, a key taken earlier in the batch is a replay or
/// reused, and each agent spends against its own budget (1,000.00 each here).
#[tokio::test]
async fn a_budgeted_batch_registers_in_order_each_seeing_the_ones_before_it() {
    const OTHER: &str = "agent-store-other";
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--daily-budget", "USD:1000.00"]);
    db.create_agent(OTHER, &["--daily-budget", "USD:1000.00"]);
    let stored_id = register(&db, "stored").await;
    let keys = ["first", "too-much", "fits", "other-agent", "stored"]
        .map(|k| IdempotencyKey::parse(k).unwrap());
    let [first, too_much, fits, other, stored] = &keys;
    let (six, four, nine, ten) = (
        payment("first", "600.00"),
        payment("fits", "400.00"),
        payment("other", "900.00"),
        payment("stored", "10.00"),
    );
    // Above its approval threshold: counted, waiting, not enqueued.
    let awaiting = NewOperation {
        agent_id: OTHER,
        awaiting_approval_for: Some(Duration::from_secs(3600)),
        ..new_operation(other, &nine)
    };
    let batch = [
        budgeted(AGENT, first, &six),
        PendingBudgeted::from_new(&awaiting, Decimal::new(100_000, 2)),
        budgeted(AGENT, too_much, &six),
        budgeted(AGENT, fits, &four),
        budgeted(AGENT, first, &six),
        budgeted(AGENT, first, &four),
        budgeted(AGENT, stored, &ten),
    ];
    let answers = db.store.register_budgeted_batch(&batch).await.unwrap();
    assert_eq!(answers.len(), batch.len());
    let first_id = created(&answers[0]);
    let awaiting_id = created(&answers[1]);
    match &answers[2] {
        Ok(BudgetedRegistration::Exceeded { spent, .. }) => {
            assert_eq!(
                *spent,
                Decimal::new(60_000, 2),
                "the first counted before it"
            )
        }
        other => panic!("600.00 over 600.00 spent of 1,000.00: {other:?}"),
    }
    created(&answers[3]);
    match &answers[4] {
        Ok(BudgetedRegistration::Registered(Registration::Replayed(record))) => {
            assert_eq!(record.operation_id, first_id)
        }
        other => panic!("the first request again: expected its replay, got {other:?}"),
    }
    assert!(
        matches!(
            &answers[5],
            Ok(BudgetedRegistration::Registered(Registration::KeyReused))
        ),
        "the first key with another amount: {:?}",
        answers[5]
    );
    match &answers[6] {
        Ok(BudgetedRegistration::Registered(Registration::Replayed(record))) => {
            assert_eq!(record.operation_id, stored_id)
        }
        other => panic!("a key stored before the batch: expected its replay, got {other:?}"),
    }
    let counts = db.counts().await;
    assert_eq!(
        (counts.operations, counts.outbox),
        (4, 3),
        "the one stored before, three new, one of them awaiting approval"
    );
    let sql = db.sql().await;
    let reason = sql
        .query_one(
            "SELECT o.status, e.reason FROM operations o JOIN operation_events e USING (operation_id)
             WHERE o.operation_id = $1",
            &[&awaiting_id],
        )
        .await
        .unwrap();
    assert_eq!(
        (reason.get::<_, String>(0), reason.get::<_, String>(1)),
        (
            "AWAITING_APPROVAL".to_owned(),
            "registered; awaiting approval".to_owned()
        )
    );
    let transactions = sql
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM operations WHERE operation_id <> $1",
            &[&stored_id],
        )
        .await
        .unwrap();
    assert_eq!(
        transactions.get::<_, i64>(0),
        1,
        "written by one transaction"
    );
    assert_eq!(
        spent_by_agent(&db).await,
        [
            (AGENT.to_owned(), Decimal::new(100_000, 2)),
            (OTHER.to_owned(), Decimal::new(90_000, 2))
        ]
    );
}

/// A registration the database refuses fails alone: the batch's transaction rolls back
/// and each member is registered again on its own.
#[tokio::test]
async fn a_budgeted_batch_member_that_fails_fails_alone() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &["--daily-budget", "USD:1000.00"]);
    db.sql()
        .await
        .batch_execute("ALTER TABLE operations ADD CONSTRAINT refused_in_test CHECK (idempotency_key <> 'refused')")
        .await
        .unwrap();
    let keys = ["before", "refused", "after"].map(|k| IdempotencyKey::parse(k).unwrap());
    let requests = keys.each_ref().map(|key| payment(key.as_str(), "100.00"));
    let batch: Vec<PendingBudgeted> = keys
        .iter()
        .zip(&requests)
        .map(|(key, request)| budgeted(AGENT, key, request))
        .collect();
    let answers = db.store.register_budgeted_batch(&batch).await.unwrap();
    let (before, after) = (created(&answers[0]), created(&answers[2]));
    let failed = answers[1].as_ref().unwrap_err();
    assert!(failed.to_string().contains("23514"), "{failed}");
    let stored: HashSet<Uuid> = db
        .sql()
        .await
        .query("SELECT operation_id FROM operations", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(stored, HashSet::from([before, after]));
    assert_eq!(
        spent_by_agent(&db).await,
        [(AGENT.to_owned(), Decimal::new(20_000, 2))],
        "the refused one spent nothing"
    );
}

/// A budgeted registration by an agent intake remembers is written, or answered from a
/// stored operation, only while the agent's row is the version intake read: checked
/// under the agent's lock, in the batch's transaction, alone or with others. After a
/// budget change each is unconfirmed with nothing written.
#[tokio::test]
async fn a_checked_budgeted_registration_is_written_only_while_the_agents_row_is_as_read() {
    let db = TestDb::create().await;
    let key = db.create_agent(AGENT, &["--daily-budget", "USD:1000.00"]);
    let AgentCheck {
        key_id,
        row_version: read,
    } = db.agent_check(&key).await;
    let keys = ["alone", "current", "stale"].map(|k| IdempotencyKey::parse(k).unwrap());
    let requests = keys.each_ref().map(|k| payment(k.as_str(), "100.00"));
    let checked = |index: usize, row_version: i64| {
        budgeted(AGENT, &keys[index], &requests[index]).checked_against(AgentCheck {
            key_id: key_id.clone(),
            row_version,
        })
    };
    let alone = db
        .store
        .register_budgeted_batch(&[checked(0, read)])
        .await
        .unwrap();
    let alone_id = created(&alone[0]);
    let answers = db
        .store
        .register_budgeted_batch(&[checked(1, read), checked(2, read - 1), checked(0, read - 1)])
        .await
        .unwrap();
    created(&answers[0]);
    for (index, answer) in answers.iter().enumerate().skip(1) {
        assert!(
            matches!(answer, Ok(BudgetedRegistration::Unconfirmed)),
            "another version ({index}): {answer:?}"
        );
    }
    assert_eq!(db.counts().await.operations, 2);

    opgate_e2e::opgate(
        &db.url,
        &["agents", "update", AGENT, "--daily-budget", "USD:150.00"],
    )
    .success();
    let before = db.counts().await;
    let after_change = db
        .store
        .register_budgeted_batch(&[checked(2, read), checked(0, read)])
        .await
        .unwrap();
    for answer in &after_change {
        assert!(
            matches!(answer, Ok(BudgetedRegistration::Unconfirmed)),
            "after a budget change: {answer:?}"
        );
    }
    assert_eq!(
        db.counts().await,
        before,
        "an unconfirmed registration wrote"
    );
    let stored = db.store.find_operation(alone_id).await.unwrap().unwrap();
    assert_eq!(stored.operation_id, alone_id);
}
