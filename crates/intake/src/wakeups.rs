//! intake's two uses of LISTEN/NOTIFY: waking executors after a registration commits
//! (coalesced: one NOTIFY covers every registration since the last one, and none is
//! ever sent inside the registration transaction), and hearing which operations have
//! settled, for requests that asked to wait (`Prefer: wait=N`).

use std::sync::Arc;
use std::time::Duration;

use opgate_store::{spawn_listener, Store, Wakeup, SETTLED_CHANNEL};
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;
use uuid::Uuid;

use opgate_store::OperationRecord;

/// Set after each commit that created an operation; one background task turns any
/// number of them into one NOTIFY. It sends one at once when none went out in the last
/// `interval`; otherwise the registrations since share one sent when `interval` is up.
/// A lone registration's NOTIFY so leaves at once, and under load each worker sends at
/// most one per `interval`. (Each NOTIFY is a transaction of its own, with an xid and a
/// flushed commit: sent back to back, one per registration or two, they took a tenth
/// of the machine's CPU per registration at 8 clients.)
#[derive(Clone)]
pub struct ExecutorWaker {
    pending: Arc<Notify>,
}

impl ExecutorWaker {
    pub fn spawn(store: Store, interval: Duration) -> Self {
        let pending = Arc::new(Notify::new());
        let signal = pending.clone();
        tokio::spawn(async move {
            loop {
                signal.notified().await;
                let sent = Instant::now();
                if let Err(error) = store.notify_outbox().await {
                    tracing::debug!(%error, "could not wake executors; they poll");
                }
                // What commits meanwhile leaves a permit: one NOTIFY when this ends.
                tokio::time::sleep_until(sent + interval).await;
            }
        });
        Self { pending }
    }

    pub fn operation_created(&self) {
        self.pending.notify_one();
    }
}

/// Broadcasts settled operation ids; `Uuid::nil()` means "the listener reconnected:
/// anything may have settled".
#[derive(Clone)]
pub struct SettledOperations {
    sender: broadcast::Sender<Uuid>,
}

impl SettledOperations {
    pub fn spawn(database_url: String) -> Self {
        let (sender, _) = broadcast::channel(4096);
        let forward = sender.clone();
        let mut wakeups = spawn_listener(database_url, vec![SETTLED_CHANNEL]);
        tokio::spawn(async move {
            while let Some(wakeup) = wakeups.recv().await {
                let id = match wakeup {
                    Wakeup::Notification { payload, .. } => match payload.parse() {
                        Ok(id) => id,
                        Err(_) => continue,
                    },
                    Wakeup::Connected => Uuid::nil(),
                };
                let _ = forward.send(id);
            }
        });
        Self { sender }
    }

    /// Settlements from now on, for a request that will wait on an operation it has
    /// not read yet (`wait_from`).
    pub fn subscribe(&self) -> SettledSubscription {
        SettledSubscription(self.sender.subscribe())
    }

    /// Re-reads the operation until it is terminal or `wait` has passed. Subscribes
    /// before every read (the first included), so a settlement between a read and the
    /// wait is never missed. The operation exists whatever happens here, so a failed
    /// re-read answers with the last state known rather than an error.
    pub async fn wait_until_terminal(
        &self,
        store: &Store,
        agent_id: &str,
        record: OperationRecord,
        wait: Duration,
    ) -> OperationRecord {
        wait_for(self.subscribe(), store, agent_id, record, wait, true).await
    }

    /// `wait_until_terminal` for a `record` read (or written) after `subscription` was
    /// taken: any settlement after that read is announced to the subscription, so the
    /// first re-read is skipped (one round trip less for `Prefer: wait`).
    pub async fn wait_from(
        &self,
        subscription: SettledSubscription,
        store: &Store,
        agent_id: &str,
        record: OperationRecord,
        wait: Duration,
    ) -> OperationRecord {
        wait_for(subscription, store, agent_id, record, wait, false).await
    }
}

/// Settlements announced since it was taken (`SettledOperations::subscribe`).
pub struct SettledSubscription(broadcast::Receiver<Uuid>);

async fn wait_for(
    SettledSubscription(mut settled): SettledSubscription,
    store: &Store,
    agent_id: &str,
    mut record: OperationRecord,
    wait: Duration,
    mut read_first: bool,
) -> OperationRecord {
    let deadline = Instant::now() + wait;
    let id = record.operation_id;
    loop {
        if read_first {
            match store.find_operation_for_agent(id, agent_id).await {
                Ok(Some(current)) => record = current,
                Ok(None) => return record,
                Err(error) => {
                    tracing::warn!(operation_id = %id, %error, "could not re-read while waiting");
                    return record;
                }
            }
        }
        read_first = true;
        if record.status.is_terminal() || Instant::now() >= deadline {
            return record;
        }
        loop {
            tokio::select! {
                message = settled.recv() => match message {
                    Ok(settled_id) if settled_id == id || settled_id.is_nil() => break,
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep_until(deadline).await;
                        break;
                    }
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
    }
}

pub const MAX_WAIT_SECS: u64 = 30;

/// The `wait=N` preference of a `Prefer` header, capped at 30 s.
pub fn requested_wait(request: &actix_web::HttpRequest) -> Option<u64> {
    request
        .headers()
        .get_all("prefer")
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split([',', ';']))
        .filter_map(|preference| {
            let (name, value) = preference.trim().split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("wait")
                .then(|| value.trim().trim_matches('"').parse::<u64>().ok())?
        })
        .next()
        .map(|secs| secs.min(MAX_WAIT_SECS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn the_wait_preference_is_read_and_capped() {
        let wait = |value: &str| {
            requested_wait(
                &TestRequest::default()
                    .insert_header(("Prefer", value))
                    .to_http_request(),
            )
        };
        assert_eq!(wait("wait=5"), Some(5));
        assert_eq!(wait("respond-async, wait=10"), Some(10));
        assert_eq!(wait("wait=600"), Some(30));
        assert_eq!(wait("return=minimal"), None);
        assert_eq!(wait("wait=soon"), None);
        assert_eq!(
            requested_wait(&TestRequest::default().to_http_request()),
            None
        );
    }
}
