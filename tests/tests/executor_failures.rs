//! The executor through crashes, stalls, database restarts and shutdowns: every
//! operation still ends with exactly one charge.

use std::time::Duration;

use opgate_e2e::{eventually, Executor, PgCluster, Stack, TestDb};

const SETTLE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn kill_9_mid_call_lets_another_executor_finish_with_one_charge() {
    let stack = Stack::start(&["delay-ms=1500"]).await;
    let first = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "1s"]).await;
    let id = stack.pay("cus_crash", "crash-1").await;
    let owner = first.owner().to_owned();
    // Wait until the first executor holds the operation and its call is under way.
    eventually(SETTLE, "the first executor to claim", || async {
        let events = stack.db.store.operation_events(id).await.ok()?;
        events
            .iter()
            .any(|e| e.actor == owner && e.to_status == "IN_PROGRESS")
            .then_some(())
    })
    .await;
    eventually(SETTLE, "the call to reach the provider", || async {
        (stack.requests_for(id).await >= 1).then_some(())
    })
    .await;
    first.service.kill9().await;

    let _second = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "1s"]).await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    assert_eq!(stack.charges_for(id).await.len(), 1, "charged twice");
    let takeover = stack.db.store.operation_events(id).await.unwrap();
    assert!(
        takeover
            .iter()
            .any(|e| e.reason.as_deref() == Some("lease expired; taken over")),
        "{takeover:?}"
    );
    assert_eq!(op.attempts, 2);
}

#[tokio::test]
async fn a_stalled_executors_late_write_is_rejected_by_the_fencing_token() {
    let stack = Stack::start(&["delay-ms=600"]).await;
    let stalled = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "1s"]).await;
    let id = stack.pay("cus_stale", "stale-1").await;
    let stalled_owner = stalled.owner().to_owned();
    let stalled_token = eventually(SETTLE, "the first executor to claim", || async {
        let events = stack.db.store.operation_events(id).await.ok()?;
        events
            .iter()
            .find(|e| e.actor == stalled_owner && e.to_status == "IN_PROGRESS")
            .and_then(|e| e.fencing_token)
    })
    .await;
    stalled.service.signal("STOP");

    let _fresh = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "1s"]).await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    stalled.service.signal("CONT");

    let rejected = eventually(
        SETTLE,
        "the stalled executor's write to be refused",
        || async {
            let events = stack.db.store.operation_events(id).await.ok()?;
            events
                .into_iter()
                .find(|e| e.outcome == "rejected_stale" && e.actor == stalled_owner)
        },
    )
    .await;
    assert_eq!(rejected.fencing_token, Some(stalled_token));
    let after = stack.operation(id).await;
    assert_eq!(after.status.as_str(), "SUCCEEDED");
    assert_eq!(
        after.provider_reference, op.provider_reference,
        "the stale worker changed the result"
    );
    assert_eq!(stack.charges_for(id).await.len(), 1);
}

#[tokio::test]
async fn executors_ride_out_a_database_restart_without_losing_or_doubling() {
    let cluster = PgCluster::start();
    let db = TestDb::create_on(&cluster.admin_url()).await;
    let stack = Stack::start_on(db, &["delay-ms=100"]).await;
    let ids = stack.pay_many(300, 32).await;
    let args = [
        "--lease",
        "5s",
        "--concurrency",
        "8",
        "--retry-base",
        "50ms",
    ];
    let _a = Executor::start(&stack.db.url, &stack.sim.base_url, &args).await;
    let _b = Executor::start(&stack.db.url, &stack.sim.base_url, &args).await;
    eventually(SETTLE, "draining to be under way", || async {
        let n = stack.sim.ledger().await["count"].as_u64()?;
        (n >= 20).then_some(())
    })
    .await;
    cluster.stop_server();
    tokio::time::sleep(Duration::from_millis(500)).await; // an outage, not a condition
    cluster.start_server();

    stack
        .wait_all_succeeded(ids.len() as i64, Duration::from_secs(90))
        .await;
    let ledger = stack.sim.ledger().await;
    assert_eq!(
        ledger["count"].as_u64().unwrap(),
        ids.len() as u64,
        "charges != operations"
    );
    assert_eq!(stack.db.counts().await.outbox, 0);
}

#[tokio::test]
async fn sigterm_exits_cleanly_and_releases_what_it_could_not_finish() {
    let stack = Stack::start(&["delay-ms=400"]).await;
    let ids = stack.pay_many(40, 20).await;
    // A long lease: if the leases were not released, the second executor would wait it out.
    let first = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &[
            "--lease",
            "60s",
            "--concurrency",
            "8",
            "--shutdown-grace",
            "100ms",
        ],
    )
    .await;
    eventually(SETTLE, "some calls under way", || async {
        (stack.sim.ledger().await["requests_by_key"]
            .as_object()?
            .len()
            >= 8)
            .then_some(())
    })
    .await;
    let status = first.service.terminate().await;
    assert!(status.success(), "executor exited with {status}");

    let _second =
        Executor::start(&stack.db.url, &stack.sim.base_url, &["--concurrency", "16"]).await;
    // Well inside the 60 s lease: released work is picked up at once.
    stack
        .wait_all_succeeded(ids.len() as i64, Duration::from_secs(20))
        .await;
    let ledger = stack.sim.ledger().await;
    assert_eq!(ledger["count"].as_u64().unwrap(), ids.len() as u64);
}

#[tokio::test]
async fn an_operation_abandoned_mid_call_with_no_attempts_left_goes_to_the_reconciler() {
    let stack = Stack::start(&["delay-ms=1500"]).await;
    let flags = ["--lease", "1s", "--max-attempts", "1"];
    let first = Executor::start(&stack.db.url, &stack.sim.base_url, &flags).await;
    let id = stack.pay("cus_poison", "poison-1").await;
    eventually(SETTLE, "the call to reach the provider", || async {
        (stack.requests_for(id).await >= 1).then_some(())
    })
    .await;
    // As if this operation brought its executor down every time it ran.
    first.service.kill9().await;

    let _second = Executor::start(&stack.db.url, &stack.sim.base_url, &flags).await;
    let op = stack.wait_for_status(id, "UNKNOWN", SETTLE).await;
    assert_eq!(
        stack.requests_for(id).await,
        1,
        "sent again past --max-attempts"
    );
    let events = stack.db.store.operation_events(id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("IN_PROGRESS"), "UNKNOWN"),
        "{events:?}"
    );
    assert!(
        op.last_error
            .as_deref()
            .is_some_and(|e| e.contains("not re-sent after 1 attempts")),
        "{op:?}"
    );
}
