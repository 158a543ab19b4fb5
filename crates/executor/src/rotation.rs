//! The outbox rotation loop: every `--outbox-rotation-interval`, the partitions new
//! events no longer go to are emptied into the current one and truncated (the store's
//! `rotate_outbox`), so dead events never pile up where claims scan, even behind a
//! snapshot that stops VACUUM. Every executor runs one; they take turns.

use std::time::{Duration, Instant};

use opgate_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A partition held by the same backend is reported again after this long.
const WARNING_EVERY: Duration = Duration::from_secs(60);

pub fn spawn(
    store: Store,
    interval: Duration,
    lock_timeout: Duration,
    mut stopped: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_warning: Option<(i32, Instant)> = None;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stopped.changed() => return,
            }
            let started = Instant::now();
            match store.rotate_outbox(lock_timeout).await {
                Ok(rotation) if rotation.held_by.is_some() => {
                    let pid = rotation.held_by.unwrap_or_default();
                    let repeated = last_warning
                        .is_some_and(|(last, at)| last == pid && at.elapsed() < WARNING_EVERY);
                    if repeated {
                        continue;
                    }
                    last_warning = Some((pid, Instant::now()));
                    tracing::warn!(
                        pid,
                        truncated = rotation.truncated,
                        "an open transaction holds a lock on an outbox partition, which cannot rotate until it ends"
                    );
                }
                Ok(rotation) if rotation.truncated > 0 || rotation.skipped > 0 => {
                    tracing::debug!(
                        truncated = rotation.truncated,
                        moved = rotation.moved,
                        skipped = rotation.skipped,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "outbox rotated"
                    );
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "outbox rotation failed; trying again next round")
                }
            }
        }
    })
}
