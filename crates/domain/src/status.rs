//! The operation state machine. The allowed transitions live here and nowhere else;
//! the database mirrors the set of states with a CHECK constraint.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationStatus {
    AwaitingApproval,
    Pending,
    InProgress,
    Succeeded,
    Failed,
    Unknown,
    Reconciling,
    ManualReview,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation status {0:?}")]
pub struct UnknownStatus(pub String);

impl OperationStatus {
    pub const ALL: [OperationStatus; 8] = [
        Self::AwaitingApproval,
        Self::Pending,
        Self::InProgress,
        Self::Succeeded,
        Self::Failed,
        Self::Unknown,
        Self::Reconciling,
        Self::ManualReview,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingApproval => "AWAITING_APPROVAL",
            Self::Pending => "PENDING",
            Self::InProgress => "IN_PROGRESS",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Unknown => "UNKNOWN",
            Self::Reconciling => "RECONCILING",
            Self::ManualReview => "MANUAL_REVIEW",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    /// The one definition of which transitions exist (docs/architecture.md, "States").
    pub fn can_transition(from: Self, to: Self) -> bool {
        use OperationStatus::*;
        matches!(
            (from, to),
            (AwaitingApproval, Pending | Failed)
                | (Pending, InProgress)
                | (InProgress, Succeeded | Failed | Unknown | Pending)
                | (Unknown, Reconciling)
                | (Reconciling, Succeeded | Failed | Unknown | ManualReview)
                | (ManualReview, Succeeded | Failed | Unknown)
        )
    }

    /// Seconds an agent should wait before checking a non-terminal operation again
    /// (sent as `Retry-After`); `None` once terminal.
    pub fn check_again_after_secs(self) -> Option<u32> {
        match self {
            Self::AwaitingApproval => Some(60),
            Self::Pending | Self::InProgress => Some(1),
            Self::Unknown | Self::Reconciling => Some(10),
            Self::ManualReview => Some(300),
            Self::Succeeded | Self::Failed => None,
        }
    }

    /// What the agent should do next, in machine-readable form (the operation body's
    /// `next.action`).
    pub fn next_action(self) -> NextAction {
        match self {
            Self::AwaitingApproval => NextAction::WaitForApproval,
            Self::Succeeded => NextAction::Done,
            Self::Failed => NextAction::NewKeyRequired,
            Self::Pending
            | Self::InProgress
            | Self::Unknown
            | Self::Reconciling
            | Self::ManualReview => NextAction::Poll,
        }
    }

    /// Plain guidance for the agent that asked for the operation.
    pub fn agent_message(self) -> &'static str {
        match self {
            Self::AwaitingApproval => "Operation accepted; it waits for a person to approve it and nothing is sent before then. Do not submit a new request for it; check this operation again in about 1 minute.",
            Self::Pending => "Operation accepted and queued. Do not submit a new request for it; check this operation again in about 1 second.",
            Self::InProgress => "Operation is being executed. Do not submit a new request for it; check this operation again in about 1 second.",
            Self::Succeeded => "Operation succeeded.",
            Self::Failed => "Operation failed. A new attempt needs a new Idempotency-Key.",
            Self::Unknown | Self::Reconciling => "Outcome is being reconciled with the provider. Do not submit a new request for it; check this operation again in about 10 seconds.",
            Self::ManualReview => "Outcome could not be determined automatically and awaits an operator. Do not submit a new request for it; check this operation again in about 5 minutes.",
        }
    }
}

/// The next step an agent takes for an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAction {
    /// Not settled: read it again after `check_again_after_secs`, never re-submit it.
    Poll,
    /// An operator must approve it first; read it again later, never re-submit it.
    WaitForApproval,
    /// It succeeded; nothing more to do.
    Done,
    /// It failed for good: trying again is a new operation and needs a new key.
    NewKeyRequired,
}

impl NextAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Poll => "poll",
            Self::WaitForApproval => "wait_for_approval",
            Self::Done => "done",
            Self::NewKeyRequired => "new_key_required",
        }
    }
}

