//! Group commit for registrations: requests that arrive together are registered by one
//! statement (see `opgate_store::GroupCommit` for the guarantees it keeps). Budgeted
//! registrations have their own batches: one transaction with a statement for each, in
//! queue order (`opgate_store::PendingBudgeted`).

use opgate_store::{
    BatchAnswer, BudgetedRegistration, GroupCommit, PendingBudgeted, PendingRegistration, Store,
    StoreError,
};

pub type RegistrationBatcher = GroupCommit<PendingRegistration, BatchAnswer>;

pub type BudgetedBatcher = GroupCommit<PendingBudgeted, Result<BudgetedRegistration, StoreError>>;

/// Budgeted batches in flight at once per HTTP worker: one holding its agents' locks
/// and committing, one gathering the next and queued on the locks behind it. More
/// would only hold connections the other registrations need, waiting on the same lock.
const BUDGETED_COMMITTERS: usize = 2;

pub fn spawn(store: Store, committers: usize, max_batch: usize) -> RegistrationBatcher {
    GroupCommit::spawn(store, committers, max_batch, |store, batch| async move {
        store.register_batch(&batch).await
    })
}

pub fn spawn_budgeted(store: Store, committers: usize, max_batch: usize) -> BudgetedBatcher {
    let committers = committers.min(BUDGETED_COMMITTERS);
    GroupCommit::spawn(store, committers, max_batch, |store, batch| async move {
        store.register_budgeted_batch(&batch).await
    })
}
