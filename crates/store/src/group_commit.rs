//! Group commit: work items that arrive together share one statement (one transaction,
//! one commit). A few committer tasks each take whatever is queued, up to a batch
//! limit, and hand it to a batch method of the store; a lone item is taken at once,
//! so batching costs it nothing. Each submitter gets its own answer, a failed batch
//! fails only the items in it, and nobody is answered before their batch committed.
//! Intake batches registrations with it, the executor its completions.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};
use tracing::Instrument;

use crate::error::StoreError;
use crate::pool::Store;

struct Job<I, A> {
    item: I,
    reply: oneshot::Sender<Result<A, StoreError>>,
    /// The submitter's span: the batch's statement is traced under the first one's.
    span: tracing::Span,
}

pub struct GroupCommit<I, A> {
    sender: mpsc::Sender<Job<I, A>>,
}

impl<I, A> Clone for GroupCommit<I, A> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
        }
    }
}

impl<I: Send + 'static, A: Send + 'static> GroupCommit<I, A> {
    /// `commit` writes a batch and answers each item in order (`Ok` with one answer per
    /// item), or fails the whole batch with nothing of it written.
    pub fn spawn<F, Fut>(store: Store, committers: usize, max_batch: usize, commit: F) -> Self
    where
        F: Fn(Store, Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<A>, StoreError>> + Send,
    {
        let max_batch = max_batch.max(1);
        let committers = committers.max(1);
        let (sender, receiver) = mpsc::channel::<Job<I, A>>(max_batch * committers * 4);
        let receiver = Arc::new(Mutex::new(receiver));
        let commit = Arc::new(commit);
        for _ in 0..committers {
            let (store, receiver, commit) = (store.clone(), receiver.clone(), commit.clone());
            tokio::spawn(async move {
                while let Some(batch) = next_batch(&receiver, max_batch).await {
                    run_batch(&store, commit.as_ref(), batch).await;
                }
            });
        }
        Self { sender }
    }

    pub async fn submit(&self, item: I) -> Result<A, StoreError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            item,
            reply,
            span: tracing::Span::current(),
        };
        self.sender
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable("group-commit queue closed".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("group-commit item was dropped".into()))?
    }
}

/// Waits for one job, then takes whatever else is already queued.
async fn next_batch<I, A>(
    receiver: &Mutex<mpsc::Receiver<Job<I, A>>>,
    max_batch: usize,
) -> Option<Vec<Job<I, A>>> {
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

async fn run_batch<I, A, F, Fut>(store: &Store, commit: &F, batch: Vec<Job<I, A>>)
where
    F: Fn(Store, Vec<I>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StoreError>>,
{
    let size = batch.len();
    let span = batch[0].span.clone();
    let (items, waiting): (Vec<I>, Vec<_>) =
        batch.into_iter().map(|job| (job.item, job.reply)).unzip();
    match commit(store.clone(), items).instrument(span).await {
        Ok(answers) if answers.len() == size => {
            for (reply, answer) in waiting.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Ok(answers) => {
            let error = StoreError::Corrupt(format!(
                "a batch of {size} was answered {} times",
                answers.len()
            ));
            for reply in waiting {
                let _ = reply.send(Err(error.for_batch_member()));
            }
        }
        Err(error) => {
            tracing::warn!(size, %error, "group-commit batch failed");
            for reply in waiting {
                let _ = reply.send(Err(error.for_batch_member()));
            }
        }
    }
}
