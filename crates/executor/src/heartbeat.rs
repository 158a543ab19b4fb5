//! The lease heartbeat: renews the lease every third of its length while a provider
//! call runs, outside any transaction, and says so at once when the lease is lost.

use std::time::Duration;

use opgate_store::{Lease, Store};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseLost(pub bool);

/// Stops the heartbeat when dropped, so a worker that panics or is aborted can never
/// leave its lease renewed forever.
pub struct HeartbeatGuard(JoinHandle<()>);

impl Drop for HeartbeatGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn spawn_heartbeat(
    store: Store,
    lease: Lease,
    length: Duration,
) -> (watch::Receiver<LeaseLost>, HeartbeatGuard) {
    let (sender, receiver) = watch::channel(LeaseLost(false));
    // In the worker's span, so its statements belong to the operation's trace.
    let handle = tokio::spawn(tracing::Instrument::in_current_span(async move {
        let mut ticker = tokio::time::interval(length / 3);
        let operation_id = lease.operation_id;
        ticker.tick().await; // the claim itself just set the lease
        loop {
            ticker.tick().await;
            match store.heartbeat(&lease, length).await {
                Ok(true) => {}
                Ok(false) => {
                    let _ = sender.send(LeaseLost(true));
                    return;
                }
                // The database is unreachable: keep trying; if the lease runs out
                // meanwhile, the next successful heartbeat reports it lost.
                Err(error) => tracing::warn!(%operation_id, %error, "heartbeat failed"),
            }
        }
    }));
    (receiver, HeartbeatGuard(handle))
}
