//! LISTEN/NOTIFY wake-ups. Notifications are sent in their own short statement after
//! the data they announce has committed, never inside a hot transaction: a NOTIFY in a
//! transaction takes a cluster-wide lock at commit and serialises every commit.
//! Callers coalesce them; a lost notification costs a poll interval, never data.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use uuid::Uuid;

use crate::error::StoreError;
use crate::pool::Store;

/// New outbox events are due.
pub const OUTBOX_CHANNEL: &str = "opgate_outbox";
/// Operations reached a terminal state; the payload is the operation id.
pub const SETTLED_CHANNEL: &str = "opgate_settled";

const NOTIFY_OUTBOX: &str = "SELECT pg_notify('opgate_outbox', '')";
const NOTIFY_SETTLED: &str =
    "SELECT pg_notify('opgate_settled', id::text) FROM unnest($1::uuid[]) AS id";

/// What a listener hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    Notification {
        channel: String,
        payload: String,
    },
    /// The listening connection was (re)established: notifications may have been
    /// missed while it was down, so re-check state.
    Connected,
}

impl Store {
    #[tracing::instrument(level = "debug", name = "SELECT pg_notify", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "pg_notify"))]
    pub async fn notify_outbox(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        // Prepared once per connection: `execute` with the text first parses it in a
        // round trip of its own (and closes it after), and this one is on the path from
        // a lone registration to its executor.
        let notify = client.prepare_cached(NOTIFY_OUTBOX).await?;
        client.execute(&notify, &[]).await?;
        Ok(())
    }

    /// One statement for the whole batch.
    #[tracing::instrument(level = "debug", name = "SELECT pg_notify", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "pg_notify"))]
    pub async fn notify_settled(&self, operation_ids: &[Uuid]) -> Result<(), StoreError> {
        if operation_ids.is_empty() {
            return Ok(());
        }
        let client = self.client().await?;
        // Prepared once per connection, as above: this one is on the path from a
        // completion to the request waiting for it (`Prefer: wait`).
        let notify = client.prepare_cached(NOTIFY_SETTLED).await?;
        client.execute(&notify, &[&operation_ids]).await?;
        Ok(())
    }
}

/// Listens on `channels` on a dedicated connection, reconnecting with backoff for as
/// long as the receiver lives.
pub fn spawn_listener(database_url: String, channels: Vec<&'static str>) -> mpsc::Receiver<Wakeup> {
    let (sender, receiver) = mpsc::channel(1024);
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        while !sender.is_closed() {
            let mut connected = false;
            if let Err(error) = listen_once(&database_url, &channels, &sender, &mut connected).await
            {
                if connected {
                    // It worked for a while: start the backoff afresh.
                    backoff = Duration::from_millis(100);
                }
                tracing::warn!(%error, retry_in_ms = backoff.as_millis() as u64, "LISTEN connection lost");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
    receiver
}

async fn listen_once(
    database_url: &str,
    channels: &[&'static str],
    sender: &mpsc::Sender<Wakeup>,
    connected: &mut bool,
) -> Result<(), StoreError> {
    let (client, mut connection) =
        tokio_postgres::connect(database_url, tokio_postgres::NoTls).await?;
    let (message_tx, mut message_rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = message_tx.send(Wakeup::Notification {
                        channel: n.channel().to_owned(),
                        payload: n.payload().to_owned(),
                    });
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let listen: String = channels.iter().map(|c| format!("LISTEN {c};")).collect();
    client.batch_execute(&listen).await?;
    *connected = true;
    if sender.send(Wakeup::Connected).await.is_err() {
        driver.abort();
        return Ok(());
    }
    while let Some(wakeup) = message_rx.recv().await {
        if sender.send(wakeup).await.is_err() {
            break;
        }
    }
    driver.abort();
    drop(client);
    Err(StoreError::Unavailable("LISTEN connection closed".into()))
}
