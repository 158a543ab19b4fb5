//! Group commit for registrations: requests that arrive together are registered by one
//! statement (see `opgate_store::GroupCommit` for the guarantees it keeps).

use opgate_store::{BatchAnswer, GroupCommit, PendingRegistration, Store};

pub type RegistrationBatcher = GroupCommit<PendingRegistration, BatchAnswer>;

pub fn spawn(store: Store, committers: usize, max_batch: usize) -> RegistrationBatcher {
    GroupCommit::spawn(store, committers, max_batch, |store, batch| async move {
        store.register_batch(&batch).await
    })
}
