//! What a worker writes when it moves a leased operation on: the one "what to write"
//! type shared by the executor's outcome mapping, the reconciler's verdicts and the
//! store's fenced transition.

use std::time::Duration;

use crate::status::OperationStatus;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub to: OperationStatus,
    /// Kept when `None`: a reference learnt earlier is never erased.
    pub provider_reference: Option<String>,
    pub last_error: Option<String>,
    /// For the audit trail.
    pub reason: String,
    /// For UNKNOWN: when the reconciler should check (at once when `None`).
    pub next_check_in: Option<Duration>,
}

impl Transition {
    pub fn to(to: OperationStatus, reason: impl Into<String>) -> Self {
        Self {
            to,
            provider_reference: None,
            last_error: None,
            reason: reason.into(),
            next_check_in: None,
        }
    }

    pub fn with_reference(mut self, reference: Option<String>) -> Self {
        self.provider_reference = reference;
        self
    }

    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.last_error = Some(error.into());
        self
    }

    pub fn check_again_in(mut self, delay: Duration) -> Self {
        self.next_check_in = Some(delay);
        self
    }
}
