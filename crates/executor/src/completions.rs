//! Group commit for completions: outcomes that arrive together are written by one
//! fenced multi-row statement (one commit), each still refused on its own if its
//! fencing token has moved on. Nothing after the write (metrics, the settled
//! announcement) happens before its batch has committed.

use std::sync::Arc;

use opgate_store::{FencedTransition, FencedWrite, GroupCommit, Store, StoreError};

#[derive(Clone)]
pub enum Completions {
    Batched(GroupCommit<FencedTransition, FencedWrite>),
    /// One transaction per completion (`--group-commit false`).
    Single {
        store: Store,
        owner: Arc<str>,
    },
}

/// Completion batches in flight at once (each holds a connection).
const COMMITTERS: usize = 2;

impl Completions {
    pub fn new(store: Store, owner: &str, group_commit: bool, max_batch: usize) -> Self {
        let owner: Arc<str> = owner.into();
        if !group_commit {
            return Self::Single { store, owner };
        }
        Self::Batched(GroupCommit::spawn(
            store,
            COMMITTERS,
            max_batch,
            move |store, batch| {
                let owner = owner.clone();
                async move { store.transition_batch_with_fence(&owner, &batch).await }
            },
        ))
    }

    pub async fn write(&self, transition: FencedTransition) -> Result<FencedWrite, StoreError> {
        match self {
            Self::Batched(batcher) => batcher.submit(transition).await,
            Self::Single { store, owner } => {
                let writes = store
                    .transition_batch_with_fence(owner, std::slice::from_ref(&transition))
                    .await?;
                Ok(writes[0])
            }
        }
    }
}
