//! The claim loops: each waits for a free slot, claims as many due events as there are
//! free slots (up to the batch size) and starts a worker per claim; it sleeps until a
//! notification or the poll interval when the outbox is drained. Several loops run at
//! once (`--claimers`), so that one claim's commit does not hold up the next: a claim
//! is a committed statement, and at high rates the time between claims is what limits
//! the drain.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opgate_provider::Providers;
use opgate_store::{
    spawn_listener, ClaimCursor, ClaimedOperation, Lease, Store, StoreError, OUTBOX_CHANNEL,
};
use opgate_telemetry::metrics;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::completions::Completions;
use crate::config::Config;
use crate::due_agents::DueAgents;
use crate::settled::SettledNotifier;
use crate::worker::Worker;

/// The lease of each operation being worked on, by operation.
type InFlight = Arc<Mutex<HashMap<Uuid, Lease>>>;

/// What the claim loops share.
struct Dispatch {
    config: Config,
    store: Store,
    owner: String,
    worker: Arc<Worker>,
    slots: Arc<Semaphore>,
    in_flight: InFlight,
    tasks: Mutex<JoinSet<()>>,
    wake: Arc<Notify>,
    frontier: Mutex<ClaimFrontier>,
    due_agents: DueAgents,
}

/// Runs until `shutdown` resolves, then drains or releases in-flight work.
pub async fn run(
    config: Config,
    store: Store,
    providers: Arc<Providers>,
    owner: String,
    shutdown: impl Future<Output = ()>,
) {
    let wake = Arc::new(Notify::new());
    spawn_wake_listener(config.database_url.clone(), wake.clone());
    let worker = Arc::new(Worker {
        store: store.clone(),
        providers,
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
    let dispatch = Arc::new(Dispatch {
        slots: Arc::new(Semaphore::new(config.concurrency)),
        config,
        store: store.clone(),
        owner,
        worker,
        in_flight: Arc::default(),
        tasks: Mutex::new(JoinSet::new()),
        wake,
        frontier: Mutex::default(),
        due_agents: DueAgents::default(),
    });
    let (stop, stopped) = watch::channel(false);
    let loops: Vec<_> = (0..dispatch.config.claimers.max(1))
        .map(|_| tokio::spawn(claim_loop(dispatch.clone(), stopped.clone())))
        .collect();
    let rotation = crate::rotation::spawn(
        store.clone(),
        dispatch.config.outbox_rotation_interval,
        dispatch.config.outbox_rotation_lock_timeout,
        stopped.clone(),
    );
    shutdown.await;
    let _ = stop.send(true);
    for claim_loop in loops {
        let _ = claim_loop.await;
    }
    let _ = rotation.await;
    let tasks = std::mem::take(&mut *dispatch.tasks.lock().unwrap());
    // The operations still being worked on (finished tasks stay in `tasks` until joined).
    let in_flight = dispatch.in_flight.lock().unwrap().len();
    tracing::info!(in_flight, "stopping: no new claims");
    drain_or_release(
        &store,
        tasks,
        dispatch.in_flight.clone(),
        dispatch.config.shutdown_grace,
    )
    .await;
}

async fn claim_loop(dispatch: Arc<Dispatch>, mut stopped: watch::Receiver<bool>) {
    let config = &dispatch.config;
    let mut claim_failures = 0u32;
    loop {
        let first_slot = tokio::select! {
            slot = dispatch.slots.clone().acquire_owned() => slot.expect("semaphore never closes"),
            _ = stopped.changed() => return,
        };
        // Take every other free slot now, up to the batch size: the claim asks for
        // exactly as many events as this loop holds slots for.
        let mut slots = vec![first_slot];
        while slots.len() < config.batch_size {
            match dispatch.slots.clone().try_acquire_owned() {
                Ok(slot) => slots.push(slot),
                Err(_) => break,
            }
        }
        let wanted = slots.len();
        let started = Instant::now();
        let from = dispatch.frontier.lock().unwrap().next();
        let claim = dispatch.claim(wanted, from).await;
        // Every claim, empty and failed ones too: an empty claim still walks past every
        // dead tuple the outbox holds.
        metrics().claim("executor", started.elapsed().as_secs_f64());
        let claimed = match claim {
            Ok(claimed) => {
                claim_failures = 0;
                claimed
            }
            Err(error) => {
                claim_failures += 1;
                tracing::warn!(%error, "claim failed");
                drop(slots);
                let pause = (config.retry_base * claim_failures).min(config.poll_interval);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => continue,
                    _ = stopped.changed() => return,
                }
            }
        };
        // A full claim may have left more due: a sleeping loop is woken to claim beside
        // this one. A short claim of the whole outbox took every event it could lock,
        // so the outbox is drained for now (an event it skipped is another claim's, or
        // being written, and comes round at the next notification or poll). After any
        // other short claim (from the frontier, or of one agent on Citus) this loop
        // alone claims again, until a claim of the whole outbox comes back short: waking
        // another loop for it made about twenty claims of every lone operation.
        let full = claimed.len() == wanted;
        let drained = if dispatch.claims_whole_outbox(from).await {
            !full
        } else {
            claimed.is_empty() && from.is_none()
        };
        let furthest = claimed.iter().map(|op| op.position).max();
        dispatch.frontier.lock().unwrap().claimed(furthest);
        for (op, slot) in claimed.into_iter().zip(slots.drain(..)) {
            dispatch.start(op, slot);
        }
        drop(slots);
        if drained {
            tokio::select! {
                _ = dispatch.wake.notified() => {}
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = stopped.changed() => return,
            }
        } else if full {
            dispatch.wake.notify_one();
        }
    }
}

/// Where this executor's next claim starts, shared by its claim loops: after the
/// furthest event any of them has claimed (`ClaimCursor`), and from the beginning at
/// least every `FULL_CLAIM_EVERY` and after a claim from the frontier found nothing,
/// so that an event due again behind it (a lease that expired, a claim that failed)
/// waits at most that long. Between full claims no loop walks the events the others
/// hold or have finished: behind a snapshot that stops VACUUM, the finished ones are
/// dead rows every claim would visit again.
#[derive(Default)]
struct ClaimFrontier {
    furthest: Option<ClaimCursor>,
    last_full: Option<Instant>,
}

const FULL_CLAIM_EVERY: Duration = Duration::from_secs(1);

impl ClaimFrontier {
    /// Where the next claim starts; `None` for the beginning (a full claim).
    fn next(&mut self) -> Option<ClaimCursor> {
        let fresh = self
            .last_full
            .is_some_and(|at| at.elapsed() < FULL_CLAIM_EVERY);
        match self.furthest {
            Some(furthest) if fresh => Some(furthest),
            _ => {
                self.last_full = Some(Instant::now());
                None
            }
        }
    }

    /// `furthest`: the latest position a claim took, `None` when it took nothing, in
    /// which case the next claim is a full one.
    fn claimed(&mut self, furthest: Option<ClaimCursor>) {
        match furthest {
            Some(position) => self.furthest = self.furthest.max(Some(position)),
            None => self.last_full = None,
        }
    }
}

impl Dispatch {
    /// Up to `wanted` due events, from `from` on (the whole outbox when `None`); on
    /// Citus, one agent's (`DueAgents`).
    async fn claim(
        &self,
        wanted: usize,
        from: Option<ClaimCursor>,
    ) -> Result<Vec<ClaimedOperation>, StoreError> {
        let (store, owner, lease) = (&self.store, self.owner.as_str(), self.config.lease);
        if store.is_distributed().await? {
            return self.due_agents.claim(store, owner, lease, wanted).await;
        }
        match from {
            Some(from) => {
                store
                    .claim_due_operations_from(owner, lease, wanted as i64, from)
                    .await
            }
            None => {
                store
                    .claim_due_operations(owner, lease, wanted as i64)
                    .await
            }
        }
    }

    /// Whether a claim from `from` reads the whole outbox: from the beginning, and not
    /// one agent's events (Citus).
    async fn claims_whole_outbox(&self, from: Option<ClaimCursor>) -> bool {
        from.is_none() && matches!(self.store.is_distributed().await, Ok(false))
    }

    fn start(&self, op: ClaimedOperation, slot: OwnedSemaphorePermit) {
        self.in_flight
            .lock()
            .unwrap()
            .insert(op.operation_id, op.lease());
        let (worker, in_flight) = (self.worker.clone(), self.in_flight.clone());
        let mut tasks = self.tasks.lock().unwrap();
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            let id = op.operation_id;
            worker.execute(op).await;
            in_flight.lock().unwrap().remove(&id);
            drop(slot);
        });
    }
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
    let leftover: Vec<Lease> = in_flight
        .lock()
        .unwrap()
        .drain()
        .map(|(_, lease)| lease)
        .collect();
    tracing::warn!(
        count = leftover.len(),
        "grace period over; releasing leases"
    );
    for lease in leftover {
        if let Err(error) = store.release_lease(&lease).await {
            let operation_id = lease.operation_id;
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use opgate_store::ClaimCursor;

    use super::ClaimFrontier;

    fn at(seconds: u64, event_id: i64) -> ClaimCursor {
        ClaimCursor {
            available_at: SystemTime::UNIX_EPOCH + Duration::from_secs(seconds),
            event_id,
        }
    }

    #[test]
    fn claims_start_at_the_furthest_event_claimed_and_from_the_beginning_after_an_empty_one() {
        let mut frontier = ClaimFrontier::default();
        assert_eq!(frontier.next(), None, "the first claim is a full one");
        frontier.claimed(Some(at(10, 7)));
        assert_eq!(frontier.next(), Some(at(10, 7)));
        // A claim that took earlier events (another loop's, finishing late) does not
        // move the frontier back.
        frontier.claimed(Some(at(10, 3)));
        frontier.claimed(Some(at(11, 1)));
        assert_eq!(frontier.next(), Some(at(11, 1)));
        frontier.claimed(None);
        assert_eq!(frontier.next(), None, "after an empty claim, a full one");
        assert_eq!(frontier.next(), Some(at(11, 1)));
    }

    #[test]
    fn a_full_claim_comes_round_at_least_every_second() {
        let mut frontier = ClaimFrontier::default();
        frontier.next();
        frontier.claimed(Some(at(10, 7)));
        frontier.last_full = frontier
            .last_full
            .map(|at| at - super::FULL_CLAIM_EVERY - Duration::from_millis(1));
        assert_eq!(frontier.next(), None);
        assert_eq!(frontier.next(), Some(at(10, 7)));
    }
}
