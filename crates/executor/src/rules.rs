//! What the executor makes of a claim and of each provider answer: pure functions, so
//! that every rule is tested case by case (the worker only carries them out).
//!
//! | provider says                                  | next step                               |
//! |------------------------------------------------|-----------------------------------------|
//! | succeeded                                      | SUCCEEDED with the reference            |
//! | declined                                       | FAILED with the provider's code         |
//! | pending                                        | UNKNOWN: the reconciler follows up      |
//! | definitive refusal, nothing sent before        | FAILED with the provider's error        |
//! | definitive refusal after an uncertain attempt  | UNKNOWN (the earlier attempt may have done it) |
//! | not sent, nothing sent before                  | requeue with backoff; FAILED past the attempts |
//! | not sent after an uncertain attempt, uncertain | same key again while attempts last and the provider deduplicates; else UNKNOWN |
//! | uncertain, and the provider advises no retry   | UNKNOWN at once                         |

use std::time::Duration;

use opgate_domain::backoff::retry_delay;
use opgate_domain::{OperationStatus, Transition};
use opgate_provider::ProviderOutcome;

/// What is known when an answer arrives.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    /// Whether any earlier request (this claim's, or a previous owner's) may have
    /// reached the provider.
    pub maybe_sent: bool,
    /// Provider calls made for the operation so far, this one included.
    pub calls: u32,
    pub max_attempts: u32,
    /// The provider deduplicates by key, so the same request may be sent again.
    pub keyed_retries_safe: bool,
    /// Requeues so far (for the requeue backoff).
    pub retry_count: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Write(Transition),
    /// The request never left: put the operation back with a delay.
    Requeue {
        delay: Duration,
        error: String,
    },
    /// Send again under the same key (after the worker's own backoff).
    RetrySameKey {
        cause: String,
    },
}

/// The step an answer leads to.
pub fn after_answer(outcome: ProviderOutcome, attempt: &Attempt) -> Step {
    use OperationStatus::*;
    let uncertain_cause = match outcome {
        ProviderOutcome::Succeeded { reference } => {
            return Step::Write(
                Transition::to(Succeeded, "provider confirmed the operation")
                    .with_reference(Some(reference)),
            )
        }
        ProviderOutcome::Declined { reference, code } => {
            return Step::Write(
                Transition::to(Failed, "provider declined")
                    .with_reference(reference)
                    .with_error(format!("declined by the provider: {code}")),
            )
        }
        // A refusal proves nothing about an earlier attempt that may have reached the
        // provider: only a first-hand refusal is a failure.
        ProviderOutcome::Rejected { status, detail } if !attempt.maybe_sent => {
            return Step::Write(
                Transition::to(Failed, "provider rejected the request").with_error(format!(
                    "provider rejected the request (HTTP {status}): {detail}"
                )),
            )
        }
        ProviderOutcome::Rejected { status, detail } => {
            return Step::Write(
                Transition::to(Unknown, "outcome uncertain; the reconciler follows up")
                    .with_error(format!(
                        "provider rejected a retry (HTTP {status}): {detail}; an earlier attempt may have reached it"
                    )),
            )
        }
        ProviderOutcome::Pending { reference } => {
            return Step::Write(
                Transition::to(Unknown, "pending at the provider; the reconciler follows up")
                    .with_reference(reference)
                    .with_error("provider reports the operation as pending"),
            )
        }
        ProviderOutcome::NotSent { cause } if !attempt.maybe_sent => {
            if attempt.calls >= attempt.max_attempts {
                return Step::Write(
                    Transition::to(Failed, "never reached the provider").with_error(format!(
                        "never reached the provider after {} attempts: {cause}",
                        attempt.calls
                    )),
                );
            }
            return Step::Requeue {
                delay: retry_delay(attempt.retry_count, attempt.retry_base, attempt.retry_max),
                error: cause,
            };
        }
        ProviderOutcome::UncertainFinal { cause } => {
            return Step::Write(
                Transition::to(
                    Unknown,
                    "outcome uncertain and the provider advises against a retry; the reconciler follows up",
                )
                .with_error(cause),
            )
        }
        ProviderOutcome::NotSent { cause } | ProviderOutcome::Uncertain { cause } => cause,
    };
    if !attempt.keyed_retries_safe || attempt.calls >= attempt.max_attempts {
        return Step::Write(
            Transition::to(Unknown, "outcome uncertain; the reconciler follows up")
                .with_error(uncertain_cause),
        );
    }
    Step::RetrySameKey {
        cause: uncertain_cause,
    }
}

