//! Intake wakes the executors with a NOTIFY after registrations commit, at most one per
//! `--executor-wake-interval` in each HTTP worker: a registration's NOTIFY leaves at once
//! unless one left less than the interval ago, and the registrations in between share
//! one sent when the interval is up. Nothing is left for the executor's poll.

use std::time::Duration;

use opgate_e2e::{Executor, Stack, TestDb};
use opgate_store::{spawn_listener, Wakeup, OUTBOX_CHANNEL};
use tokio::sync::mpsc::Receiver;

const INTERVAL: Duration = Duration::from_secs(4);

#[tokio::test]
async fn registrations_within_the_interval_share_one_notify_and_each_is_executed() {
    let agent = ["--allow", "payment"];
    // One worker: each worker has its own waker.
    let interval = format!("{}s", INTERVAL.as_secs());
    let intake_env = [
        ("INTAKE_WORKERS", "1"),
        ("INTAKE_EXECUTOR_WAKE_INTERVAL", interval.as_str()),
    ];
    let stack = Stack::start_custom(TestDb::create().await, &[], &agent, &[], &intake_env).await;
    let mut heard = spawn_listener(stack.db.url.clone(), vec![OUTBOX_CHANNEL]);
    assert_eq!(heard.recv().await, Some(Wakeup::Connected));
    // Polls a minute apart: only a NOTIFY gets an operation executed within the test.
    let _executor =
        Executor::start_polling_every("60s", &stack.db.url, &stack.sim.base_url, &[]).await;

    // The first registration's NOTIFY leaves at once: executed well before the
    // interval is up.
    let first = stack.pay("cus_wake", "wake-0").await;
    stack
        .wait_for_status(first, "SUCCEEDED", INTERVAL - Duration::from_secs(1))
        .await;
    // Five more within the same interval: no NOTIFY of their own, one for all five
    // when it is up, and each is executed.
    let mut rest = Vec::new();
    for i in 1..=5 {
        rest.push(stack.pay("cus_wake", &format!("wake-{i}")).await);
    }
    for id in rest {
        stack
            .wait_for_status(id, "SUCCEEDED", Duration::from_secs(30))
            .await;
    }
    // Anything more would have been sent by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        notifications(&mut heard),
        2,
        "six registrations, the last five within the interval of the first's NOTIFY"
    );
}

fn notifications(heard: &mut Receiver<Wakeup>) -> usize {
    std::iter::from_fn(|| heard.try_recv().ok())
        .filter(|wakeup| matches!(wakeup, Wakeup::Notification { .. }))
        .count()
}
