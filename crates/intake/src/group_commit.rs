//! Group commit: registrations that arrive together share one transaction. A few
//! committer tasks each take whatever is queued (up to a batch limit) and register it
//! with one statement; a lone request is taken at once, so batching costs it nothing.
//! Each request still gets its own answer (new, replay or 409), a failed batch fails
//! only the requests in it, and nobody is answered before their batch has committed.

use std::sync::Arc;

use opgate_store::{PendingRegistration, Registration, Store, StoreError};
use tokio::sync::{mpsc, oneshot, Mutex};
use tracing::Instrument;

struct Job {
    registration: PendingRegistration,
    reply: oneshot::Sender<Result<Registration, StoreError>>,
    /// The requester's span: the batch's statement is traced under the first one's.
    span: tracing::Span,
}

#[derive(Clone)]
pub struct RegistrationBatcher {
    sender: mpsc::Sender<Job>,
}

impl RegistrationBatcher {
    pub fn spawn(store: Store, committers: usize, max_batch: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Job>(max_batch * committers * 4);
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..committers.max(1) {
            let (store, receiver) = (store.clone(), receiver.clone());
            tokio::spawn(async move {
                while let Some(batch) = next_batch(&receiver, max_batch.max(1)).await {
                    commit(&store, batch).await;
                }
            });
        }
        Self { sender }
    }

    pub async fn register(
        &self,
        registration: PendingRegistration,
    ) -> Result<Registration, StoreError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            registration,
            reply,
            span: tracing::Span::current(),
        };
        self.sender
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable("registration queue closed".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("registration was dropped".into()))?
    }
}

/// Waits for one job, then takes whatever else is already queued.
async fn next_batch(receiver: &Mutex<mpsc::Receiver<Job>>, max_batch: usize) -> Option<Vec<Job>> {
    let mut receiver = receiver.lock().await;
    let first = receiver.recv().await?;
    let mut batch = vec![first];
    while batch.len() < max_batch {
        match receiver.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

async fn commit(store: &Store, batch: Vec<Job>) {
    let registrations: Vec<PendingRegistration> =
        batch.iter().map(|job| job.registration.clone()).collect();
    let span = batch[0].span.clone();
    match store.register_batch(&registrations).instrument(span).await {
        Ok(answers) => {
            for (job, answer) in batch.into_iter().zip(answers) {
                let _ = job.reply.send(Ok(answer));
            }
        }
        Err(error) => {
            tracing::warn!(size = batch.len(), %error, "registration batch failed");
            for job in batch {
                let _ = job.reply.send(Err(error.for_batch_member()));
            }
        }
    }
}
