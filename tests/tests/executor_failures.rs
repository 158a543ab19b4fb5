//! The executor through crashes, stalls, database restarts and shutdowns: every
//! operation still ends done exactly once at the provider. Crashes, stalls and
//! restarts are run for each kind (`Kind`): a payment, a refund and a declared order.

use std::time::Duration;

use opgate_e2e::{eventually, Executor, Kind, KindStack, PgCluster, Stack, TestDb};
use serde_json::json;

const SETTLE: Duration = Duration::from_secs(30);

/// An executor killed while the provider is still answering its call: once its lease
/// has expired another executor takes the operation over, sends the same key again,
/// and the provider does it once.
async fn kill_9_mid_call_lets_another_executor_finish(kind: Kind) {
    let stack = kind.start().await;
    let first = stack.executor(&["--lease", "1s"]).await;
    let id = stack.register("crash-1", json!({"delay_ms": 1500})).await;
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

    let _second = stack.executor(&["--lease", "1s"]).await;
    let op = stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    let effects = stack.effects_for(id).await;
    assert_eq!(effects.len(), 1, "{} done twice: {effects:?}", kind.name());
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
async fn kill_9_mid_call_lets_another_executor_finish_exactly_once_payment() {
    kill_9_mid_call_lets_another_executor_finish(Kind::Payment).await;
}

#[tokio::test]
async fn kill_9_mid_call_lets_another_executor_finish_exactly_once_refund() {
    kill_9_mid_call_lets_another_executor_finish(Kind::Refund).await;
}

#[tokio::test]
async fn kill_9_mid_call_lets_another_executor_finish_exactly_once_order() {
    kill_9_mid_call_lets_another_executor_finish(Kind::Order).await;
}

/// An executor killed after the provider did the operation and before its answer
/// arrived (provider-sim holds it): the new owner takes the operation over, sends the
/// same key again, and the provider answers with what it did, without doing it twice.
async fn kill_9_after_the_provider_did_it_lets_another_executor_finish(kind: Kind) {
    let stack = kind.start().await;
    let first = stack.executor(&["--lease", "1s"]).await;
    let id = stack
        .register("crash-after-1", json!({"delay_answer_ms": 60000}))
        .await;
    eventually(SETTLE, "the provider to have done it", || async {
        (stack.effects_for(id).await.len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        stack.operation(id).await.status.as_str(),
        "IN_PROGRESS",
        "the answer is still held"
    );
    first.service.kill9().await;
    stack.sim.set_faults(json!({})).await;

    let second = stack.executor(&["--lease", "1s"]).await;
    let op = stack
        .wait_until_not(id, &["PENDING", "IN_PROGRESS"], SETTLE)
        .await;
    assert_eq!(op.status.as_str(), "SUCCEEDED", "{:?}", op.last_error);
    let effects = stack.effects_for(id).await;
    assert_eq!(effects.len(), 1, "{} done twice: {effects:?}", kind.name());
    assert_eq!(
        op.provider_reference.as_deref(),
        Some(kind.effect_id(&effects[0]))
    );
    assert_eq!(
        stack.requests_for(id).await,
        2,
        "sent again once, under the same key"
    );
    assert_eq!(op.attempts, 2);
    let events = stack.db.store.operation_events(id).await.unwrap();
    assert!(
        events.iter().any(|e| e.actor == second.owner()
            && e.reason.as_deref() == Some("lease expired; taken over")),
        "{events:?}"
    );
}

#[tokio::test]
async fn kill_9_after_the_provider_did_it_lets_another_executor_finish_exactly_once_payment() {
    kill_9_after_the_provider_did_it_lets_another_executor_finish(Kind::Payment).await;
}

#[tokio::test]
async fn kill_9_after_the_provider_did_it_lets_another_executor_finish_exactly_once_refund() {
    kill_9_after_the_provider_did_it_lets_another_executor_finish(Kind::Refund).await;
}

#[tokio::test]
async fn kill_9_after_the_provider_did_it_lets_another_executor_finish_exactly_once_order() {
    kill_9_after_the_provider_did_it_lets_another_executor_finish(Kind::Order).await;
}

/// What the fencing token is for: a worker whose lease expired wakes up with an answer
/// and writes it while the new owner still holds the operation IN_PROGRESS, so the
/// status guard alone would let the write through. The token refuses it, the refusal
/// is audited, and the new owner's result is the one kept.
#[tokio::test]
async fn a_stale_write_while_the_new_owner_holds_the_lease_is_refused_by_the_token() {
    let stack = Kind::Payment.start().await;
    // A long lease (its heartbeat is not due again while the test runs, so nothing but
    // its answer wakes it) and a long response timeout (the answer waits for it
    // however long it is stopped).
    let stale = stack
        .executor(&["--lease", "60s", "--response-timeout", "60s"])
        .await;
    let stale_owner = stale.owner().to_owned();
    // The provider charges, then holds the answer long enough to stop the worker first.
    let id = stack
        .register("live-owner-1", json!({"delay_answer_ms": 2500}))
        .await;
    let stale_token = claim_token(&stack, id, &stale_owner).await;
    eventually(
        SETTLE,
        "the stale worker's call to reach the provider",
        || async { (stack.requests_for(id).await >= 1).then_some(()) },
    )
    .await;
    stale.service.signal("STOP");
    // Its answer goes out while it is stopped, and waits in its socket.
    eventually(
        SETTLE,
        "the provider to answer the stopped worker",
        || async {
            stack
                .sim
                .service
                .logs()
                .lines()
                .any(|line| {
                    line.contains("\"message\":\"request\"") && line.contains("delay-answer-ms")
                })
                .then_some(())
        },
    )
    .await;
    // Its lease ends while it is stopped, as a lease runs out under a long stall:
    // released with the store's own statement rather than waited out.
    let agent_id = stack
        .db
        .store
        .find_operation(id)
        .await
        .unwrap()
        .unwrap()
        .agent_id;
    let stale_lease = opgate_store::Lease {
        operation_id: id,
        agent_id,
        fencing_token: stale_token,
    };
    stack.db.store.release_lease(&stale_lease).await.unwrap();

    // The new owner's call is held for as long as the test needs: it times out and
    // re-sends (same key) until the answers are released below.
    stack
        .sim
        .set_faults(json!({"delay_answer_ms": 60000}))
        .await;
    let owner = stack
        .executor(&[
            "--lease",
            "1s",
            "--response-timeout",
            "2s",
            "--retry-base",
            "50ms",
        ])
        .await;
    let owner_token = claim_token(&stack, id, owner.owner()).await;
    assert!(owner_token > stale_token);
    eventually(
        SETTLE,
        "the new owner's call to reach the provider",
        || async { (stack.requests_for(id).await >= 2).then_some(()) },
    )
    .await;

    stale.service.signal("CONT");
    let stale_write = eventually(SETTLE, "the stale worker's write", || async {
        let events = stack.db.store.operation_events(id).await.ok()?;
        events.into_iter().find(|e| {
            e.actor == stale_owner
                && (e.outcome == "rejected_stale"
                    || (e.outcome == "applied" && e.to_status != "IN_PROGRESS"))
        })
    })
    .await;
    assert_eq!(
        (
            stale_write.outcome.as_str(),
            stale_write.to_status.as_str(),
            stale_write.fencing_token
        ),
        ("rejected_stale", "SUCCEEDED", Some(stale_token)),
        "the stale worker's write landed while the new owner held the lease: {stale_write:?}"
    );
    assert!(
        stale_write
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("stale write rejected")),
        "{stale_write:?}"
    );
    // The new owner still holds the operation, untouched.
    let row = stack
        .db
        .sql()
        .await
        .query_one(
            "SELECT status, fencing_token, lease_owner FROM operations WHERE operation_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i64>(1),
            row.get::<_, Option<String>>(2)
        ),
        (
            "IN_PROGRESS".to_owned(),
            owner_token,
            Some(owner.owner().to_owned())
        )
    );

    // Answers released: the new owner's re-send is answered, and its result is kept.
    stack.sim.set_faults(json!({})).await;
    let op = stack
        .wait_until_not(id, &["PENDING", "IN_PROGRESS"], SETTLE)
        .await;
    assert_eq!(op.status.as_str(), "SUCCEEDED", "{:?}", op.last_error);
    let events = stack.db.store.operation_events(id).await.unwrap();
    let done = events
        .iter()
        .find(|e| e.outcome == "applied" && e.to_status == "SUCCEEDED")
        .unwrap();
    assert_eq!(
        (done.actor.as_str(), done.fencing_token),
        (owner.owner(), Some(owner_token))
    );
    let charges = stack.charges_for(id).await;
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(
        op.provider_reference.as_deref(),
        charges[0]["payment_id"].as_str()
    );
}

/// The fencing token of `owner`'s claim of the operation, once it has claimed it.
async fn claim_token(stack: &KindStack, id: uuid::Uuid, owner: &str) -> i64 {
    eventually(SETTLE, &format!("{owner} to claim"), || async {
        let events = stack.db.store.operation_events(id).await.ok()?;
        events
            .iter()
            .find(|e| e.actor == owner && e.to_status == "IN_PROGRESS")
            .and_then(|e| e.fencing_token)
    })
    .await
}

/// An executor stopped (SIGSTOP) past its lease: another executor finishes the
/// operation, and the stalled one's write, when it wakes up, is refused by its
/// fencing token.
async fn a_stalled_executors_late_write_is_rejected_by_the_fencing_token(kind: Kind) {
    let stack = kind.start().await;
    let stalled = stack.executor(&["--lease", "1s"]).await;
    let id = stack.register("stale-1", json!({"delay_ms": 600})).await;
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

    let _fresh = stack.executor(&["--lease", "1s"]).await;
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
    let effects = stack.effects_for(id).await;
    assert_eq!(effects.len(), 1, "{} done twice: {effects:?}", kind.name());
}

#[tokio::test]
async fn a_stalled_executors_late_write_is_rejected_by_the_fencing_token_payment() {
    a_stalled_executors_late_write_is_rejected_by_the_fencing_token(Kind::Payment).await;
}

#[tokio::test]
async fn a_stalled_executors_late_write_is_rejected_by_the_fencing_token_refund() {
    a_stalled_executors_late_write_is_rejected_by_the_fencing_token(Kind::Refund).await;
}

#[tokio::test]
async fn a_stalled_executors_late_write_is_rejected_by_the_fencing_token_order() {
    a_stalled_executors_late_write_is_rejected_by_the_fencing_token(Kind::Order).await;
}

/// Two executors draining 300 operations while PostgreSQL is stopped and started
/// again: every operation SUCCEEDED, done once at the provider, the outbox empty.
async fn executors_ride_out_a_database_restart_without_losing_or_doubling(kind: Kind) {
    let cluster = PgCluster::start();
    let db = TestDb::create_on(&cluster.admin_url()).await;
    let stack = kind.start_on(db).await;
    let ids = stack.register_many(300, 32, json!({"delay_ms": 100})).await;
    let args = [
        "--lease",
        "5s",
        "--concurrency",
        "8",
        "--retry-base",
        "50ms",
    ];
    let _a = stack.executor(&args).await;
    let _b = stack.executor(&args).await;
    eventually(SETTLE, "draining to be under way", || async {
        (stack.effect_count().await >= 20).then_some(())
    })
    .await;
    cluster.stop_server();
    tokio::time::sleep(Duration::from_millis(500)).await; // an outage, not a condition
    cluster.start_server();

    stack
        .wait_all_succeeded(&ids, Duration::from_secs(90))
        .await;
    assert_eq!(
        stack.effect_count().await,
        ids.len(),
        "{}s at the provider != operations",
        kind.name()
    );
    assert_eq!(stack.db.counts().await.outbox, 0);
}

#[tokio::test]
async fn executors_ride_out_a_database_restart_without_losing_or_doubling_payment() {
    executors_ride_out_a_database_restart_without_losing_or_doubling(Kind::Payment).await;
}

#[tokio::test]
async fn executors_ride_out_a_database_restart_without_losing_or_doubling_refund() {
    executors_ride_out_a_database_restart_without_losing_or_doubling(Kind::Refund).await;
}

#[tokio::test]
async fn executors_ride_out_a_database_restart_without_losing_or_doubling_order() {
    executors_ride_out_a_database_restart_without_losing_or_doubling(Kind::Order).await;
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