impl fmt::Display for OperationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperationStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::OperationStatus::*;
    use super::*;

    #[test]
    fn names_round_trip() {
        for status in OperationStatus::ALL {
            assert_eq!(status.as_str().parse::<OperationStatus>(), Ok(status));
        }
        assert!("DONE".parse::<OperationStatus>().is_err());
    }

    #[test]
    fn statuses_and_next_actions_read_as_the_api_spells_them() {
        assert_eq!(ManualReview.to_string(), "MANUAL_REVIEW");
        assert_eq!(
            format!("{InProgress} -> {Unknown}"),
            "IN_PROGRESS -> UNKNOWN"
        );
        let actions = [
            (NextAction::Poll, "poll"),
            (NextAction::WaitForApproval, "wait_for_approval"),
            (NextAction::Done, "done"),
            (NextAction::NewKeyRequired, "new_key_required"),
        ];
        for (action, name) in actions {
            assert_eq!(action.as_str(), name);
        }
    }

    #[test]
    fn allowed_transitions_follow_the_design() {
        let allowed = [
            (AwaitingApproval, Pending),
            (AwaitingApproval, Failed),
            (Pending, InProgress),
            (InProgress, Succeeded),
            (InProgress, Failed),
            (InProgress, Unknown),
            (InProgress, Pending),
            (Unknown, Reconciling),
            (Reconciling, Succeeded),
            (Reconciling, Failed),
            (Reconciling, Unknown),
            (Reconciling, ManualReview),
            (ManualReview, Succeeded),
            (ManualReview, Failed),
            (ManualReview, Unknown),
        ];
        for from in OperationStatus::ALL {
            for to in OperationStatus::ALL {
                assert_eq!(
                    OperationStatus::can_transition(from, to),
                    allowed.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn every_unsettled_state_tells_the_agent_not_to_pay_again_and_when_to_look() {
        for status in OperationStatus::ALL {
            let message = status.agent_message();
            match status.check_again_after_secs() {
                None => assert!(status.is_terminal()),
                Some(_) => {
                    assert!(
                        message.contains("Do not submit a new request for it"),
                        "{status}"
                    );
                    assert!(message.contains("check this operation again"), "{status}");
                }
            }
        }
    }

    #[test]
    fn every_state_has_a_next_step_that_agrees_with_its_wait() {
        for status in OperationStatus::ALL {
            let action = status.next_action();
            assert_eq!(
                matches!(action, NextAction::Poll | NextAction::WaitForApproval),
                status.check_again_after_secs().is_some(),
                "{status}"
            );
        }
        assert_eq!(Succeeded.next_action(), NextAction::Done);
        assert_eq!(Failed.next_action(), NextAction::NewKeyRequired);
    }

    #[test]
    fn terminal_states_have_no_way_out() {
        for to in OperationStatus::ALL {
            assert!(!OperationStatus::can_transition(Succeeded, to));
            assert!(!OperationStatus::can_transition(Failed, to));
        }
        assert!(Succeeded.is_terminal() && Failed.is_terminal());
        assert!(!Unknown.is_terminal());
    }

    #[test]
    fn an_unknown_outcome_is_concluded_only_through_reconciliation() {
        for to in OperationStatus::ALL {
            assert_eq!(
                OperationStatus::can_transition(Unknown, to),
                to == Reconciling,
                "UNKNOWN -> {to}"
            );
        }
        // What the state machine cannot do: IN_PROGRESS -> FAILED is allowed (a refusal,
        // or proof the request never left), so nothing here tells a timeout from a
        // refusal. The executor's rules keep every timeout out of FAILED
        // (opgate-executor rules::tests::every_answer_in_every_situation_leads_to_its_rule,
        // no_answer_without_evidence_ever_fails), and the end-to-end test
        // executor_timeouts.rs shows it on a real timeout.
        assert!(OperationStatus::can_transition(InProgress, Failed));
    }
}
