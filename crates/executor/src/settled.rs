//! Announces terminal operations (for intake's `Prefer: wait`), after their commit,
//! coalesced: whatever settled while the previous NOTIFY ran goes out in one statement.

use opgate_store::Store;
use tokio::sync::mpsc;
use uuid::Uuid;

#[derive(Clone)]
pub struct SettledNotifier {
    sender: mpsc::UnboundedSender<Uuid>,
}

impl SettledNotifier {
    pub fn spawn(store: Store) -> Self {
        let (sender, mut receiver) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(first) = receiver.recv().await {
                batch.push(first);
                while let Ok(next) = receiver.try_recv() {
                    batch.push(next);
                }
                if let Err(error) = store.notify_settled(&batch).await {
                    tracing::debug!(%error, "could not announce settled operations; waiters poll");
                }
                batch.clear();
            }
        });
        Self { sender }
    }

    pub fn settled(&self, operation_id: Uuid) {
        let _ = self.sender.send(operation_id);
    }
}
