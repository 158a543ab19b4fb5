//! The claim loop: wait for a free slot, claim as many due events as there are free
//! slots (up to the batch size), start a worker per claim; sleep until a notification
//! or the poll interval when the outbox is drained.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opgate_provider::Provider;
use opgate_store::{spawn_listener, Store, OUTBOX_CHANNEL};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::completions::Completions;
use crate::config::Config;
use crate::settled::SettledNotifier;
use crate::worker::Worker;

type InFlight = Arc<Mutex<HashMap<Uuid, i64>>>;

/// Runs until `shutdown` resolves, then drains or releases in-flight work.
pub async fn run<P: Provider>(
    config: Config,
    store: Store,
    provider: Arc<P>,
    owner: String,
    shutdown: impl Future<Output = ()>,
) {
    let wake = Arc::new(Notify::new());
    spawn_wake_listener(config.database_url.clone(), wake.clone());
    let worker = Arc::new(Worker {
        store: store.clone(),
        provider,
        owner: owner.clone(),
        lease: config.lease,
        max_attempts: config.max_attempts,
        retry_base: config.retry_base,
        retry_max: config.retry_max,
        settled: SettledNotifier::spawn(store.clone()),
        completions: Completions::new(
            store.clone(),
            &owner,
            config.group_commit,
            config.concurrency,
        ),
    });
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let in_flight: InFlight = Arc::default();
    let mut tasks = JoinSet::new();
    let mut claim_failures = 0u32;
    tokio::pin!(shutdown);

    loop {
        while tasks.try_join_next().is_some() {}
        let first_slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("semaphore never closes"),
            _ = &mut shutdown => break,
        };
        let wanted = (1 + slots.available_permits()).min(config.batch_size);
        let claimed = match store
            .claim_due_operations(&owner, config.lease, wanted as i64)
            .await
        {
            Ok(claimed) => {
                claim_failures = 0;
                claimed
            }
            Err(error) => {
                claim_failures += 1;
                tracing::warn!(%error, "claim failed");
                drop(first_slot);
                let pause = (config.retry_base * claim_failures).min(config.poll_interval);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => continue,
                    _ = &mut shutdown => break,
                }
            }
        };
        let drained = claimed.len() < wanted;
        let mut first_slot = Some(first_slot);
        for op in claimed {
            let slot = match first_slot.take() {
                Some(slot) => slot,
                None => slots
                    .clone()
                    .try_acquire_owned()
                    .expect("slots were counted free"),
            };
            in_flight
                .lock()
                .unwrap()
                .insert(op.operation_id, op.fencing_token);
            let (worker, in_flight) = (worker.clone(), in_flight.clone());
            tasks.spawn(async move {
                let id = op.operation_id;
                worker.execute(op).await;
                in_flight.lock().unwrap().remove(&id);
                drop(slot);
            });
        }
        drop(first_slot);
        if drained {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = &mut shutdown => break,
            }
        }
    }

    tracing::info!(in_flight = tasks.len(), "stopping: no new claims");
    drain_or_release(&store, tasks, in_flight, config.shutdown_grace).await;
}

async fn drain_or_release(
    store: &Store,
    mut tasks: JoinSet<()>,
    in_flight: InFlight,
    grace: Duration,
) {
    let deadline = tokio::time::sleep(grace);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { return },
            _ = &mut deadline => break,
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let leftover: Vec<(Uuid, i64)> = in_flight.lock().unwrap().drain().collect();
    tracing::warn!(
        count = leftover.len(),
        "grace period over; releasing leases"
    );
    for (operation_id, fencing_token) in leftover {
        if let Err(error) = store.release_lease(operation_id, fencing_token).await {
            tracing::warn!(%operation_id, %error, "could not release lease; it expires by itself");
        }
    }
}

fn spawn_wake_listener(database_url: String, wake: Arc<Notify>) {
    let mut wakeups = spawn_listener(database_url, vec![OUTBOX_CHANNEL]);
    tokio::spawn(async move {
        while wakeups.recv().await.is_some() {
            wake.notify_one();
        }
    });
}
