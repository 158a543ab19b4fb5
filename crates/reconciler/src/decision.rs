//! What a provider lookup means for an UNKNOWN operation: one pure function, so that
//! every rule is tested case by case.
//!
//! | lookup says                       | verdict                                          |
//! |-----------------------------------|--------------------------------------------------|
//! | succeeded                         | SUCCEEDED with the provider's reference          |
//! | failed (declined)                 | FAILED with the provider's code                  |
//! | pending                           | UNKNOWN, next check after backoff                |
//! | not found, within the grace period| UNKNOWN, next check after backoff, whatever the check count |
//! | not found, past the grace period  | MANUAL_REVIEW (or FAILED if lookups are authoritative) |
//! | lookup failed or timed out        | UNKNOWN, next check after backoff                |
//! | still UNKNOWN after the check or age limit | MANUAL_REVIEW with the reason           |
//!
//! "Not found" within the grace is what an eventually consistent provider answers for
//! an operation it did commit (its lookup lags its writes): the grace, not the number
//! of checks, bounds how long that is believed, so a short backoff cannot turn lookup
//! lag into a MANUAL_REVIEW. Only the age limit ends it sooner.

use std::time::Duration;

use opgate_domain::backoff::retry_delay;
use opgate_domain::{OperationStatus, Transition};
use opgate_provider::{LookupOutcome, ProviderOutcome};