/// What is known about a claim before any call.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    /// A previous owner's lease expired while the operation was IN_PROGRESS.
    pub taken_over: bool,
    /// Claims so far, this one included (each claim counts as an attempt).
    pub attempts: u32,
    pub max_attempts: u32,
    pub keyed_retries_safe: bool,
}

/// A claim that must not be sent at all, and what to write instead; `None` to call.
pub fn before_call(claim: &Claim) -> Option<Transition> {
    if !claim.taken_over {
        return None;
    }
    if !claim.keyed_retries_safe {
        return Some(
            Transition::to(
                OperationStatus::Unknown,
                "abandoned mid-call; not re-sent because keyed retries are off",
            )
            .with_error("a previous executor's lease expired during execution"),
        );
    }
    // An operation whose every execution ends with its executor gone (a crash it
    // causes, say) is not sent again forever.
    if claim.attempts > claim.max_attempts {
        return Some(
            Transition::to(
                OperationStatus::Unknown,
                "abandoned mid-call with no attempts left; the reconciler follows up",
            )
            .with_error(format!(
                "abandoned mid-call; not re-sent after {} attempts",
                claim.attempts - 1
            )),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationStatus::*;

    fn attempt() -> Attempt {
        Attempt {
            maybe_sent: false,
            calls: 1,
            max_attempts: 3,
            keyed_retries_safe: true,
            retry_count: 0,
            retry_base: Duration::from_millis(100),
            retry_max: Duration::from_secs(1),
        }
    }

    fn written(step: Step) -> Transition {
        match step {
            Step::Write(transition) => transition,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    fn uncertain() -> ProviderOutcome {
        ProviderOutcome::Uncertain {
            cause: "timed out".into(),
        }
    }

    fn rejected() -> ProviderOutcome {
        ProviderOutcome::Rejected {
            status: 409,
            detail: "conflict".into(),
        }
    }

    fn not_sent() -> ProviderOutcome {
        ProviderOutcome::NotSent {
            cause: "refused".into(),
        }
    }

    #[test]
    fn success_records_the_reference() {
        let t = written(after_answer(
            ProviderOutcome::Succeeded {
                reference: "pay_1".into(),
            },
            &attempt(),
        ));
        assert_eq!(t.to, Succeeded);
        assert_eq!(t.provider_reference.as_deref(), Some("pay_1"));
    }

    #[test]
    fn a_decline_fails_with_the_code_even_after_an_uncertain_attempt() {
        let answer = || ProviderOutcome::Declined {
            reference: Some("pay_2".into()),
            code: "card_declined".into(),
        };
        for maybe_sent in [false, true] {
            let t = written(after_answer(
                answer(),
                &Attempt {
                    maybe_sent,
                    ..attempt()
                },
            ));
            assert_eq!(t.to, Failed);
            assert!(t.last_error.unwrap().contains("card_declined"));
        }
    }

    #[test]
    fn pending_goes_to_the_reconciler_with_its_reference() {
        let t = written(after_answer(
            ProviderOutcome::Pending {
                reference: Some("pay_3".into()),
            },
            &attempt(),
        ));
        assert_eq!(t.to, Unknown);
        assert_eq!(t.provider_reference.as_deref(), Some("pay_3"));
    }

    #[test]
    fn a_first_hand_refusal_is_a_failure() {
        let t = written(after_answer(rejected(), &attempt()));
        assert_eq!(t.to, Failed);
        assert!(t.last_error.unwrap().contains("HTTP 409"));
    }

    #[test]
    fn a_refusal_after_an_uncertain_attempt_proves_nothing() {
        let step = after_answer(
            rejected(),
            &Attempt {
                maybe_sent: true,
                ..attempt()
            },
        );
        assert_eq!(written(step).to, Unknown);
    }

    #[test]
    fn not_sent_is_requeued_with_backoff_until_the_attempts_run_out() {
        let step = after_answer(
            not_sent(),
            &Attempt {
                retry_count: 2,
                ..attempt()
            },
        );
        // The third requeue waits base·2² with full jitter: 200..=400 ms.
        match step {
            Step::Requeue { delay, error } => {
                assert!((200..=400).contains(&delay.as_millis()), "{delay:?}");
                assert_eq!(error, "refused");
            }
            other => panic!("expected a requeue, got {other:?}"),
        }
        let last = after_answer(
            not_sent(),
            &Attempt {
                calls: 3,
                ..attempt()
            },
        );
        let t = written(last);
        assert_eq!(t.to, Failed);
        assert!(t
            .last_error
            .unwrap()
            .contains("never reached the provider after 3"));
    }

    #[test]
    fn not_sent_after_an_uncertain_attempt_is_never_a_failure() {
        let retry = after_answer(
            not_sent(),
            &Attempt {
                maybe_sent: true,
                ..attempt()
            },
        );
        assert!(matches!(retry, Step::RetrySameKey { .. }));
        let out = after_answer(
            not_sent(),
            &Attempt {
                maybe_sent: true,
                calls: 3,
                ..attempt()
            },
        );
        assert_eq!(written(out).to, Unknown);
    }

    #[test]
    fn an_uncertain_answer_is_retried_under_the_same_key_then_unknown_never_failed() {
        assert_eq!(
            after_answer(uncertain(), &attempt()),
            Step::RetrySameKey {
                cause: "timed out".into()
            }
        );
        let exhausted = after_answer(
            uncertain(),
            &Attempt {
                calls: 3,
                ..attempt()
            },
        );
        assert_eq!(written(exhausted).to, Unknown);
        let unsafe_retries = after_answer(
            uncertain(),
            &Attempt {
                keyed_retries_safe: false,
                ..attempt()
            },
        );
        let t = written(unsafe_retries);
        assert_eq!(t.to, Unknown);
        assert_eq!(t.last_error.as_deref(), Some("timed out"));
    }

    #[test]
    fn no_uncertain_answer_ever_fails() {
        for maybe_sent in [false, true] {
            for calls in 1..=4 {
                for keyed_retries_safe in [false, true] {
                    let a = Attempt {
                        maybe_sent,
                        calls,
                        keyed_retries_safe,
                        ..attempt()
                    };
                    if let Step::Write(t) = after_answer(uncertain(), &a) {
                        assert_ne!(t.to, Failed, "{a:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_uncertain_answer_the_provider_says_not_to_retry_goes_to_the_reconciler_at_once() {
        let step = after_answer(
            ProviderOutcome::UncertainFinal {
                cause: "Stripe api_error".into(),
            },
            &attempt(),
        );
        assert_eq!(written(step).to, Unknown);
    }

    fn claim() -> Claim {
        Claim {
            taken_over: false,
            attempts: 1,
            max_attempts: 3,
            keyed_retries_safe: true,
        }
    }

    #[test]
    fn a_fresh_claim_is_sent() {
        assert_eq!(before_call(&claim()), None);
        assert_eq!(
            before_call(&Claim {
                attempts: 9,
                ..claim()
            }),
            None
        );
    }

    #[test]
    fn a_takeover_is_re_sent_only_with_keyed_retries_and_attempts_left() {
        let taken = Claim {
            taken_over: true,
            attempts: 2,
            ..claim()
        };
        assert_eq!(before_call(&taken), None);
        let no_keyed = before_call(&Claim {
            keyed_retries_safe: false,
            ..taken
        });
        assert_eq!(no_keyed.unwrap().to, OperationStatus::Unknown);
        let exhausted = before_call(&Claim {
            attempts: 4,
            ..taken
        })
        .unwrap();
        assert_eq!(exhausted.to, OperationStatus::Unknown);
        assert!(exhausted.last_error.unwrap().contains("after 3 attempts"));
    }
}