#[derive(Debug, Clone)]
pub struct Policy {
    /// Checks without a conclusion before MANUAL_REVIEW.
    pub max_checks: u32,
    /// Time since the operation became UNKNOWN past which an inconclusive check
    /// escalates.
    pub max_age: Duration,
    /// How long "not found" may just mean "not visible yet".
    pub not_found_grace: Duration,
    /// The provider's lookup is complete: "not found" past the grace means it never
    /// happened, so FAILED rather than MANUAL_REVIEW.
    pub not_found_authoritative: bool,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

/// `checks` counts this lookup; `age` is the time since the operation became UNKNOWN.
pub fn decide(lookup: &LookupOutcome, checks: u32, age: Duration, policy: &Policy) -> Transition {
    let check_again = |why: String, reference: Option<String>| Transition {
        to: OperationStatus::Unknown,
        provider_reference: reference,
        last_error: Some(why.clone()),
        reason: why,
        next_check_in: Some(retry_delay(
            checks.saturating_sub(1),
            policy.backoff_base,
            policy.backoff_max,
        )),
    };
    let escalate = |why: String, reference: Option<String>| Transition {
        to: OperationStatus::ManualReview,
        provider_reference: reference,
        last_error: Some(why.clone()),
        reason: format!("no conclusion after {checks} checks ({why}); needs an operator"),
        next_check_in: None,
    };
    let inconclusive = |why: String, reference: Option<String>| {
        if checks >= policy.max_checks || age >= policy.max_age {
            escalate(why, reference)
        } else {
            check_again(why, reference)
        }
    };
    match lookup {
        LookupOutcome::Found(ProviderOutcome::Succeeded { reference }) => Transition {
            to: OperationStatus::Succeeded,
            provider_reference: Some(reference.clone()),
            last_error: None,
            reason: "provider lookup: operation succeeded".into(),
            next_check_in: None,
        },
        LookupOutcome::Found(ProviderOutcome::Declined { reference, code }) => Transition {
            to: OperationStatus::Failed,
            provider_reference: reference.clone(),
            last_error: Some(format!("declined by the provider: {code}")),
            reason: "provider lookup: operation failed".into(),
            next_check_in: None,
        },
        LookupOutcome::Found(ProviderOutcome::Pending { reference }) => inconclusive(
            "provider reports the operation as pending".into(),
            reference.clone(),
        ),
        LookupOutcome::Found(other) => {
            inconclusive(format!("provider lookup gave no outcome: {other:?}"), None)
        }
        LookupOutcome::NotFound if age >= policy.not_found_grace => {
            let why = format!(
                "provider has no record of the operation {} after its outcome became unknown",
                humantime::format_duration(Duration::from_secs(age.as_secs()))
            );
            if policy.not_found_authoritative {
                Transition {
                    to: OperationStatus::Failed,
                    provider_reference: None,
                    last_error: Some(why),
                    reason: "provider lookup (authoritative): no such operation".into(),
                    next_check_in: None,
                }
            } else {
                Transition {
                    to: OperationStatus::ManualReview,
                    provider_reference: None,
                    last_error: Some(why.clone()),
                    reason: format!("{why}; needs an operator"),
                    next_check_in: None,
                }
            }
        }
        LookupOutcome::NotFound => {
            let why = "provider has no record of the operation yet".to_owned();
            if age >= policy.max_age {
                escalate(why, None)
            } else {
                check_again(why, None)
            }
        }
        LookupOutcome::Unavailable { cause } => {
            inconclusive(format!("provider lookup failed: {cause}"), None)
        }
    }
}

/// The reconciliation outcome as the metrics count it (`opgate_reconciliations_total`).
pub fn outcome_label(lookup: &LookupOutcome, verdict: OperationStatus) -> &'static str {
    match (verdict, lookup) {
        (OperationStatus::Succeeded, _) => "succeeded",
        (OperationStatus::Failed, _) => "failed",
        (OperationStatus::ManualReview, _) => "manual_review",
        (_, LookupOutcome::NotFound) => "not_found",
        (_, LookupOutcome::Unavailable { .. }) => "lookup_failed",
        _ => "pending",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationStatus::*;

    fn policy() -> Policy {
        Policy {
            max_checks: 5,
            max_age: Duration::from_secs(3600),
            not_found_grace: Duration::from_secs(60),
            not_found_authoritative: false,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }

    const YOUNG: Duration = Duration::from_secs(5);
    const OLD: Duration = Duration::from_secs(120);

    fn found(outcome: ProviderOutcome) -> LookupOutcome {
        LookupOutcome::Found(outcome)
    }

    #[test]
    fn a_success_at_the_provider_succeeds_with_its_reference() {
        let v = decide(
            &found(ProviderOutcome::Succeeded {
                reference: "pay_1".into(),
            }),
            1,
            YOUNG,
            &policy(),
        );
        assert_eq!(
            (v.to, v.provider_reference.as_deref()),
            (Succeeded, Some("pay_1"))
        );
        assert_eq!(v.next_check_in, None);
    }

    #[test]
    fn a_decline_at_the_provider_fails_with_its_code() {
        let v = decide(
            &found(ProviderOutcome::Declined {
                reference: Some("pay_2".into()),
                code: "card_declined".into(),
            }),
            1,
            YOUNG,
            &policy(),
        );
        assert_eq!(v.to, Failed);
        assert!(v.last_error.unwrap().contains("card_declined"));
    }

    #[test]
    fn pending_stays_unknown_with_growing_backoff() {
        let pending = found(ProviderOutcome::Pending {
            reference: Some("pay_3".into()),
        });
        let first = decide(&pending, 1, YOUNG, &policy());
        assert_eq!(first.to, Unknown);
        assert_eq!(first.provider_reference.as_deref(), Some("pay_3"));
        let first_delay = first.next_check_in.unwrap();
        assert!(first_delay <= Duration::from_secs(1));
        let fourth = decide(&pending, 4, YOUNG, &policy()).next_check_in.unwrap();
        assert!(
            fourth >= Duration::from_secs(4) && fourth <= Duration::from_secs(8),
            "{fourth:?}"
        );
    }

    #[test]
    fn lookup_errors_stay_unknown_then_escalate_at_the_limit() {
        let down = LookupOutcome::Unavailable {
            cause: "timeout".into(),
        };
        assert_eq!(decide(&down, 4, YOUNG, &policy()).to, Unknown);
        let last = decide(&down, 5, YOUNG, &policy());
        assert_eq!(last.to, ManualReview);
        assert!(last.reason.contains("5 checks"), "{}", last.reason);
    }

    #[test]
    fn old_operations_escalate_whatever_the_count() {
        let mut p = policy();
        p.max_age = Duration::from_secs(100);
        let pending = found(ProviderOutcome::Pending { reference: None });
        assert_eq!(decide(&pending, 1, OLD, &p).to, ManualReview);
    }

    #[test]
    fn not_found_waits_out_the_grace_then_needs_an_operator() {
        assert_eq!(
            decide(&LookupOutcome::NotFound, 1, YOUNG, &policy()).to,
            Unknown
        );
        let v = decide(&LookupOutcome::NotFound, 2, OLD, &policy());
        assert_eq!(v.to, ManualReview);
        assert!(v.last_error.unwrap().contains("no record"));
    }

    #[test]
    fn not_found_within_the_grace_stays_unknown_however_many_checks_lookup_lag_takes() {
        let p = policy();
        for checks in [p.max_checks - 1, p.max_checks, p.max_checks * 10] {
            let v = decide(&LookupOutcome::NotFound, checks, YOUNG, &p);
            assert_eq!(v.to, Unknown, "check {checks}");
            assert!(v.next_check_in.is_some());
        }
        // The age limit still ends it, and the grace's end is an answer as before.
        let mut short = policy();
        short.max_age = Duration::from_secs(5);
        let old = decide(&LookupOutcome::NotFound, 1, YOUNG, &short);
        assert_eq!(old.to, ManualReview);
        assert!(old.reason.contains("no record of the operation yet"));
        assert_eq!(
            decide(&LookupOutcome::NotFound, p.max_checks * 10, OLD, &p).to,
            ManualReview
        );
        // Other inconclusive answers still count against the checks.
        let down = LookupOutcome::Unavailable { cause: "x".into() };
        assert_eq!(decide(&down, p.max_checks, YOUNG, &p).to, ManualReview);
    }

    #[test]
    fn an_authoritative_not_found_past_the_grace_is_a_failure() {
        let mut p = policy();
        p.not_found_authoritative = true;
        assert_eq!(decide(&LookupOutcome::NotFound, 1, YOUNG, &p).to, Unknown);
        assert_eq!(decide(&LookupOutcome::NotFound, 2, OLD, &p).to, Failed);
    }

    #[test]
    fn every_verdict_is_an_allowed_transition_from_reconciling() {
        let lookups = [
            found(ProviderOutcome::Succeeded {
                reference: "r".into(),
            }),
            found(ProviderOutcome::Declined {
                reference: None,
                code: "c".into(),
            }),
            found(ProviderOutcome::Pending { reference: None }),
            found(ProviderOutcome::Uncertain { cause: "?".into() }),
            LookupOutcome::NotFound,
            LookupOutcome::Unavailable {
                cause: "down".into(),
            },
        ];
        for lookup in &lookups {
            for (checks, age) in [(1, YOUNG), (9, YOUNG), (1, OLD)] {
                let v = decide(lookup, checks, age, &policy());
                assert!(
                    OperationStatus::can_transition(Reconciling, v.to),
                    "{lookup:?} -> {v:?}"
                );
            }
        }
    }

    #[test]
    fn the_limits_are_reached_at_their_values_not_after() {
        let mut p = policy();
        p.max_age = Duration::from_secs(100);
        let pending = found(ProviderOutcome::Pending { reference: None });
        let at = |checks, secs| decide(&pending, checks, Duration::from_secs(secs), &p).to;
        assert_eq!(at(4, 99), Unknown);
        assert_eq!(at(5, 99), ManualReview, "at the check limit");
        assert_eq!(at(1, 100), ManualReview, "at the age limit");
        // The grace period ends at its value too.
        let not_found = |secs| {
            decide(
                &LookupOutcome::NotFound,
                1,
                Duration::from_secs(secs),
                &policy(),
            )
            .to
        };
        assert_eq!(not_found(59), Unknown);
        assert_eq!(not_found(60), ManualReview);
    }

    #[test]
    fn an_escalation_keeps_what_is_known_and_says_why() {
        let pending = found(ProviderOutcome::Pending {
            reference: Some("pay_9".into()),
        });
        let v = decide(&pending, 5, YOUNG, &policy());
        assert_eq!(v.to, ManualReview);
        assert_eq!(v.provider_reference.as_deref(), Some("pay_9"));
        assert_eq!(
            v.last_error.as_deref(),
            Some("provider reports the operation as pending")
        );
        assert_eq!(
            v.reason,
            "no conclusion after 5 checks (provider reports the operation as pending); needs an operator"
        );
        assert_eq!(v.next_check_in, None);
        let still = decide(&pending, 1, YOUNG, &policy());
        assert_eq!(still.reason, "provider reports the operation as pending");
        assert_eq!(still.provider_reference.as_deref(), Some("pay_9"));
    }

    #[test]
    fn a_lookup_that_is_no_outcome_stays_unknown_and_says_so() {
        let v = decide(
            &found(ProviderOutcome::Uncertain {
                cause: "unreadable".into(),
            }),
            1,
            YOUNG,
            &policy(),
        );
        assert_eq!(v.to, Unknown);
        assert!(v
            .last_error
            .unwrap()
            .starts_with("provider lookup gave no outcome"));
        let down = decide(
            &LookupOutcome::Unavailable {
                cause: "refused".into(),
            },
            1,
            YOUNG,
            &policy(),
        );
        assert_eq!(
            down.last_error.as_deref(),
            Some("provider lookup failed: refused")
        );
        let not_yet = decide(&LookupOutcome::NotFound, 1, YOUNG, &policy());
        assert_eq!(
            not_yet.last_error.as_deref(),
            Some("provider has no record of the operation yet")
        );
    }

    #[test]
    fn the_backoff_doubles_with_each_inconclusive_check_up_to_its_maximum() {
        let mut p = policy();
        p.backoff_max = Duration::from_secs(8);
        let pending = found(ProviderOutcome::Pending { reference: None });
        for (checks, ceiling) in [(1u32, 1u64), (2, 2), (3, 4), (4, 8), (5, 8)] {
            p.max_checks = 10;
            let delay = decide(&pending, checks, YOUNG, &p).next_check_in.unwrap();
            let ceiling = Duration::from_secs(ceiling);
            assert!(
                delay <= ceiling && delay >= ceiling / 2,
                "check {checks}: {delay:?}"
            );
        }
    }

    #[test]
    fn the_not_found_verdicts_name_the_age_and_whether_lookups_are_authoritative() {
        let review = decide(&LookupOutcome::NotFound, 2, OLD, &policy());
        assert_eq!(
            review.last_error.as_deref(),
            Some("provider has no record of the operation 2m after its outcome became unknown")
        );
        assert!(review.reason.ends_with("; needs an operator"));
        let mut p = policy();
        p.not_found_authoritative = true;
        let failed = decide(&LookupOutcome::NotFound, 2, OLD, &p);
        assert_eq!(
            failed.reason,
            "provider lookup (authoritative): no such operation"
        );
        assert_eq!(failed.next_check_in, None);
    }

    #[test]
    fn every_verdict_is_counted_under_its_own_label() {
        let succeeded = found(ProviderOutcome::Succeeded {
            reference: "r".into(),
        });
        let pending = found(ProviderOutcome::Pending { reference: None });
        let down = LookupOutcome::Unavailable { cause: "x".into() };
        assert_eq!(outcome_label(&succeeded, Succeeded), "succeeded");
        assert_eq!(outcome_label(&pending, Failed), "failed");
        assert_eq!(outcome_label(&down, ManualReview), "manual_review");
        assert_eq!(
            outcome_label(&LookupOutcome::NotFound, Unknown),
            "not_found"
        );
        assert_eq!(outcome_label(&down, Unknown), "lookup_failed");
        assert_eq!(outcome_label(&pending, Unknown), "pending");
    }
}
